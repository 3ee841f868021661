"""Independent runs of the bench (simulations, trainings) on the cores there are.

A ``Pool`` is a ``desched.bench.learning.Mapper``: ``pool(fn, args)`` is
``[fn(*a) for a in args]``, in the order of ``args``, wherever the calls run:

- ``jobs <= 1``, or a single call: here, one after the other;
- ``jobs > 1``: on ``jobs`` spawned processes (``ProcessPoolExecutor``), started on first use
  and kept until ``close``, so that a run of many steps pays the start-up (an import of
  desched, numpy and polars per process: about a second each) once; told to stop, a
  process ends without the interpreter's teardown (``_ends_quickly``), which ``close``
  would otherwise wait for;
- ``address`` given: on the Dask cluster at that scheduler address (``distributed.Client``),
  whatever ``jobs`` says; an address that no scheduler answers is a ``DeschedError`` within
  ``connect_timeout_s`` (``connect``).

Every call is a function of its arguments alone (the simulator and the fits are
deterministic and take no state from the caller), so the results are the serial run's, bit
for bit (``tests/test_pool.py``). ``fn`` must be importable by name (a module-level
function) and its arguments picklable. The processes are spawned, not forked: they inherit
no thread, lock or Prefect state of the caller. Nothing here imports Prefect.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any, Self


def _ends_quickly() -> None:
    """A pool process's initializer: when the process ends (its executor told it to stop,
    every call it took answered), it skips the interpreter's teardown, which frees every
    object and module one at a time (torch, LightGBM, polars, Prefect: 1-2 s of a
    demo's ``close`` here). Its results are already sent: the executor's result queue
    writes synchronously, with no feeder thread. Exit handlers registered after this one
    (by the modules the calls imported) still run first; then logging and the standard
    streams are flushed and the process exits with status 0, a normal worker's."""
    import atexit

    atexit.register(exit_now)


def exit_now() -> None:
    """End this process at once with status 0, without the interpreter's teardown: logging
    and the standard streams flushed first (a pool process's end, ``_ends_quickly``, and a
    command's, ``desched.cli.exit_without_teardown``)."""
    import logging
    import sys

    swf = sys.modules.get("desched.swf")
    if swf is not None:  # the exit hooks do not run: the notes file it made goes now
        swf.drop_shared_notes()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    os._exit(0)


BACKGROUND_NICE = 10
"""How much lower a ``Pool.submit`` process's CPU priority is than the caller's (``os.nice``):
it takes the cores the mapped calls and the caller leave idle, and about a tenth of one
where it competes with them. With Linux's autogroup scheduling (on by default on most
distributions), priorities rank only among the processes of one session: other work on the
machine shares the cores with the whole run, not with its background jobs alone."""


def _in_background() -> None:
    """A ``Pool.submit`` process's initializer: ``_ends_quickly``, at ``BACKGROUND_NICE``
    (where the system lets a process lower its priority)."""
    _ends_quickly()
    with contextlib.suppress(AttributeError, OSError):
        os.nice(BACKGROUND_NICE)


def default_jobs() -> int:
    """One process per core (``os.cpu_count()``; 1 when unknown)."""
    return os.cpu_count() or 1


class Pool:
    """A mapper over ``jobs`` processes or a Dask cluster (module docstring); a context
    manager that closes what it started."""

    def __init__(self, jobs: int | None = None, address: str | None = None,
                 connect_timeout_s: float = 10.0) -> None:
        self.jobs = default_jobs() if jobs is None else max(1, int(jobs))
        self.address = address or None
        self.connect_timeout_s = connect_timeout_s
        self._executor: Executor | None = None
        self._client: Any = None
        self._background: list[Executor] = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def parallel(self) -> bool:
        """Whether calls leave this process."""
        return self.address is not None or self.jobs > 1

    def describe(self) -> str:
        """``dask at tcp://...``, ``2 processes`` or ``serial``."""
        if self.address is not None:
            return f"dask at {self.address}"
        return f"{self.jobs} processes" if self.jobs > 1 else "serial"

    def __call__(self, fn: Callable[..., Any], args: Sequence[tuple[Any, ...]], *,
                 done: Callable[[int], None] | None = None,
                 costs: Sequence[float] | None = None) -> list[Any]:
        """``[fn(*a) for a in args]``; ``done(i)``, when given, is called here as call ``i``
        finishes (in the order they finish: progress, not results).

        ``costs``, one per call (any unit: rows, tasks), hands the calls out costliest first
        (ties in their order), so that the longest is not the last to start and the
        processes finish together; the results stay in the order of ``args``."""
        calls = list(args)
        if costs is not None and self.parallel and len(calls) > 1:
            if len(costs) != len(calls):
                raise ValueError(f"{len(costs)} costs for {len(calls)} calls")
            order = sorted(range(len(calls)), key=lambda i: -costs[i])
            ranked = self(fn, [calls[i] for i in order],
                          done=None if done is None else lambda j: done(order[j]))
            results: list[Any] = [None] * len(calls)
            for i, result in zip(order, ranked, strict=True):
                results[i] = result
            return results
        if self.address is not None:
            return self._dask(fn, calls, done)
        if self.jobs <= 1 or len(calls) <= 1:
            results = []
            for i, a in enumerate(calls):
                results.append(fn(*a))
                if done is not None:
                    done(i)
            return results
        from concurrent.futures import as_completed

        executor = self._processes()
        futures = [executor.submit(fn, *a) for a in calls]
        if done is not None:
            index = {f: i for i, f in enumerate(futures)}
            for f in as_completed(futures):
                if f.exception() is None:
                    done(index[f])
        return [f.result() for f in futures]

    def submit(self, fn: Callable[..., Any], *args: Any) -> Job:
        """Start ``fn(*args)`` now, in the background (``Job.result`` waits for it): on a
        process of its own beside the ``jobs`` that calls are mapped on, at a lower CPU
        priority (``BACKGROUND_NICE``): it fills the cores the caller's serial parts leave
        idle and yields them to the mapped calls, whose results the caller waits for
        first; or on the Dask cluster. On a serial pool it runs when its result is asked
        for."""
        if self.address is not None:
            return Job(self._dask_client().submit(fn, *args, pure=False))
        if self.jobs <= 1:
            return Job(None, lambda: fn(*args))
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context

        from desched.swf import share_notes

        share_notes()  # a note (jobs an SWF import dropped) said once between the processes
        executor = ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn"),
                                       initializer=_in_background)
        self._background.append(executor)
        return Job(executor.submit(fn, *args))

    def _processes(self) -> Executor:
        if self._executor is None:
            from concurrent.futures import ProcessPoolExecutor
            from multiprocessing import get_context

            from desched.swf import share_notes

            share_notes()  # a note said once between this process and the pool's
            self._executor = ProcessPoolExecutor(max_workers=self.jobs,
                                                 mp_context=get_context("spawn"),
                                                 initializer=_ends_quickly)
        return self._executor

    def connect(self) -> None:
        """Reach the Dask scheduler now (nothing to do without an address), so that a wrong
        address fails before any work: ``DeschedError`` in one line, at once for an unknown
        scheme, a missing port or a host that does not resolve, after ``connect_timeout_s``
        where no scheduler answers."""
        if self.address is not None:
            self._dask_client()

    def _dask_client(self) -> Any:
        if self._client is None:
            from distributed import Client
            from distributed.comm.addressing import parse_address
            from distributed.comm.registry import get_backend

            from desched.errors import DeschedError

            try:
                scheme, location = parse_address(str(self.address))
                get_backend(scheme).resolve_address(location)  # type: ignore[no-untyped-call]
                self._client = Client(self.address, timeout=self.connect_timeout_s,  # type: ignore[no-untyped-call]
                                      set_as_default=False)
            except (OSError, TimeoutError, ValueError) as exc:
                reason = " ".join(str(exc).split()) or type(exc).__name__
                raise DeschedError(f"no Dask scheduler at {self.address}: {reason}") from None
        return self._client

    def _dask(self, fn: Callable[..., Any], calls: list[tuple[Any, ...]],
              done: Callable[[int], None] | None) -> list[Any]:
        client = self._dask_client()
        futures = [client.submit(fn, *a, pure=False) for a in calls]
        if done is not None:
            from distributed import as_completed

            index = {f.key: i for i, f in enumerate(futures)}
            for f in as_completed(futures, loop=client.loop):  # type: ignore[no-untyped-call]
                if f.status == "finished":
                    done(index[f.key])
        return list(client.gather(futures))

    def close(self) -> None:
        """Stop the processes (or leave the cluster) this pool started; it can be used again."""
        for executor in [*self._background, self._executor]:
            if executor is not None:
                executor.shutdown(wait=True, cancel_futures=True)
        self._executor, self._background = None, []
        if self._client is not None:
            self._client.close()
            self._client = None


class Job:
    """One call started by ``Pool.submit``: a future (of a process pool or Dask), or a call
    deferred until its result is asked for."""

    def __init__(self, future: Any, call: Callable[[], Any] | None = None) -> None:
        self._future = future
        self._call = call
        self._value: Any = None

    def result(self) -> Any:
        """The call's return value (its exception, raised here)."""
        if self._call is not None:
            self._value, self._call = self._call(), None
            return self._value
        if self._future is None:
            return self._value
        return self._future.result()


SERIAL = Pool(jobs=1)
"""The pool that runs everything here."""
