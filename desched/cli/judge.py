"""``desched judge``: which policy to deploy, by the protocol of ``desched.bench.judge``."""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from desched.errors import DeschedError


def _split(values: tuple[str, ...]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def _tuner(target: str | None) -> Any:
    """The callable ``MODULE:FUNCTION`` names, or None."""
    if not target:
        return None
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise DeschedError(f"--tune {target!r}: expected MODULE:FUNCTION")
    try:
        fn = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise DeschedError(f"--tune {target!r}: cannot load it ({exc})") from None
    if not callable(fn):
        raise DeschedError(f"--tune {target!r}: not callable")

    def tuned(name: str, training: Any) -> dict[str, Any]:
        """``fn``'s parameters for policy ``name``, checked: a mapping of its parameters."""
        from desched.policies import parse_params

        try:
            params = fn(name, training)
        except TypeError as exc:
            raise DeschedError(f"--tune {target!r}: cannot be called as "
                               f"tune(policy, training_cases) ({exc})") from None
        if not isinstance(params, Mapping):
            raise DeschedError(f"--tune {target!r}: returned {type(params).__name__} for "
                               f"policy {name!r}, not a mapping of its parameters")
        try:
            parse_params(name, dict(params))
        except DeschedError as exc:
            raise DeschedError(f"--tune {target!r} for policy {name!r}: {exc}") from None
        return dict(params)

    tuned.__name__ = getattr(fn, "__name__", attr)
    return tuned


@click.command()
@click.option("--logs", "logs", multiple=True,
              help="SWF logs (.swf, .swf.gz), comma-separated or repeated "
                   "[default: the bundled logs of --set, data/samples/traces/*.swf.gz].")
@click.option("--set", "which", type=click.Choice(["dev", "held-back", "all"]), default="dev",
              show_default=True,
              help="Bundled logs to judge: dev (all but the two held back, scenarios at seed "
                   "1), held-back (the final verdict: the two held-back logs, scenarios at the "
                   "held-back seed, tuning on the dev logs only), all (six logs, seed 1). "
                   "desched.bench.holdout names them.")
@click.option("--scenarios", default="steady,flood", show_default=True,
              help="DES scenarios of the no-harm check, comma-separated; 'none' for none.")
@click.option("--policies", "policies", multiple=True,
              help="Candidate policy specs, comma-separated or repeated ('name?key=value') "
                   "[default: every registered policy that ranks on predicted_s]. "
                   "ifs-memoryless (today) and sjf-oracle (the bound) are always judged.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default="data/judge",
              show_default=True, help="Folder for judge.json and judge.md.")
@click.option("--max-tasks", type=click.IntRange(min=100), default=None,
              help="Keep only the first N tasks of each log (and N tasks of a scenario): "
                   "a quick look, not the protocol.")
@click.option("--cache", type=click.Path(file_okay=False, path_type=Path),
              default="data/judge-cache", show_default=True,
              help="Folder caching each workload's test part and predictions.")
@click.option("--no-cache", is_flag=True, help="Neither read nor write the cache.")
@click.option("--force", is_flag=True,
              help="Write into --out even when it holds files other than an earlier "
                   "judge.json and judge.md (which a run replaces).")
@click.option("--frontier-on-predictions/--no-frontier-on-predictions", "on_predictions",
              default=False, show_default=True,
              help="Also run the frontier's family on each log's predictions (two more "
                   "columns in judge.md's frontier table: how much of the frontier "
                   "prediction error costs). A diagnostic: no verdict, standing or "
                   "recommendation reads it, and it is most of a rerun's simulations "
                   "(about 3x the time), so it is asked for.")
@click.option("--jobs", type=click.IntRange(min=1), default=None,
              help="Processes for the trainings and simulations [default: one per core]; "
                   "judge.json is the same with any number.")
@click.option("--dask", "dask_address", default=None, metavar="ADDRESS",
              help="Run the trainings and simulations on the Dask cluster at this scheduler "
                   "address instead (an address no scheduler answers is refused in one "
                   "line).")
@click.option("--tune", "tune", default=None, metavar="lolo|MODULE:FUNCTION",
              help="Leave-one-log-out tuner: 'lolo' (desched.bench.lolo: each policy's grid, "
                   "chosen by the recommendation rule on the other dev logs) or "
                   "FUNCTION(policy_name, training_cases) -> params; held-back logs are never "
                   "among the training cases [default: fixed defaults].")
def judge(logs: tuple[str, ...], which: str, scenarios: str, policies: tuple[str, ...],
          out: Path, max_tasks: int | None, cache: Path, no_cache: bool, jobs: int | None,
          dask_address: str | None, tune: str | None, on_predictions: bool,
          force: bool) -> None:
    """Judge candidate policies for deployment against today's scorer (ifs-memoryless).

    Per real log: train the duration model on the first 70 % of the tasks by submit time,
    predict the last 30 % (rebased to 0), simulate it at utilisation 0.9; compute the
    clairvoyant frontier (desched.bench.frontier) and check the three promises (p99 response
    <= 1.05x today's, delta Jain >= -0.02, no tenant with >= 10 tasks worse than 2x), the
    frontier share (>= 0.8) and the gain floor (>= 0.1 of sjf-oracle's gain); per DES
    scenario, no harm to mean response, Jain's index or max service lag. The recommendation
    follows desched.bench.rule. Writes OUT/judge.json and OUT/judge.md; progress goes to
    stderr.

    The trainings (one LightGBM thread each) and the simulations known ahead (today's, the
    bound's, every candidate's, the frontiers', the lolo grid's) run on --jobs processes or
    the --dask cluster (desched.bench.pooled_judge); the judge then reads their outcomes, so
    judge.json is the serial run's (--jobs 1), bit for bit.
    """
    from desched.bench import holdout, pooled_judge
    from desched.bench import judge as jd
    from desched.bench.judge_cases import SCENARIO_TASKS, SCENARIO_TEST_SEED, log_name
    from desched.bench.pool import Pool
    from desched.cli.grammar import own_folder
    from desched.cli.progress import MessageBar
    from desched.models.training import TrainSettings

    started = time.perf_counter()
    own = {"judge.json", "judge.md"}
    if cache.parent.resolve() == out.resolve():
        own.add(cache.name)  # a cache kept inside --out
    own_folder(out, own, force)
    tuner = None if tune == "lolo" else _tuner(tune)
    log_paths: list[str] | None = _split(logs) or None
    if logs and log_paths is None:
        raise DeschedError("--logs: no file named (leave the option out for the bundled logs)")
    if log_paths is not None:
        named: dict[str, str] = {}
        for p in log_paths:
            if not Path(p).is_file():
                what = "a folder (name its log files)" if Path(p).is_dir() else "no such file"
                raise DeschedError(f"--logs: {p}: {what}")
            other = named.get(log_name(Path(p)))
            if other is None:
                named[log_name(Path(p))] = p
                continue
            if Path(other).resolve() == Path(p).resolve():
                raise DeschedError(f"--logs: {p}: named twice (judge each log once)")
            if other != p:
                raise DeschedError(f"--logs: {other} and {p} both name the log "
                                   f"{log_name(Path(p))!r} in the tables (rename one)")
    bundled = [str(p) for p in jd.default_logs()] if log_paths is None else []
    dev_paths = [p for p in bundled if not holdout.is_held_back(log_name(Path(p)))]
    if log_paths is None:
        log_paths = {"dev": dev_paths, "all": bundled,
                     "held-back": [p for p in bundled if p not in dev_paths]}[which]
    seed = holdout.HELD_BACK_SCENARIO_SEED if which == "held-back" else SCENARIO_TEST_SEED
    scenario_names = [] if scenarios.strip() == "none" else _split((scenarios,))
    from desched.workloads import SCENARIOS

    unknown = [n for n in scenario_names if n not in SCENARIOS]
    if unknown:
        raise DeschedError(f"--scenarios: unknown scenario {unknown[0]!r} (scenarios: "
                           f"{', '.join(SCENARIOS)}, or 'none')")
    candidates = _split(policies) or None
    if policies and candidates is None:
        raise DeschedError("--policies: no policy named (leave the option out for every "
                           "registered policy that ranks on predicted_s)")
    clash = sorted({log_name(Path(p)) for p in log_paths} & set(scenario_names))
    if clash:
        raise DeschedError(f"--logs: the log {clash[0]!r} has the name of a scenario in "
                           "--scenarios (rename the file, or leave the scenario out)")
    if candidates is not None:
        from desched.bench.specs import PolicySpec

        for spec in candidates:
            PolicySpec.parse(spec)
    cache_dir = None if no_cache else cache
    # One thread per fit whatever --jobs says: the processes carry the parallelism, and the
    # models (the same trees as on more threads) and their cache key never depend on --jobs.
    settings = TrainSettings(num_threads=1)
    tasks = SCENARIO_TASKS if max_tasks is None else min(max_tasks, SCENARIO_TASKS)
    held_back_verdict = which == "held-back" and not logs
    # the tuner's no-harm filter never runs on the held-back seed's scenarios (with --logs
    # and --set held-back it gets those of the development seed)
    own_tuning_scenarios = seed != SCENARIO_TEST_SEED and tune is not None
    with Pool(jobs, dask_address) as pool:
        pool.connect()
        n_cases = len(log_paths) + len(scenario_names)
        if held_back_verdict:
            n_cases += len(dev_paths) + len(scenario_names)
        elif own_tuning_scenarios:
            n_cases += len(scenario_names)
        # a line before the first is ready: a large log takes minutes to import, train on
        # and predict, and nothing else is said meanwhile
        cached = f" (cached under {cache_dir})" if cache_dir is not None else ""
        print(f"[{time.perf_counter() - started:6.0f} s] preparing {n_cases} workload(s) "
              f"({pool.describe()}): each log imported, its duration model trained on its "
              f"first 70 %, its test part predicted{cached}", file=sys.stderr, flush=True)
        preparing = MessageBar(n_cases, f"train and predict ({pool.describe()})",
                               per_message=True, started=started)
        try:
            cases = pooled_judge.prepare_cases(
                [(Path(p), max_tasks) for p in log_paths],
                [(name, tasks) for name in scenario_names], cache_dir=cache_dir,
                settings=settings, pool=pool, scenario_seed=seed, progress=preparing)
            training: list[jd.Case] | None = None
            tuning_scenarios = [c for c in cases if c.kind == "scenario"]
            if held_back_verdict:
                training = pooled_judge.prepare_cases(
                    [(Path(p), max_tasks) for p in dev_paths],
                    [(name, tasks) for name in scenario_names], cache_dir=cache_dir,
                    settings=settings, pool=pool, progress=preparing)
                tuning_scenarios = [c for c in training if c.kind == "scenario"]
            elif own_tuning_scenarios:
                tuning_scenarios = pooled_judge.prepare_cases(
                    [], [(name, tasks) for name in scenario_names], cache_dir=cache_dir,
                    settings=settings, pool=pool, progress=preparing)
        finally:
            preparing.close()
        if tune == "lolo":
            from desched.bench.lolo import LoloTuner

            tuner = LoloTuner(tuning_scenarios)
        if tune is not None and sum(c.kind == "log" for c in (training or cases)) < 2:
            print("note: --tune: fewer than two logs to tune on, and a log is never tuned on "
                  "itself: every policy runs at its defaults (add logs to --logs to tune on)",
                  file=sys.stderr, flush=True)
        runs = pooled_judge.pending(pooled_judge.judge_runs(
            cases, candidates, tune=tuner, training_logs=training, deployable=on_predictions))
        simulating = MessageBar(len(runs), f"simulate ({pool.describe()})", per_message=True,
                                started=started, lines=20)
        try:
            pooled_judge.prefill(runs, pool=pool, progress=simulating)
        finally:
            simulating.close()
    judging = MessageBar(len(cases), "judge", started=started)
    try:
        result = jd.run_judge(cases, candidates, tune=tuner, progress=judging,
                              training_logs=training, deployable=on_predictions)
    finally:
        judging.close()
    for note in jd.vacuous_notes(result):  # judge.md carries them too
        print(f"note: {note}", file=sys.stderr, flush=True)
    json_path, md_path = jd.write_judge(result, out)
    click.echo(f"{json_path}\n{md_path}")
    click.echo(f"recommendation: {result.recommendation or 'none'} "
               f"({result.recommendation_reason})")
    sys.stdout.flush()
