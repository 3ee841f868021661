"""Flow ``demo``: the research bench end to end, on the embedded default (Prefect's ephemeral
server, DuckDB and files under ``data/``), also run by ``desched demo [--quick]``.

Composition only (an import contract forbids flows -> desched.bench): every step is a task
of ``desched/tasks/demo.py`` (or ``desched/tasks/tune.py``, or the ``ingest-logs`` flow as a
subflow) around a function of ``desched.bench.demo``, which documents the steps; the few
settings helpers it calls come through ``desched.tasks.demo`` too. One line per step on stderr, and a Prefect progress artifact, show
where it is.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TypeVar, cast

from prefect import flow
from prefect.utilities.annotations import quote

from desched.tasks import demo as t
from desched.tasks.demo import DemoSettings, Mode, WeightsCard

T = TypeVar("T")

STEPS = ("workloads", "simulate", "ingest", "train", "tune", "evaluate", "report")


def quoted(value: T) -> T:
    """``value`` for a task's argument, which Prefect hands over as it is, without walking
    its items for futures and upstream results (``prefect.utilities.annotations.quote``;
    typed as ``value`` because the task receives it unwrapped)."""
    return cast(T, quote(value))


@flow(name="demo", log_prints=True)
def demo(quick: bool = False, out: str = "data/demo", run: str | None = None,
         jobs: int | None = None, dask_address: str | None = None) -> t.DemoRun:
    """Run the research bench and write ``<out>/<run>/`` (report.md, report.html,
    report.json, PNGs); working files go under ``<out>/<run>/work/``. Returns the report's
    folder, the report and the time per step. The independent simulations and trainings of
    a step run on ``jobs`` processes (default: the settings', one per core) or on the Dask
    cluster at ``dask_address`` (``desched.bench.pool``): the same report either way."""
    mode: Mode = "quick" if quick else "full"
    overrides = {k: v for k, v in (("jobs", jobs), ("dask_address", dask_address))
                 if v is not None}
    settings = DemoSettings.of(mode, **overrides)
    with t.Pool(settings.jobs, settings.dask_address) as pool:
        return _demo(settings, quick, out, run, pool)


def _demo(settings: DemoSettings, quick: bool, out: str, run: str | None,
          pool: t.Pool) -> t.DemoRun:
    from desched.flows.ingest import ingest_logs
    from desched.tasks.retrain import publish_report as publish_model
    from desched.tasks.tune import (
        Cell,
        judge_heldout,
        learn_judge_save,
        learn_weights,
        publish_tuning,
        save_weights,
        split_traces,
    )

    mode = settings.mode
    run = run or f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{mode}"
    root = Path(out)
    report_dir = root / run
    work = report_dir / "work"
    dirs = {k: work / k for k in ("traces", "logs", "runs", "models", "weights", "heldout")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    db_path = work / "warehouse.duckdb"
    progress = t.Progress(len(STEPS), shares=t.STEP_SHARES[mode])
    specs = t.trace_specs(settings)
    # The report's judge needs nothing of the steps below: it runs beside them, on a process
    # of its own, and fills the cores that their serial parts (ingestion, plots) leave
    # idle.
    deploy_job = pool.submit(t.deploy_of, settings, root)

    def prepare() -> tuple[dict[str, t.Workload], tuple[list[Cell], list[Cell]]]:
        # The tuners' cells (the same for both learners) are cut here: the RL learner needs
        # nothing of the steps below either, and trains on one core (serial by design), so
        # it too runs beside them, on a process of its own, learned, judged and saved there,
        # where its agent lives.
        prepared = {s.name: t.prepare_workload(s, settings, str(dirs["traces"]))
                    for s in settings.workloads}
        return prepared, split_traces(t.tune_settings(settings, specs, "optuna"), pool)

    workloads, split = progress.run(
        "workloads", "generate the scenarios, import the SWF logs, cut the tuners' cells",
        prepare)
    command = f"desched demo{' --quick' if quick else ''}"
    rl_job = pool.submit(learn_judge_save, t.tune_settings(settings, specs, "rl"), split[0],
                         split[1], str(dirs["weights"] / "rl"), command)
    q1 = progress.run(
        "simulate", "simulate today's scorer (decision logs) and the Q1 policies",
        lambda: t.simulate_q1_all(list(workloads.values()), str(dirs["logs"]),
                                  str(dirs["runs"]), settings.baseline, pool))
    ingest = progress.run(
        "ingest", "ingest and validate the decision logs into DuckDB",
        lambda: ingest_logs(logs_dir=str(dirs["logs"]), db_path=str(db_path)))

    def train_all() -> dict[str, t.PredictorResult]:
        calls = []
        for w in settings.q3_workloads:
            baseline = q1[w].dirs[settings.baseline]
            calls.append((workloads[w], str(db_path),
                          str(Path(baseline) / "decision-log.parquet"), baseline,
                          str(dirs["models"]), str(dirs["heldout"] / f"{w}.parquet"), settings))
        out = dict(zip(settings.q3_workloads, t.train_predictors(calls, pool), strict=True))
        for result in out.values():
            if result.card is not None:
                publish_model(result.card)
        return out

    trained = progress.run("train", "train the duration model per workload, predict the rest",
                           train_all)

    def tune_all() -> dict[str, WeightsCard]:
        ts = t.tune_settings(settings, specs, "optuna")
        learned = learn_weights(ts, quoted(split[0]), pool)
        verdict = judge_heldout(ts, quoted(learned), quoted(split[1]), pool)
        folder = str(dirs["weights"] / "optuna")
        cards = {"optuna": save_weights(folder, ts, quoted(learned), quoted(split[0]),
                                        quoted(split[1]), verdict, command)}
        publish_tuning(cards["optuna"], folder)
        cards["rl"] = rl_job.result()
        publish_tuning(cards["rl"], str(dirs["weights"] / "rl"))
        return cards

    cards = progress.run("tune", "tune the weights (Optuna, RL) and judge them on held-out "
                         "traces", tune_all)
    learned = {name: (card, str(dirs["weights"] / name)) for name, card in cards.items()}

    def evaluate_all() -> tuple[dict[str, t.HeldoutRuns], list[t.EvalRow]]:
        sims = t.simulate_q3_all(
            {w: (trained[w].heldout_trace, trained[w].workers,
                 t.heldout_candidates(workloads[w].info, learned, settings.baseline))
             for w in settings.q3_workloads}, pool)
        cells, labels = t.over_seeds_cells(settings, specs, workloads, learned)
        results = t.evaluate_over_seeds(cells, settings.eval_workers, pool)
        return sims, t.over_seeds_rows(results, labels, settings.baseline)

    sims, eval_rows = progress.run("evaluate", "evaluate every policy (held-out parts, seeds)",
                                   evaluate_all)

    def write() -> t.Report:
        q1_dirs = {w: r.dirs for w, r in q1.items()}

        def assemble(**deploy: Any) -> t.Report:
            # Every step's results, quoted: Prefect would otherwise walk each of their
            # hundreds of thousands of items for futures and upstream results (about 1 s a
            # call here); they hold none, as none of the report's tasks' inputs do.
            report: t.Report = t.assemble_report(
                run=run, settings=settings, specs=specs, workloads=quoted(workloads),
                ingestion=t.ingestion_of(ingest), q1=quoted(q1), eval_rows=quoted(eval_rows),
                cards=quoted(cards), trained=quoted(trained), sims=quoted(sims),
                steps=progress.steps, total_s=progress.elapsed(), root=root,
                **{k: quoted(v) for k, v in deploy.items()})
            return report

        # Every figure but the judge's is drawn while the judge's process finishes (on a
        # quiet machine it is the last to end), from a draft without its section.
        drawn = t.draw_plots(quoted(assemble(draft=True)), q1_dirs, str(report_dir),
                             quoted(sims), pool)
        report = assemble(deploy=deploy_job.result())
        t.write_report(quoted(report), q1_dirs, str(report_dir), quoted(sims), pool, drawn)
        t.publish_report(str(report_dir), quoted(report))
        return report

    report = progress.run("report", "write the report and publish it as artifacts", write)
    return t.DemoRun(report_dir=str(report_dir), report=report, steps=progress.steps,
                     total_s=progress.elapsed(), process_s=t.process_seconds())
