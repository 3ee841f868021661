"""Flow ``evaluate-policies``: policies x traces x seeds, in parallel on a Prefect task runner.

Every cell is one simulation (``desched.bench.evaluate.run_cell``); the cells run on the task runner
named by ``runner``: ``process`` (the default: the simulator is pure Python, so threads share
one core), ``thread``, or ``dask`` / ``ray`` through ``prefect-dask`` / ``prefect-ray`` when
installed (``address`` points at an existing cluster; without it a local one starts), so a
sweep can run on a cluster::

    from desched.flows.evaluate import evaluate_policies
    evaluate_policies(traces=["flood", "steady"], policies=["ifs-memoryless", "ifs-counter"],
                      seeds=[0, 1, 2, 3, 4], workers=8)
"""

from __future__ import annotations

import time
from typing import Any, Literal

from prefect import flow, unmapped
from prefect.task_runners import ProcessPoolTaskRunner, TaskRunner, ThreadPoolTaskRunner

from desched.errors import DeschedError
from desched.tasks.evaluate import (
    EvalCell,
    EvaluationRun,
    aggregate_cells,
    cells_of,
    evaluate_cell,
    publish_evaluation,
    write_evaluation,
)
from desched.today import TODAY_SCORER

Runner = Literal["process", "thread", "dask", "ray"]


def check_scheduler(address: str, timeout_s: float = 3.0) -> None:
    """Refuse, in one line and within ``timeout_s``, a scheduler address (``tcp://host:port``)
    that nothing answers on, instead of the client's long connect retries."""
    import socket
    from urllib.parse import urlsplit

    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host or not port:
        raise DeschedError(f"address {address!r}: expected tcp://HOST:PORT")
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise DeschedError(f"address {address!r}: no Dask scheduler answers ({reason}); start "
                           "one, or leave address out for a local cluster") from None


def task_runner(runner: Runner, max_parallel: int | None = None,
                address: str | None = None) -> TaskRunner[Any]:
    """The Prefect task runner called ``runner``; an absent integration is a one-line error."""
    if runner == "thread":
        return ThreadPoolTaskRunner(max_workers=max_parallel)
    if runner == "process":
        return ProcessPoolTaskRunner(max_workers=max_parallel)
    if runner == "dask":
        try:
            from prefect_dask.task_runners import DaskTaskRunner
        except ImportError:
            raise DeschedError("runner 'dask' needs prefect-dask (pip install prefect-dask)") from None
        # one thread per worker process: the simulator is pure Python (the GIL). Annotated,
        # so that mypy passes with prefect-dask installed (typed) or not (Any).
        local = {"n_workers": max_parallel, "threads_per_worker": 1, "processes": True}
        if address:
            check_scheduler(address)
        dask: TaskRunner[Any] = (
            DaskTaskRunner(address=address) if address else DaskTaskRunner(cluster_kwargs=local)
        )
        return dask
    if runner == "ray":
        try:
            from prefect_ray import RayTaskRunner
        except ImportError:
            raise DeschedError("runner 'ray' needs prefect-ray (pip install prefect-ray)") from None
        return RayTaskRunner(address=address) if address else RayTaskRunner()  # type: ignore[no-any-return]
    raise DeschedError(f"unknown runner {runner!r} (process, thread, dask, ray)")


@flow(name="evaluate-cells")
def run_cells(
    cells: list[tuple[str, str, int]], workers: int, window_s: float | None
) -> list[EvalCell]:
    """Every cell as one task run on this flow's task runner, results in cell order."""
    futures = evaluate_cell.map(
        trace=[c[0] for c in cells], policy=[c[1] for c in cells], seed=[c[2] for c in cells],
        workers=unmapped(workers), window_s=unmapped(window_s),
    )
    return [f.result() for f in futures]


@flow(name="evaluate-policies", log_prints=True)
def evaluate_policies(
    traces: list[str],
    policies: list[str],
    seeds: list[int] = [0, 1, 2, 3, 4],  # noqa: B006 (a flow parameter default, never mutated)
    workers: int = 8,
    runner: Runner = "process",
    max_parallel: int | None = None,
    address: str | None = None,
    baseline: str | None = TODAY_SCORER,
    window_s: float | None = None,
    out: str | None = None,
) -> EvaluationRun:
    """Run every policy spec on every trace spec and seed (``desched.bench.evaluate``), aggregate
    over seeds (mean, 95 % t-interval, per-window drift, paired difference from
    ``baseline`` when it is among the policies), write ``out`` (default
    ``data/evaluations/<UTC time>``) and publish the table. Returns ``out`` and the rows."""
    cells = cells_of(traces, policies, seeds)
    out = out or f"data/evaluations/{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    print(f"{len(cells)} cells on the {runner} task runner")
    results = run_cells.with_options(task_runner=task_runner(runner, max_parallel, address))(
        cells, workers, window_s)
    rows = aggregate_cells(results, baseline if baseline in policies else None)
    settings = {"traces": traces, "policies": policies, "seeds": seeds, "workers": workers,
                "runner": runner, "baseline": baseline, "window_s": window_s}
    paths = write_evaluation(out, settings, rows, results)
    publish_evaluation(rows, out)
    return EvaluationRun(out=out, files=paths, rows=rows)
