"""Trace and policy specs: how a name and a seed become one trace, and a policy to run on it.

A *trace spec* names a workload and how a seed turns it into one trace:

- a scenario of ``desched.workloads`` (``flood``, ``steady?tasks=2000&load=0.9``): seed ``s`` is
  the trace ``generate(name, ..., seed=s)``, a fresh draw of the whole workload;
- a trace file, Parquet or SWF (``trace.parquet``, ``log.swf.gz?slice_tasks=2000&load=0.9``):
  seed ``s`` is the ``s``-th *disjoint time slice* of ``slice_tasks`` consecutive tasks (in
  submit order; default ``min(2000, rows // 8)``, ``AUTO_SLICES``), shifted to start at 0; ``load``, when given, rescales the slice's submit
  times so that its offered load against the workers is ``load`` (durations are untouched).
  Slices do not overlap, so two seeds never share a task; they are not independent draws
  (neighbouring weeks of one machine are correlated), which the intervals do not model.

Either kind takes ``seeds`` (``0-3;9`` is 0, 1, 2, 3, 9), which then replace, for that trace
alone, the seeds a caller gives for all traces, so that one sweep can hold scenarios (seeds
100-109) and slices of a log (seeds 40-49).

A *policy spec* is a registered name with parameters in the same syntax
(``ifs-memoryless?w_backlog=0.3&w_wait=0.7``, ``ifs-counter?weights=models/weights/x``);
``policy_spec`` writes one.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode

import polars as pl

from desched.errors import DeschedError
from desched.swf import log_stem

SCENARIO_DEFAULTS: dict[str, Any] = {"tasks": 2000, "load": 0.9}
"""Defaults of a scenario spec that names no size: small enough for sweeps of many seeds."""

DEFAULT_SLICE_TASKS = 2000
AUTO_SLICES = 8
"""A file spec without ``slice_tasks`` is cut into slices of ``min(DEFAULT_SLICE_TASKS,
rows // AUTO_SLICES)`` tasks (at least 1): a file of any size then has the 8 slices of the
default tuning split (3 to train, 5 held out) and the 5 seeds of a default evaluation."""


def _parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    base, _, query = spec.strip().partition("?")
    if not base:
        raise DeschedError(f"{spec!r}: empty name")
    if any("=" not in part for part in query.split("&") if query):
        raise DeschedError(f"{spec!r}: expected NAME?KEY=VALUE&KEY=VALUE")
    pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=False) if query else []
    options: dict[str, str] = {}
    for key, value in pairs:
        if not key:
            raise DeschedError(f"{spec!r}: expected NAME?KEY=VALUE&KEY=VALUE")
        if key in options:
            raise DeschedError(f"{spec!r}: {key!r} given twice")
        if not value.strip():  # 'weights=' had been taken for no card at all
            raise DeschedError(f"{spec!r}: {key!r} has no value")
        options[key] = value
    return base, options


@dataclass(frozen=True, slots=True)
class TraceSpec:
    """A workload and the rule that turns a seed into one of its traces (module docstring)."""

    spec: str
    name: str
    scenario: str | None
    path: str | None
    tasks: int
    tenants: int | None
    load: float | None
    slice_tasks: int
    seeds: tuple[int, ...] | None = None

    @classmethod
    def parse(cls, spec: str) -> TraceSpec:
        """``NAME[?KEY=VALUE&...]``: a scenario name or a trace file (Parquet or SWF).

        Scenario keys: ``tasks``, ``tenants``, ``load``. File keys: ``slice_tasks``, ``load``.
        Both: ``seeds`` (module docstring).
        """
        from desched.workloads import SCENARIOS

        base, options = _parse_spec(spec)
        if base not in SCENARIOS and not Path(base).is_file():  # before its options' names
            what = "a folder, not a trace file" if Path(base).is_dir() else "an existing file"
            raise DeschedError(f"trace {spec!r}: neither a scenario ({', '.join(SCENARIOS)}) "
                               f"nor {what}")
        allowed = {"tasks", "tenants", "load"} if base in SCENARIOS else {"slice_tasks", "load"}
        allowed.add("seeds")
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise DeschedError(f"trace {spec!r}: unknown option {unknown[0]!r} "
                               f"(options: {', '.join(sorted(allowed))})")
        load = _option(spec, options, "load", float)
        tasks = _option(spec, options, "tasks", int)
        tasks = SCENARIO_DEFAULTS["tasks"] if tasks is None else tasks
        tenants = _option(spec, options, "tenants", int)
        slice_tasks = _option(spec, options, "slice_tasks", int)
        slice_tasks = DEFAULT_SLICE_TASKS if slice_tasks is None else slice_tasks
        try:
            seeds = parse_seeds(options["seeds"]) if "seeds" in options else None
        except DeschedError as exc:
            raise DeschedError(f"trace {spec!r}: {exc}") from None
        if load is not None and not (math.isfinite(load) and load > 0):
            raise DeschedError(f"trace {spec!r}: load must be > 0, got {load}")
        if slice_tasks < 1:
            raise DeschedError(f"trace {spec!r}: slice_tasks must be >= 1, got {slice_tasks}")
        if base in SCENARIOS:
            return cls(spec, base, base, None, tasks, tenants,
                       SCENARIO_DEFAULTS["load"] if load is None else load, slice_tasks, seeds)
        path = Path(base)
        if "slice_tasks" not in options:
            rows = _read_file(str(path)).height
            slice_tasks = max(1, min(DEFAULT_SLICE_TASKS, rows // AUTO_SLICES))
        name = log_stem(path).removesuffix(".parquet")
        return cls(spec, name, None, str(path), tasks, tenants, load, slice_tasks, seeds)

    def rows(self) -> int | None:
        """Tasks of a file trace; ``None`` for a scenario."""
        return None if self.path is None else _read_file(self.path).height

    def slices(self) -> int | None:
        """Disjoint slices of a file trace (the seeds it has); ``None`` for a scenario."""
        rows = self.rows()
        return None if rows is None else rows // self.slice_tasks

    def materialize(self, seed: int, workers: int) -> pl.DataFrame:
        """The trace of ``seed`` (a regenerated scenario, or slice ``seed`` of the file)."""
        if seed < 0:
            raise DeschedError(f"trace {self.spec!r}: seed must be >= 0, got {seed}")
        if self.scenario is not None:
            from desched.workloads import generate

            return generate(self.scenario, tasks=self.tasks, tenants=self.tenants,
                            load=self.load if self.load is not None else 0.9,
                            workers=workers, seed=seed)
        assert self.path is not None
        full = _read_file(self.path)
        count = full.height // self.slice_tasks
        if seed >= count:
            raise DeschedError(past_last_slice(self, seed, count))
        part = full.slice(seed * self.slice_tasks, self.slice_tasks)
        t0 = float(part["submit_s"].to_numpy().min())
        part = part.with_columns(pl.col("submit_s") - t0)
        if self.load is not None:
            span = float(part["submit_s"].to_numpy().max())
            if not span > 0:
                raise DeschedError(
                    f"trace {self.spec!r}: slice {seed} is submitted at one instant, so "
                    f"load={self.load:g} cannot be applied (leave load out to run it as it is)")
            mean_s = float(part["duration_s"].to_numpy().mean())
            offered = part.height / span * mean_s / workers
            part = part.with_columns(pl.col("submit_s") * (offered / self.load))
        return part


_N = TypeVar("_N", int, float)


def _option(spec: str, options: Mapping[str, str], key: str, kind: type[_N]) -> _N | None:
    """``options[key]`` read as ``kind``, ``None`` where absent; a one-line error naming the
    spec, the key and the value where it is not a number of that kind."""
    if key not in options:
        return None
    try:
        return kind(options[key])
    except ValueError:
        what = "an integer" if kind is int else "a number"
        raise DeschedError(f"trace {spec!r}: {key} must be {what}, got "
                           f"{options[key]!r}") from None


def past_last_slice(tspec: TraceSpec, seed: int, count: int) -> str:
    """The one-line error for a seed past the last slice of a file trace, naming the fixes."""
    if count == 0:
        return (f"trace {tspec.spec!r}: fewer tasks than one slice of {tspec.slice_tasks}; "
                f"give smaller slices ('{tspec.path}?slice_tasks=N')")
    return (f"trace {tspec.spec!r}: seed {seed} is past its last slice ({count} slice(s) of "
            f"{tspec.slice_tasks} task(s): seeds 0..{count - 1}); give seeds up to {count - 1} "
            f"(e.g. 0-{max(count - 1, 0)}) or smaller slices ('{tspec.path}?slice_tasks=N')")


def parse_seeds(text: str) -> tuple[int, ...]:
    """``"0-3;9"`` -> ``(0, 1, 2, 3, 9)``; ``,`` separates too. Refuses an empty or negative list."""
    seeds: list[int] = []
    for part in text.replace(",", ";").split(";"):
        part = part.strip()
        if not part:
            continue
        lo, dash, hi = part.partition("-")
        try:
            first, last = int(lo), int(hi) if dash else int(lo)
        except ValueError:
            raise DeschedError(f"seeds {text!r}: expected integers and ranges like 0-3;9") from None
        if first < 0 or last < first:
            raise DeschedError(f"seeds {text!r}: {part!r} is not a range of seeds >= 0")
        seeds.extend(range(first, last + 1))
    if not seeds:
        raise DeschedError(f"seeds {text!r}: no seed")
    return tuple(dict.fromkeys(seeds))


@lru_cache(maxsize=8)
def _read_file(path: str) -> pl.DataFrame:
    """A Parquet trace or an SWF log, sorted by submit time (stable: trace order in a tie)."""
    from desched.swf import read_trace_or_swf

    return read_trace_or_swf(path).sort("submit_s", maintain_order=True)


def fingerprint(frame: pl.DataFrame) -> str:
    """A content hash of a trace's tenants, submit times and durations (16 hex digits)."""
    digest = hashlib.sha256()
    for column in ("tenant", "submit_s", "duration_s"):
        digest.update(frame[column].to_numpy().tobytes() if column != "tenant"
                      else "\x1f".join(frame[column].to_list()).encode())
    return digest.hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """A registered policy with its parameters, from ``NAME[?KEY=VALUE&...]``."""

    spec: str
    name: str
    params: tuple[tuple[str, str], ...]

    @classmethod
    def parse(cls, spec: str) -> PolicySpec:
        from desched.policies import parse_params

        name, options = _parse_spec(spec)
        parse_params(name, options)  # refuse a bad name or parameter before anything runs
        return cls(spec, name, tuple(sorted(options.items())))


def policy_spec(name: str, params: Mapping[str, Any] | None = None) -> str:
    """The policy spec of ``name`` with ``params`` (``NAME`` alone without any)."""
    return f"{name}?{urlencode(dict(params), safe='/:')}" if params else name


def workers_for(frame: pl.DataFrame, load: float) -> int:
    """The worker count whose offered load ``total work / submission span / workers`` is
    closest to ``load`` (at least 1)."""
    span = float(frame["submit_s"].max()) - float(frame["submit_s"].min())  # type: ignore[arg-type]
    work = float(frame["duration_s"].sum())
    return max(1, round(work / (span * load))) if span > 0 else 1


def offered_load(frame: pl.DataFrame, workers: int) -> float:
    span = float(frame["submit_s"].max()) - float(frame["submit_s"].min())  # type: ignore[arg-type]
    return float(frame["duration_s"].sum()) / (span * workers) if span > 0 else math.inf
