"""Flow ``demo``: the research bench end to end, on the embedded default (Prefect's ephemeral
server, DuckDB and files under ``data/``), also run by ``desched demo [--quick]``.

Steps: generate the scenarios and import the bundled SWF logs; simulate today's scorer (its
decision logs) and the Q1 policies; ingest and validate the decision logs into DuckDB (the
``ingest-logs`` flow, as a subflow); train the duration model per Q3 workload on the first
part of its trace and predict the rest; tune the weights with both learners (the
``tune-weights`` tasks); evaluate every policy on the held-out parts and over seeds; write
the report (``desched.report``) and publish it as Prefect artifacts. One line per step on
stderr, and a Prefect progress artifact, show where it is.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

from prefect import flow
from prefect.artifacts import create_progress_artifact, update_progress_artifact

from desched import report as rep
from desched.evaluate import aggregate
from tasks import demo as t
from tasks.demo import DemoSettings, Mode

T = TypeVar("T")

STEPS = (
    "workloads", "simulate", "ingest", "train", "tune", "evaluate", "report",
)


class Progress:
    """One line per step on stderr with the elapsed time, and a Prefect progress artifact."""

    def __init__(self, total: int, echo: Callable[[str], None] | None = None) -> None:
        self.t0 = time.perf_counter()
        self.total = total
        self.done = 0
        self.steps: dict[str, float] = {}
        self.echo = echo or _stderr
        self.artifact: UUID | None = None
        try:
            self.artifact = create_progress_artifact(  # type: ignore[assignment]
                progress=0.0, key="desched-demo-progress", description="desched demo steps")
        except Exception:  # noqa: BLE001 (progress is a display, never a failure)
            self.artifact = None

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def run(self, name: str, what: str, fn: Callable[[], T]) -> T:
        self.echo(f"[{self.elapsed():6.1f}s] {self.done + 1}/{self.total} {what} ...")
        started = time.perf_counter()
        result = fn()
        self.steps[name] = time.perf_counter() - started
        self.done += 1
        self.echo(f"[{self.elapsed():6.1f}s] {self.done}/{self.total} {name} done "
                  f"({self.steps[name]:.1f} s)")
        if self.artifact is not None:
            with contextlib.suppress(Exception):  # a display, never a failure
                update_progress_artifact(self.artifact, 100.0 * self.done / self.total)
        return result


def _stderr(line: str) -> None:
    sys.stderr.write(line + "\n")  # not print: the flow's log_prints would route it to logs
    sys.stderr.flush()


def _specs(settings: DemoSettings) -> dict[str, list[str]]:
    """Trace specs (``desched.evaluate``) for tuning and for the evaluation over seeds."""
    paths = {w.name: w.source for w in settings.workloads if w.kind == "swf"}
    n = settings.tune_tasks
    train = [f"{s}?tasks={n}&load=0.9&seeds={settings.tune_train_seeds}"
             for s in ("flood", "steady", "heavy-tail")]
    train.append(f"{paths['lanl']}?slice_tasks={n}&load={t.TARGET_LOAD}"
                 f"&seeds={settings.tune_slices_train}")
    heldout = [f"{s}?tasks={n}&load=0.9&seeds={settings.tune_heldout_seeds}"
               for s in ("flood", "steady", "heavy-tail")]
    heldout += [f"{paths[w]}?slice_tasks={n}&load={t.TARGET_LOAD}"
                f"&seeds={settings.tune_slices_heldout[w]}" for w in ("lanl", "atlas")]
    m = settings.eval_tasks
    evaluate = [f"{s}?tasks={m}&load=0.9&seeds={settings.eval_seeds}" for s in ("flood", "steady")]
    evaluate += [f"{paths[w]}?slice_tasks={settings.eval_slice_tasks}&load={t.TARGET_LOAD}"
                 f"&seeds={settings.eval_slices[w]}" for w in ("lanl", "atlas")]
    return {"train": train, "heldout": heldout, "evaluate": evaluate}


def spec_label(spec: str) -> str:
    """``flood``, ``lanl``, ...: the short name the report uses for a trace spec."""
    base = spec.partition("?")[0]
    for name, file in t.SWF_LOGS.items():
        if base.endswith(file):
            return name
    return base


@flow(name="demo", log_prints=True)
def demo(
    quick: bool = False,
    out: str = "data",
    run: str | None = None,
) -> dict[str, Any]:
    """Run the research bench and write ``<out>/reports/<run>/`` (report.md, report.json,
    PNGs); working files go under ``<out>/demo/<run>/``. Returns the report's folder, its
    JSON and the time per step."""
    from desched.tuning import Objective, TuneSettings
    from flows.ingest import ingest_logs
    from tasks.tune import judge_heldout, learn_weights, publish_tuning, save_weights, split_traces

    mode: Mode = "quick" if quick else "full"
    settings = DemoSettings.of(mode)
    run = run or f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{mode}"
    root = Path(out)
    work = root / "demo" / run
    report_dir = root / "reports" / run
    dirs = {k: work / k for k in ("traces", "logs", "runs", "models", "weights", "heldout")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    db_path = work / "warehouse.duckdb"
    progress = Progress(len(STEPS))

    workloads: dict[str, t.Workload] = progress.run(
        "workloads", "generate the scenarios and import the SWF logs",
        lambda: {w.name: w for w in (t.prepare_workload(s, str(dirs["traces"]))
                                     for s in settings.workloads)})
    q1 = progress.run(
        "simulate", "simulate today's scorer (decision logs) and the Q1 policies",
        lambda: {w: t.simulate_q1(wl, str(dirs["logs"]), str(dirs["runs"]))
                 for w, wl in workloads.items()})
    ingest = progress.run(
        "ingest", "ingest and validate the decision logs into DuckDB",
        lambda: ingest_logs(logs_dir=str(dirs["logs"]), db_path=str(db_path)))

    def train_all() -> dict[str, dict[str, Any]]:
        from tasks.retrain import publish_report as publish_model

        out = {}
        for w in settings.q3_workloads:
            baseline = q1[w]["dirs"][rep.BASELINE]
            out[w] = t.train_predictor(
                workloads[w], str(db_path), str(Path(baseline) / "decision-log.parquet"),
                baseline, str(dirs["models"]), str(dirs["heldout"] / f"{w}.parquet"), settings)
            publish_model(out[w].pop("card"))
        return out

    trained = progress.run("train", "train the duration model per workload, predict the rest",
                           train_all)
    specs = _specs(settings)

    def tune_all() -> dict[str, dict[str, Any]]:
        cards = {}
        learners = {"optuna": settings.tune_trials, "rl": settings.rl_iterations}
        split: tuple[list[Any], list[Any]] | None = None
        for learner, steps in learners.items():
            ts = TuneSettings(
                train=specs["train"], heldout=specs["heldout"], train_seeds=None,
                heldout_seeds=None, workers=8, policy="ifs-memoryless",
                learner=learner,  # type: ignore[arg-type]
                trials=steps, seed=0, windows=20, objective=Objective(fairness_weight=5.0))
            split = split or split_traces(ts)  # the same cells for both learners
            learned = learn_weights(ts, split[0])
            verdict = judge_heldout(ts, learned, split[1])
            folder = str(dirs["weights"] / learner)
            cards[learner] = save_weights(folder, ts, learned, split[0], split[1], verdict,
                                          f"desched demo{' --quick' if quick else ''}")
            publish_tuning(cards[learner], folder)
        return cards

    cards = progress.run("tune", "tune the weights (Optuna, RL) and judge them on held-out "
                         "traces", tune_all)
    weights = {name: str(dirs["weights"] / name) for name in cards}

    def evaluate_all() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        sims = {w: t.simulate_q3(w, trained[w]["heldout_trace"], trained[w]["workers"], weights,
                                 workloads[w].info["counter_params"])
                for w in settings.q3_workloads}
        from desched.evaluate import cells_of

        cells = []
        for spec in specs["evaluate"]:
            counter = workloads[spec_label(spec)].info["counter_params"]
            query = "&".join(f"{k}={v}" for k, v in counter.items())
            q1 = [f"ifs-counter?{query}" if p == "ifs-counter" and query else p
                  for p in rep.Q1_POLICIES]
            policies = [*q1, "fifo", "round-robin", "sjf-oracle",
                        *(f"{rep.BASELINE}?weights={folder}" for folder in weights.values())]
            cells += cells_of([spec], policies, [0])  # each spec names its own seeds
        results = t.evaluate_over_seeds(cells, 8, settings.jobs)
        return sims, aggregate(results, rep.BASELINE)

    sims, eval_rows = progress.run("evaluate", "evaluate every policy (held-out parts, seeds)",
                                   evaluate_all)
    for row in eval_rows:  # readable policy names
        for name, folder in weights.items():
            if row["policy"] == f"{rep.BASELINE}?weights={folder}":
                row["policy"] = f"{rep.BASELINE} ({name} weights)"
        if row["policy"].startswith("ifs-counter?"):
            row["policy"] = "ifs-counter"

    def write() -> dict[str, Any]:
        info = {w: {"kind": wl.kind, "source": wl.source, **wl.info}
                for w, wl in workloads.items()}
        timing = {"steps": dict(progress.steps), "total_s": progress.elapsed(),
                  "load_average": t.load_average(), "cpus": os.cpu_count() or 0}
        commands = {"quick": "desched demo --quick", "full": "desched demo",
                    "make": "make demo"}
        if str(root) != "data":
            commands = {k: (v + f" --out {root}" if k != "make" else v)
                        for k, v in commands.items()}
        report = rep.build_report(
            run=run, mode=mode, created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            settings={"target_load": t.TARGET_LOAD, "counter_memory_tasks": t.COUNTER_MEMORY_TASKS, **settings.describe(), "specs": specs},
            workloads=info, ingestion=_ingestion(ingest),
            q1_runs={w: r["summaries"] for w, r in q1.items()}, q1_eval_rows=eval_rows,
            q2_cards=cards, spec_label=spec_label, q3_train=trained, q3_sims=sims, timing=timing, commands=commands)
        extra = {
            "durations": {w: s["tenant_durations"] for w, s in sims.items()},
            "per_tenant": {w: {p: {k: v["mean_slowdown"] for k, v in s["per_tenant"].items()}
                               for p, s in sims[w]["summaries"].items()} for w in sims},
        }
        t.write_report(report, rep.ReportInputs({w: r["dirs"] for w, r in q1.items()}),
                       str(report_dir), extra)
        t.publish_report(str(report_dir), report)
        return report

    report = progress.run("report", "write the report and publish it as artifacts", write)
    return {"report_dir": str(report_dir), "report": report, "steps": progress.steps,
            "total_s": progress.elapsed()}


def _ingestion(summary: Any) -> dict[str, Any]:
    return {
        "files_seen": summary.files_seen,
        "files_read": summary.files_read,
        "decisions_loaded": summary.decisions_loaded,
        "completions_loaded": summary.completions_loaded,
        "rows_quarantined": summary.rows_quarantined,
        "quarantined_by_rule": dict(summary.quarantined_by_rule),
        "gx_rows_checked": summary.gx_rows_checked,
        "warehouse_rows": dict(summary.counts),
    }
