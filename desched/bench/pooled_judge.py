"""The deployment judge's independent work on a ``Pool``: a layer around
``desched.bench.judge``, which it leaves unchanged.

- ``prepare_cases``: each log and scenario case (``judge_cases.prepare_log`` /
  ``prepare_scenario``: a training and the predictions, or a cache read) is one call;
- ``prefill_outcomes``: every simulation ``run_judge`` makes with the default tuner (today's
  scorer, the clairvoyant bound, each candidate on each case) is one call, and its
  ``Outcome`` goes into the case's ``outcomes``, the cache ``judge.evaluate`` reads first.
  ``run_judge`` then only reads them: its verdicts and recommendation are the serial run's.

A tuner's parameters depend on the other cases, so with a tuner only today's and the bound's
runs are prefilled. Costs: the serial run's CPU time plus one pickled test part per call;
the wall time divides by the pool's processes, up to the longest single simulation.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from desched.bench import judge as jd
from desched.bench.pool import SERIAL, Pool


def _prepare_log(path: Path, cache_dir: Path | None, max_tasks: int | None,
                 settings: Any) -> jd.Case:
    return jd.prepare_log(path, cache_dir=cache_dir, max_tasks=max_tasks, settings=settings)


def _prepare_scenario(name: str, cache_dir: Path | None, tasks: int, settings: Any) -> jd.Case:
    return jd.prepare_scenario(name, cache_dir=cache_dir, tasks=tasks, settings=settings)


def _prepare(kind: str, *args: Any) -> jd.Case:
    if kind == "log":
        return _prepare_log(*args)
    return _prepare_scenario(*args)


def prepare_cases(logs: Sequence[tuple[Path, int | None]], scenarios: Sequence[tuple[str, int]],
                  *, cache_dir: Path | None, settings: Any = None,
                  pool: Pool = SERIAL) -> list[jd.Case]:
    """The log cases (path, max tasks or None), then the scenario cases (name, tasks), as
    ``judge.prepare_log`` and ``prepare_scenario`` make them, each one call of ``pool``."""
    calls: list[tuple[Any, ...]] = [("log", Path(p), cache_dir, n, settings) for p, n in logs]
    calls += [("scenario", name, cache_dir, tasks, settings) for name, tasks in scenarios]
    return list(pool(_prepare, calls))


def _outcome(case: jd.Case, spec: str) -> jd.Outcome:
    return jd.evaluate(case, spec)


def default_runs(cases: Sequence[jd.Case], policies: Sequence[str] | None,
                 tuned: bool = False) -> list[tuple[int, str, str]]:
    """(case index, spec, resolved key) of every run ``run_judge`` makes without a tuner
    (with one, only today's and the bound's), each once, in ``run_judge``'s order."""
    from desched.bench.specs import policy_spec

    candidates = list(dict.fromkeys(policies if policies is not None
                                    else jd.default_policies()))
    order = list(dict.fromkeys([jd.TODAY, jd.ORACLE, *candidates]))
    if tuned:
        order = [jd.TODAY, jd.ORACLE]
    runs = []
    for i, case in enumerate(cases):
        seen = set(case.outcomes)
        for spec in order:
            if case.kind == "scenario" and spec == jd.ORACLE:
                continue
            key = policy_spec(*jd.resolve(case, spec))
            if key not in seen:
                seen.add(key)
                runs.append((i, spec, key))
    return runs


def prefill_outcomes(cases: Sequence[jd.Case], policies: Sequence[str] | None = None, *,
                     tuned: bool = False, pool: Pool = SERIAL) -> int:
    """Simulate every run of ``default_runs`` on ``pool`` (the largest cases first) and put
    each outcome in its case's ``outcomes``; returns how many ran."""
    runs = sorted(default_runs(cases, policies, tuned), key=lambda r: -cases[r[0]].tasks)
    bare = [dataclasses.replace(c, outcomes={}) for c in cases]
    outcomes = pool(_outcome, [(bare[i], spec) for i, spec, _ in runs])
    for (i, _, key), outcome in zip(runs, outcomes, strict=True):
        cases[i].outcomes[key] = outcome
    return len(runs)
