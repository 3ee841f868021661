"""Log ingestion throughput and memory, against DuckDB's own ``read_parquet`` insert.

Synthetic decision logs in the exact format of ``desched.runs`` (a decision and a completion
per task, in time order, with the policy's score components and the task's features) are
written as ``--files`` Parquet files, ``--rows`` records in all. Then, each in a fresh
process and a fresh warehouse, median of ``--repeats``:

- ``desched``: what the ``ingest-logs`` flow's tasks run (``plan`` + ``ingest_file`` per
  file): batches read with pyarrow, typed and checked with polars, the GX audit sample,
  loaded into ``decisions``/``completions`` with DuckDB. The GX context is built before the
  clock starts (a once-per-process cost, reported as ``gx_startup_s``);
- ``anchor``: ``INSERT INTO t SELECT * FROM read_parquet([...])`` on the same files into one
  table of their columns: DuckDB's own fastest load, with no checks and no split by kind;
- ``desched, GX on every row`` (once): the same with ``audit_rows=None``.

Rows per second are over wall time and over CPU time (user + system of the child, all its
threads): on a shared machine the CPU figure moves far less. Peak memory is the child's
``ru_maxrss``, which includes about 420 MB of imports (GX, pandas, pyarrow, DuckDB).

    .venv/bin/python benchmarks/bench_ingest.py             # 5M rows in 10 files
    .venv/bin/python benchmarks/bench_ingest.py --quick     # 200k rows, one repeat
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np
import polars as pl

from benchmarks.common import machine, markdown_table, write_json

TASK_TYPES = ("ocr_clean", "extract", "classify", "embed")


def synthetic_log(rows: int, seed: int, first_task: int = 0) -> pl.DataFrame:
    """``rows`` records (``rows // 2`` tasks), shaped like ``desched.runs.decision_log_frame``."""
    rng = np.random.default_rng(seed)
    n = rows // 2
    submit = first_task * 0.25 + np.cumsum(rng.exponential(0.25, n))
    wait = rng.exponential(2.0, n)
    duration = rng.lognormal(0.0, 0.8, n) + 0.01
    start = submit + wait
    end = start + duration
    ids = pl.Series("task_id", np.arange(first_task, first_task + n)).cast(pl.String)
    tenant = pl.Series("tenant", rng.integers(0, 50, n)).cast(pl.String)
    worker = rng.integers(0, 64, n)
    decisions = pl.DataFrame(
        {
            "t": start,
            "worker": worker,
            "task_id": "s" + ids,
            "tenant": "tenant" + tenant,
            "policy": pl.Series(["ifs-memoryless"]).extend_constant("ifs-memoryless", n - 1),
            "score": rng.random(n),
            "queue_len": rng.integers(1, 500, n),
            "tenant_backlog": rng.integers(1, 50, n),
            "wait_s": wait,
            "norm_backlog": rng.random(n),
            "norm_wait": rng.random(n),
            "kind": pl.Series(["decision"]).extend_constant("decision", n - 1),
            "_order": pl.Series([1]).extend_constant(1, n - 1),
        }
    )
    completions = pl.DataFrame(
        {
            "t": end,
            "worker": worker,
            "task_id": "s" + ids,
            "tenant": "tenant" + tenant,
            "task_type": pl.Series(np.array(TASK_TYPES)[rng.integers(0, 4, n)]),
            "submit_s": submit,
            "start_s": start,
            "duration_s": duration,
            "status": pl.Series(["ok"]).extend_constant("ok", n - 1),
            "peak_mem_mb": rng.uniform(100, 2000, n),
            "doc_bytes": rng.integers(1_000, 5_000_000, n),
            "pages": rng.integers(1, 40, n).astype(np.int32),
            "kind": pl.Series(["completion"]).extend_constant("completion", n - 1),
            "_order": pl.Series([0]).extend_constant(0, n - 1),
        }
    )
    log = pl.concat([decisions, completions], how="diagonal_relaxed").sort(["t", "_order"])
    log = log.drop("_order").with_row_index("seq").with_columns(pl.col("seq").cast(pl.Int64))
    first = ["kind", "seq", "t", "worker", "task_id", "tenant"]
    return log.select(first + [c for c in log.columns if c not in first])


def write_logs(folder: Path, rows: int, files: int) -> list[Path]:
    per_file = (rows // files) // 2 * 2
    paths = []
    for i in range(files):
        path = folder / f"run{i:03d}" / "decision-log.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        synthetic_log(per_file, seed=i, first_task=i * per_file).write_parquet(path)
        paths.append(path)
    return paths


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child_desched(logs: Path, db: Path, every_row: bool) -> dict[str, Any]:
    from desched.warehouse.audit import audit_samples, gx_auditor
    from desched.warehouse.ledger import plan
    from desched.warehouse.load import ingest_file
    from desched.warehouse.schema import open_warehouse, table_counts
    from desched.warehouse.settings import IngestSettings

    settings = IngestSettings(audit_rows=None) if every_row else IngestSettings()
    t0 = time.perf_counter()
    gx_auditor(settings.task_types)
    gx_startup = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), cpu_s()
    audited = 0
    with open_warehouse(db, settings.duckdb_memory_limit) as con:
        work, _ = plan(con, logs, settings)
        reports = []
        for item in work:
            report = ingest_file(con, item, settings)
            audited += report.audited_rows
            reports.append(report)
        counts = table_counts(con)
    audit_samples(reports, lambda: gx_auditor(settings.task_types))
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "gx_startup_s": gx_startup,
        "rows_loaded": counts["decisions"] + counts["completions"],
        "quarantined": counts["quarantine"],
        "gx_audited_rows": audited,
        "peak_rss_mb": peak_rss_mb(),
    }


def child_anchor(logs: Path, db: Path) -> dict[str, Any]:
    import duckdb

    files = sorted(str(p) for p in logs.rglob("*log*.parquet"))
    t0, c0 = time.perf_counter(), cpu_s()
    with duckdb.connect(str(db)) as con:
        con.execute(
            "CREATE TABLE decision_log AS SELECT * FROM read_parquet($files) LIMIT 0",
            {"files": files},
        ).fetchall()
        con.execute(
            "INSERT INTO decision_log SELECT * FROM read_parquet($files)", {"files": files}
        ).fetchall()
        rows = con.execute("SELECT count(*) FROM decision_log").fetchall()[0][0]
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    return {"wall_s": wall, "cpu_s": cpu, "rows_loaded": rows, "peak_rss_mb": peak_rss_mb()}


def measure(mode: str, logs: Path, scratch: Path) -> dict[str, Any]:
    db = scratch / f"{mode}.duckdb"
    for p in (db, db.with_suffix(".duckdb.wal")):
        p.unlink(missing_ok=True)
    cmd = [sys.executable, __file__, "--child", mode, "--logs", str(logs), "--db", str(db)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    db.unlink(missing_ok=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--files", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="200k rows, one repeat")
    parser.add_argument("--no-every-row", action="store_true", help="skip the GX-every-row run")
    parser.add_argument("--child", choices=("desched", "desched-every-row", "anchor"))
    parser.add_argument("--logs", type=Path)
    parser.add_argument("--db", type=Path)
    args = parser.parse_args()

    if args.child:
        if args.child == "anchor":
            result = child_anchor(args.logs, args.db)
        else:
            result = child_desched(args.logs, args.db, args.child == "desched-every-row")
        print(json.dumps(result))
        return

    if args.quick:
        args.rows, args.repeats = 200_000, 1
    scratch = Path(tempfile.mkdtemp(prefix="bench-ingest-"))
    try:
        logs = scratch / "logs"
        t0 = time.perf_counter()
        paths = write_logs(logs, args.rows, args.files)
        rows = sum(pl.scan_parquet(p).select(pl.len()).collect().item() for p in paths)
        bytes_on_disk = sum(p.stat().st_size for p in paths)
        print(f"{rows} rows in {args.files} files ({bytes_on_disk / 2**20:.0f} MiB), "
              f"written in {time.perf_counter() - t0:.1f} s", flush=True)
        runs: dict[str, list[dict[str, Any]]] = {"desched": [], "anchor": []}
        for i in range(args.repeats):
            for mode in ("anchor", "desched"):
                r = measure(mode, logs, scratch)
                assert r["rows_loaded"] == rows, (mode, r)
                runs[mode].append(r)
                print(f"  repeat {i}: {mode:8s} {r['wall_s']:7.2f} s wall {r['cpu_s']:7.2f} s CPU"
                      f"  {rows / r['wall_s']:>12,.0f} rows/s  peak {r['peak_rss_mb']:.0f} MB",
                      flush=True)
        if not args.no_every_row:
            r = measure("desched-every-row", logs, scratch)
            assert r["rows_loaded"] == rows, r
            runs["desched-every-row"] = [r]
            print(f"  GX on every row: {r['wall_s']:.2f} s  peak {r['peak_rss_mb']:.0f} MB",
                  flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    summary: dict[str, Any] = {}
    for mode, results in runs.items():
        wall = statistics.median(r["wall_s"] for r in results)
        cpu = statistics.median(r["cpu_s"] for r in results)
        summary[mode] = {
            "median_wall_s": wall,
            "median_cpu_s": cpu,
            "rows_per_s": rows / wall,
            "rows_per_cpu_s": rows / cpu,
            "peak_rss_mb": max(r["peak_rss_mb"] for r in results),
            "repeats": len(results),
        }
        if "gx_startup_s" in results[0]:
            summary[mode]["gx_startup_s"] = statistics.median(r["gx_startup_s"] for r in results)
            summary[mode]["gx_audited_rows"] = results[0]["gx_audited_rows"]
    ratio = summary["desched"]["median_wall_s"] / summary["anchor"]["median_wall_s"]
    cpu_ratio = summary["desched"]["median_cpu_s"] / summary["anchor"]["median_cpu_s"]
    payload = {
        "benchmark": "ingest",
        "machine": machine(),
        "rows": rows,
        "files": args.files,
        "parquet_mib": bytes_on_disk / 2**20,
        "summary": summary,
        "desched_over_anchor_time": ratio,
        "desched_over_anchor_cpu": cpu_ratio,
        "target": "desched within 2x of the anchor's time; peak RSS under 1.5 GB",
        "runs": runs,
    }
    out = write_json("ingest.json" if not args.quick else "ingest-quick.json", payload)
    table = [
        [mode, f"{s['median_wall_s']:.2f}", f"{s['rows_per_s']:,.0f}", f"{s['median_cpu_s']:.2f}",
         f"{s['rows_per_cpu_s']:,.0f}", f"{s['peak_rss_mb']:.0f}"]
        for mode, s in summary.items()
    ]
    print(markdown_table(
        ["path", "median wall s", "rows/s", "median CPU s", "rows/CPU s", "peak RSS MB"], table
    ))
    print(f"desched / anchor: {ratio:.2f}x wall, {cpu_ratio:.2f}x CPU   -> {out}")
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
