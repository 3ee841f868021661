"""``desched judge``: which policy to deploy, by the protocol of ``desched.bench.judge``."""

from __future__ import annotations

import importlib
import sys
import time
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
    return fn


@click.command()
@click.option("--logs", "logs", multiple=True,
              help="SWF logs (.swf, .swf.gz), comma-separated or repeated "
                   "[default: the six bundled logs, data/samples/traces/*.swf.gz].")
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
@click.option("--tune", "tune", default=None, metavar="MODULE:FUNCTION",
              help="Leave-one-log-out tuner: FUNCTION(policy_name, training_cases) -> params, "
                   "called per held-out log with the other logs [default: fixed defaults].")
def judge(logs: tuple[str, ...], scenarios: str, policies: tuple[str, ...], out: Path,
          max_tasks: int | None, cache: Path, no_cache: bool, tune: str | None) -> None:
    """Judge candidate policies for deployment against today's scorer (ifs-memoryless).

    Per real log: train the duration model on the first 70 % of the tasks by submit time,
    predict the last 30 % (rebased to 0), simulate it at utilisation 0.9 and check the four
    criteria (gain >= 0.8 of sjf-oracle's, p99 response <= 1.0x, delta Jain >= 0, no tenant
    with >= 10 tasks worse than 2x); per DES scenario, no harm to mean response, Jain's index
    or max service lag. Writes OUT/judge.json and OUT/judge.md; progress goes to stderr.
    """
    from desched.bench import judge as jd
    from desched.cli.progress import MessageBar

    started = time.perf_counter()
    tuner = _tuner(tune)
    log_paths = _split(logs) or None
    if log_paths is not None:
        for p in log_paths:
            if not Path(p).is_file():
                raise DeschedError(f"--logs: {p}: no such file")
    scenario_names = [] if scenarios.strip() == "none" else _split((scenarios,))
    candidates = _split(policies) or None
    if candidates is not None:
        from desched.bench.specs import PolicySpec

        for spec in candidates:
            PolicySpec.parse(spec)
    n_logs = len(log_paths) if log_paths is not None else len(jd.default_logs())
    preparing = MessageBar(n_logs + len(scenario_names), "train and predict",
                           started=started)
    try:
        cases = jd.prepare_cases(log_paths, scenarios=scenario_names,
                                 cache_dir=None if no_cache else cache, max_tasks=max_tasks,
                                 progress=preparing)
    finally:
        preparing.close()
    judged = list(dict.fromkeys([jd.TODAY, jd.ORACLE,
                                 *(candidates or jd.default_policies())]))
    runs = sum(len(judged) - (c.kind == "scenario" and jd.ORACLE in judged) for c in cases)
    judging = MessageBar(runs, "simulate", per_message=True, started=started)
    try:
        result = jd.run_judge(cases, candidates, tune=tuner, progress=judging)
    finally:
        judging.close()
    json_path, md_path = jd.write_judge(result, out)
    click.echo(f"{json_path}\n{md_path}")
    click.echo(f"recommendation: {result.recommendation or 'none'} "
               f"({result.recommendation_reason})")
    sys.stdout.flush()
