"""Policy evaluation over traces and seeds: one cell, then means with 95 % confidence intervals.

A *trace spec* names a workload and how a seed turns it into one trace:

- a scenario of ``desched.workloads`` (``flood``, ``steady?tasks=2000&load=0.9``): seed ``s`` is
  the trace ``generate(name, ..., seed=s)``, a fresh draw of the whole workload;
- a trace file, Parquet or SWF (``trace.parquet``, ``log.swf.gz?slice_tasks=2000&load=0.9``):
  seed ``s`` is the ``s``-th *disjoint time slice* of ``slice_tasks`` consecutive tasks (in
  submit order), shifted to start at 0; ``load``, when given, rescales the slice's submit
  times so that its offered load against the workers is ``load`` (durations are untouched).
  Slices do not overlap, so two seeds never share a task; they are not independent draws
  (neighbouring weeks of one machine are correlated), which the intervals do not model.

Either kind takes ``seeds`` (``0-3;9`` is 0, 1, 2, 3, 9), which then replace, for that trace
alone, the seeds a caller gives for all traces, so that one sweep can hold scenarios (seeds
100-109) and slices of a log (seeds 40-49).

A *policy spec* is a registered name with parameters in the same syntax
(``ifs-memoryless?w_backlog=0.3&w_wait=0.7``, ``ifs-counter?weights=models/weights/x``).

``run_cell`` simulates one (trace, seed, policy) cell and returns its summary (the metrics of
``desched.metrics.summarize``, whole run and per window). ``aggregate`` turns cells into one
row per (trace, policy): every metric of ``METRICS`` as mean, 95 % t-interval and count over
seeds, the per-window drift series (Jain's index and service lag by window index, again with
intervals), and the paired difference from a baseline policy on the same seeds. Nothing here
imports Prefect; the flow ``evaluate-policies`` maps ``run_cell`` over a task runner.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import numpy as np
import polars as pl

from desched.errors import DeschedError

METRICS: tuple[str, ...] = (
    "mean_wait_s",
    "p99_wait_s",
    "mean_response_s",
    "p50_response_s",
    "p99_response_s",
    "mean_slowdown",
    "mean_bounded_slowdown",
    "jain_slowdown",
    "max_service_lag_s",
    "window_jain_mean",
    "window_jain_min",
    "window_lag_mean_s",
    "utilization",
    "makespan_s",
)
"""Scalar metrics aggregated over seeds; ``window_*`` summarise the per-window drift series."""

SCENARIO_DEFAULTS: dict[str, Any] = {"tasks": 2000, "load": 0.9}
"""Defaults of a scenario spec that names no size: small enough for sweeps of many seeds."""

DEFAULT_SLICE_TASKS = 2000
CONFIDENCE = 0.95


def _parse_spec(spec: str) -> tuple[str, dict[str, str]]:
    base, _, query = spec.strip().partition("?")
    if not base:
        raise DeschedError(f"{spec!r}: empty name")
    pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=False) if query else []
    options: dict[str, str] = {}
    for key, value in pairs:
        if not key:
            raise DeschedError(f"{spec!r}: expected NAME?KEY=VALUE&KEY=VALUE")
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
        allowed = {"tasks", "tenants", "load"} if base in SCENARIOS else {"slice_tasks", "load"}
        allowed.add("seeds")
        unknown = sorted(set(options) - allowed)
        if unknown:
            raise DeschedError(f"trace {spec!r}: unknown option {unknown[0]!r} "
                               f"(options: {', '.join(sorted(allowed))})")
        try:
            load = float(options["load"]) if "load" in options else None
            tasks = int(options.get("tasks", SCENARIO_DEFAULTS["tasks"]))
            tenants = int(options["tenants"]) if "tenants" in options else None
            slice_tasks = int(options.get("slice_tasks", DEFAULT_SLICE_TASKS))
            seeds = parse_seeds(options["seeds"]) if "seeds" in options else None
        except (ValueError, DeschedError) as exc:
            raise DeschedError(f"trace {spec!r}: {exc}") from None
        if load is not None and not (math.isfinite(load) and load > 0):
            raise DeschedError(f"trace {spec!r}: load must be > 0, got {load}")
        if slice_tasks < 1:
            raise DeschedError(f"trace {spec!r}: slice_tasks must be >= 1, got {slice_tasks}")
        if base in SCENARIOS:
            return cls(spec, base, base, None, tasks, tenants,
                       SCENARIO_DEFAULTS["load"] if load is None else load, slice_tasks, seeds)
        path = Path(base)
        if not path.is_file():
            raise DeschedError(f"trace {spec!r}: neither a scenario ({', '.join(SCENARIOS)}) "
                               f"nor an existing file")
        name = path.name.removesuffix(".gz").removesuffix(".swf").removesuffix(".parquet")
        return cls(spec, name, None, str(path), tasks, tenants, load, slice_tasks, seeds)

    def slices(self) -> int | None:
        """Disjoint slices of a file trace (the seeds it has); ``None`` for a scenario."""
        if self.path is None:
            return None
        return _read_file(self.path).height // self.slice_tasks

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
            raise DeschedError(f"trace {self.spec!r}: seed {seed} is past its last slice "
                               f"({count} slices of {self.slice_tasks} tasks; seeds 0..{count - 1})")
        part = full.slice(seed * self.slice_tasks, self.slice_tasks)
        t0 = float(part["submit_s"].to_numpy().min())
        part = part.with_columns(pl.col("submit_s") - t0)
        if self.load is not None:
            span = float(part["submit_s"].to_numpy().max())
            if span > 0:
                mean_s = float(part["duration_s"].to_numpy().mean())
                offered = part.height / span * mean_s / workers
                part = part.with_columns(pl.col("submit_s") * (offered / self.load))
        return part


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
    if path.endswith((".swf", ".swf.gz")):
        from desched.swf import import_swf

        frame, _ = import_swf(path)
    else:
        from desched.trace import read_trace

        frame = read_trace(path)
    return frame.sort("submit_s", maintain_order=True)


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


def window_drift(windows: list[dict[str, Any]]) -> dict[str, float]:
    """Scalar summaries of the per-window series: mean and minimum windowed Jain's index
    (over windows with submissions) and mean service lag (over windows with at least two
    tenants backlogged throughout)."""
    jains = [w["jain_slowdown"] for w in windows if not math.isnan(w["jain_slowdown"])]
    lags = [w["service_lag_s"] for w in windows if w["backlogged_tenants"] >= 2]
    return {
        "window_jain_mean": float(np.mean(jains)) if jains else math.nan,
        "window_jain_min": float(np.min(jains)) if jains else math.nan,
        "window_lag_mean_s": float(np.mean(lags)) if lags else 0.0,
    }


def simulate_summary(
    trace: pl.DataFrame,
    policy_name: str,
    params: Any,
    workers: int,
    *,
    window_s: float | None = None,
    seed: int = 0,
    wrap: Any = None,
) -> dict[str, Any]:
    """Simulate ``policy_name`` with ``params`` over ``trace`` and return its summary plus the
    ``window_*`` drift summaries. ``wrap`` (policy -> policy) lets a caller put a controller
    around the policy (``desched.tuning``) without the simulator knowing."""
    from desched.policies import make_policy
    from desched.runs import summary_of, tasks_frame
    from desched.simulator import simulate
    from desched.trace import TaskTable

    tasks = TaskTable.from_frame(trace)
    policy = make_policy(policy_name, tasks, params)
    if wrap is not None:
        policy = wrap(policy)
    result = simulate(tasks, policy, workers)
    summary = summary_of(tasks_frame(trace, result), result,
                         params=policy.params.model_dump(), seed=seed, window_s=window_s)
    summary.update(window_drift(summary["windows"]))
    return summary


def run_cell(
    trace: str,
    policy: str,
    seed: int,
    workers: int,
    window_s: float | None = None,
    per_tenant: bool = False,
) -> dict[str, Any]:
    """One evaluation cell: the summary of ``policy`` on seed ``seed`` of ``trace`` (specs).

    Adds ``trace``, ``trace_name``, ``policy_spec`` and ``fingerprint``; drops the per-tenant
    table unless ``per_tenant`` (it is large on real logs and not aggregated) and the
    wall-clock ``decisions_per_s`` (a cell is a function of its arguments alone).
    """
    tspec = TraceSpec.parse(trace)
    pspec = PolicySpec.parse(policy)
    frame = tspec.materialize(seed, workers)
    summary = simulate_summary(frame, pspec.name, dict(pspec.params), workers,
                               window_s=window_s, seed=seed)
    if not per_tenant:
        summary.pop("per_tenant", None)
    summary.pop("decisions_per_s", None)
    return {"trace": tspec.spec, "trace_name": tspec.name, "policy_spec": pspec.spec,
            "fingerprint": fingerprint(frame), **summary}


def cells_of(
    traces: Sequence[str], policies: Sequence[str], seeds: Sequence[int]
) -> list[tuple[str, str, int]]:
    """Every (trace, policy, seed) combination, after checking every spec and seed; a trace
    spec's own ``seeds`` replace ``seeds``."""
    if not traces or not policies:
        raise DeschedError("evaluation needs at least one trace and one policy")
    for p in policies:
        PolicySpec.parse(p)
    out = []
    for t in traces:
        tspec = TraceSpec.parse(t)
        own = list(tspec.seeds or seeds)
        if not own:
            raise DeschedError(f"trace {t!r}: no seeds")
        count = tspec.slices()
        if count is not None and max(own) >= count:
            raise DeschedError(f"trace {t!r}: seed {max(own)} is past its last slice "
                               f"(seeds 0..{count - 1})")
        out += [(t, p, s) for p in policies for s in own]
    return out


def mean_ci(values: Iterable[float], confidence: float = CONFIDENCE) -> dict[str, float]:
    """Mean and the two-sided t-interval of the mean over the finite ``values``.

    ``half`` is ``t_{(1+confidence)/2, n-1} * sd / sqrt(n)`` (sample sd, ``ddof=1``); with one
    value the interval is NaN, with none the mean is NaN too.
    """
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    n = int(x.size)
    if n == 0:
        return {"mean": math.nan, "lo": math.nan, "hi": math.nan, "half": math.nan, "n": 0}
    mean = float(x.mean())
    if n == 1:
        return {"mean": mean, "lo": math.nan, "hi": math.nan, "half": math.nan, "n": 1}
    from scipy import stats

    half = float(stats.t.ppf(0.5 + confidence / 2, n - 1) * x.std(ddof=1) / math.sqrt(n))
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "half": half, "n": n}


def drift_series(cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per window index: the mean start (relative to the trace's first submission) and the
    mean with interval of the windowed Jain's index and service lag over the cells (seeds)."""
    longest = max((len(c["windows"]) for c in cells), default=0)
    out = []
    for w in range(longest):
        rows = [(c["windows"][w], c["windows"][0]["start_s"]) for c in cells
                if w < len(c["windows"])]
        out.append({
            "window": w,
            "start_s": float(np.mean([r["start_s"] - t0 for r, t0 in rows])),
            "jain_slowdown": mean_ci(r["jain_slowdown"] for r, _ in rows),
            "service_lag_s": mean_ci(r["service_lag_s"] for r, _ in rows),
        })
    return out


def aggregate(
    cells: Sequence[dict[str, Any]], baseline: str | None = None
) -> list[dict[str, Any]]:
    """One row per (trace, policy spec), in first-seen order, over the seeds of ``cells``.

    A row holds ``metrics`` (name -> mean, lo, hi, half, n), ``windows`` (``drift_series``)
    and the seeds. With ``baseline`` (a policy spec among the cells), ``vs_baseline`` holds
    per metric the paired difference ``policy - baseline`` over the seeds both ran, with its
    interval: a difference whose interval excludes 0 is a difference at 95 %.
    """
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for c in cells:
        groups.setdefault((c["trace"], c["policy_spec"]), []).append(c)
    rows = []
    for (trace, policy), group in groups.items():
        group = sorted(group, key=lambda c: c["seed"])
        row: dict[str, Any] = {
            "trace": trace,
            "trace_name": group[0]["trace_name"],
            "policy": policy,
            "seeds": [c["seed"] for c in group],
            "metrics": {m: mean_ci(c[m] for c in group) for m in METRICS},
            "windows": drift_series(group),
        }
        if baseline is not None and (trace, baseline) in groups:
            base = {c["seed"]: c for c in groups[(trace, baseline)]}
            paired = [(c, base[c["seed"]]) for c in group if c["seed"] in base]
            row["vs_baseline"] = {
                m: mean_ci(a[m] - b[m] for a, b in paired) for m in METRICS
            }
        rows.append(row)
    return rows


TABLE_METRICS: tuple[tuple[str, str], ...] = (
    ("mean_bounded_slowdown", "mean bsld"),
    ("mean_wait_s", "mean wait s"),
    ("p99_response_s", "p99 resp s"),
    ("jain_slowdown", "Jain"),
    ("window_jain_min", "min window Jain"),
    ("max_service_lag_s", "max lag s"),
)


def _fmt(value: float) -> str:
    if value is None or not math.isfinite(value):
        return "-"
    return f"{value:.3f}" if abs(value) < 10 else f"{value:,.0f}"


def fmt_ci(ci: dict[str, float]) -> str:
    """``mean ± half`` (just the mean when there is no interval)."""
    if not math.isfinite(ci["half"]):
        return _fmt(ci["mean"])
    return f"{_fmt(ci['mean'])} ± {_fmt(ci['half'])}"


def table_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Flat records (one per row of ``aggregate``) for a table artifact or a Parquet file:
    ``trace``, ``policy``, ``seeds`` and, per metric, ``<metric>``, ``<metric>_lo``,
    ``<metric>_hi`` (and ``<metric>_diff``, ``_diff_lo``, ``_diff_hi`` against the baseline)."""
    out = []
    for r in rows:
        flat: dict[str, Any] = {"trace": r["trace"], "policy": r["policy"],
                                "seeds": len(r["seeds"])}
        for m in METRICS:
            ci = r["metrics"][m]
            flat[m], flat[f"{m}_lo"], flat[f"{m}_hi"] = ci["mean"], ci["lo"], ci["hi"]
            if "vs_baseline" in r:
                d = r["vs_baseline"][m]
                flat[f"{m}_diff"], flat[f"{m}_diff_lo"], flat[f"{m}_diff_hi"] = (
                    d["mean"], d["lo"], d["hi"])
        out.append(flat)
    return out


def markdown_table(rows: Sequence[dict[str, Any]], confidence: float = CONFIDENCE) -> str:
    """Headline metrics per (trace, policy) as ``mean ± half-width`` of the interval."""
    head = ["trace", "policy", "seeds", *(label for _, label in TABLE_METRICS)]
    lines = [f"Mean ± half-width of the {confidence:.0%} t-interval over seeds.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [fmt_ci(r["metrics"][m]) for m, _ in TABLE_METRICS]
        lines.append("| " + " | ".join([r["trace"], r["policy"], str(len(r["seeds"])),
                                          *cells]) + " |")
    return "\n".join(lines)


def drift_frame(rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
    """The per-window drift series of every row of ``aggregate``, one row per window."""
    records = []
    for r in rows:
        for w in r["windows"]:
            records.append({
                "trace": r["trace"], "policy": r["policy"], "window": w["window"],
                "start_s": w["start_s"],
                **{f"jain_slowdown_{k}": w["jain_slowdown"][k] for k in ("mean", "lo", "hi")},
                **{f"service_lag_s_{k}": w["service_lag_s"][k] for k in ("mean", "lo", "hi")},
                "seeds": w["jain_slowdown"]["n"],
            })
    return pl.DataFrame(records, infer_schema_length=None)


def write_evaluation(
    out: str | Path,
    settings: dict[str, Any],
    rows: Sequence[dict[str, Any]],
    cells: Sequence[dict[str, Any]],
) -> dict[str, Path]:
    """Write ``evaluation.json`` (settings, rows, cells with their windows), ``table.parquet``
    (``table_rows``) and ``drift.parquet`` (``drift_frame``) into the folder ``out``."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"json": folder / "evaluation.json", "table": folder / "table.parquet",
             "drift": folder / "drift.parquet"}
    paths["json"].write_text(json.dumps(
        {"settings": settings, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
         "rows": list(rows), "cells": list(cells)}, indent=1, allow_nan=True) + "\n")
    pl.DataFrame(table_rows(rows), infer_schema_length=None).write_parquet(paths["table"])
    drift_frame(rows).write_parquet(paths["drift"])
    return paths


def _run_cell_args(args: tuple[str, str, int, int, float | None]) -> dict[str, Any]:
    return run_cell(*args)


def run_cells(
    cells: Sequence[tuple[str, str, int]],
    workers: int,
    window_s: float | None = None,
    jobs: int = 1,
) -> list[dict[str, Any]]:
    """``run_cell`` over ``cells`` in cell order, on ``jobs`` processes (1: in this one).

    The processes are spawned, not forked: they import ``desched`` afresh and inherit no
    threads or state of the caller (a Prefect flow run, say). The Prefect flow
    ``evaluate-policies`` does the same on a task runner."""
    args = [(t, p, s, workers, window_s) for t, p, s in cells]
    if jobs <= 1:
        return [_run_cell_args(a) for a in args]
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    with ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn")) as pool:
        return list(pool.map(_run_cell_args, args, chunksize=2))
