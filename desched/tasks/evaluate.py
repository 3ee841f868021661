"""Prefect tasks of policy evaluation: thin wrappers around ``desched.bench.evaluate``.

A cell is pure and cheap to retry; results are not cached (a trace file behind a spec may
change), and the tasks that take whole summaries skip input hashing.
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE

from desched.bench import evaluate
from desched.bench.evaluate import EvalCell, EvalRow


@task(name="evaluate-cell", retries=1, cache_policy=NONE, tags=["simulation"])
def evaluate_cell(
    trace: str, policy: str, seed: int, workers: int, window_s: float | None = None
) -> EvalCell:
    """One (trace, policy, seed) simulation and its summary (``evaluate.run_cell``)."""
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
