"""Prefect tasks of policy evaluation: thin wrappers around ``desched.bench.evaluate``.

A cell is pure and cheap to retry; results are not cached (a trace file behind a spec may
change), and the tasks that take whole summaries skip input hashing.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE, TASK_SOURCE, CacheKeyFnPolicy
from prefect.context import TaskRunContext

from desched.bench import evaluate
from desched.bench.evaluate import EvalCell, EvalRow, EvaluationRun, cells_of

__all__ = [  # the tasks, and what the evaluate flow reads of desched.bench through this module
    "EvalCell", "EvaluationRun", "aggregate_cells", "cells_of", "evaluate_cell", "publish_evaluation",
    "write_evaluation",
]


def _cell_key(ctx: TaskRunContext, inputs: dict[str, Any]) -> str:
    """A cell's cache key: its inputs, with a trace given as a file by the file's SHA-256
    (a scenario name, with its parameters, is its own content)."""
    trace = str(inputs["trace"])
    path = Path(trace.split("?", 1)[0])
    content = file_sha256(path) if path.is_file() else trace
    return hashlib.sha256(json.dumps(
        [content, trace, inputs["policy"], inputs["seed"], inputs["workers"],
         inputs.get("window_s")], default=str).encode()).hexdigest()


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


CELL_INPUTS = CacheKeyFnPolicy(cache_key_fn=_cell_key)
"""What a cell's result is a function of: its trace's content, policy, seed, workers and
window (``_cell_key``); with ``TASK_SOURCE``, an edited task computes afresh."""


@task(name="evaluate-cell", retries=1, cache_policy=CELL_INPUTS + TASK_SOURCE)
def evaluate_cell(
    trace: str, policy: str, seed: int, workers: int, window_s: float | None = None
) -> EvalCell:
    """One (trace, policy, seed) simulation and its summary (``evaluate.run_cell``): a pure
    function of its inputs, so cached on them (``CELL_INPUTS``; the simulator is
    deterministic for a seed)."""
    return evaluate.run_cell(trace, policy, seed, workers, window_s)


@task(cache_policy=NONE)
def aggregate_cells(cells: list[EvalCell], baseline: str | None) -> list[EvalRow]:
    """Means with 95 % intervals over seeds, drift series, paired differences from baseline."""
    return evaluate.aggregate(cells, baseline)


@task(retries=2, retry_delay_seconds=2, cache_policy=NONE)
def write_evaluation(
    out: str, settings: dict[str, Any], rows: list[EvalRow], cells: list[EvalCell]
) -> dict[str, str]:
    """``evaluation.json``, ``table.parquet``, ``drift.parquet`` (``write_evaluation``)."""
    paths = evaluate.write_evaluation(out, settings, rows, cells)
    return {k: str(v) for k, v in paths.items()}


@task(cache_policy=NONE)
def publish_evaluation(rows: list[EvalRow], out: str | None) -> None:
    """A table artifact (means and interval bounds) and a markdown artifact (mean ± half)."""
    table = [
        {k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()
         if not k.endswith(("_diff_lo", "_diff_hi"))}
        for r in evaluate.table_rows(rows)
    ]
    create_table_artifact(table=table, key="policy-evaluation",
                          description="Policies x traces: mean and 95 % interval over seeds")
    where = f"\n\nFiles: `{out}` (evaluation.json, table.parquet, drift.parquet)." if out else ""
    create_markdown_artifact(markdown="# Policy evaluation\n\n" + evaluate.markdown_table(rows)
                             + where, key="policy-evaluation-summary")
