"""The deployment judge's independent work on a ``Pool``: a layer around
``desched.bench.judge``, whose results it leaves as they are.

- ``prepare_cases``: each log and scenario case (``judge_cases.prepare_log`` /
  ``prepare_scenario``: a training and the predictions, or a cache read) is one call;
- ``judge_runs``: the simulations ``run_judge`` will make that are known before it runs:
  today's scorer, the clairvoyant bound and each candidate on each case, and each log's
  frontier (the family on the clairvoyant twin and on the predictions,
  ``desched.bench.frontier``); with a ``LoloTuner``, its grid on every tuning log and
  scenario (and the tuning logs' frontiers when they are not the judged logs). Another
  tuner's parameters are not known ahead: its candidates' runs are left to ``run_judge``;
- ``prefill``: the runs not made yet, up to eight of one case per call (the largest cases
  first); each ``Outcome`` goes into its case's ``outcomes`` under ``verdicts.PREFILLED``, which
  ``judge.evaluate`` takes on the run's first call instead of simulating. ``run_judge`` then
  reads them: its verdicts, frontiers and recommendation are the serial run's, bit for bit
  (the simulator is deterministic; ``tests/test_pool.py``).

A prefilled run the judge never asks for (a grid point a tuner's no-harm filter skips) costs
its simulation and changes nothing. Costs: the serial run's CPU time plus one pickled test
part per call and each process's start (an import of desched, numpy and polars); the wall
time divides by the pool's processes, down to the longest call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from desched.bench import judge as jd
from desched.bench.judge_cases import SCENARIO_TEST_SEED, Progress, case_notes
from desched.bench.pool import SERIAL, Pool
from desched.bench.verdicts import PREFILLED

Run = tuple[jd.Case, str, Mapping[str, Any]]
"""One simulation: a case, a policy spec and a tuner's extra parameters (``judge.evaluate``)."""


def _prepare_log(path: Path, cache_dir: Path | None, max_tasks: int | None,
                 settings: Any) -> jd.Case:
    return jd.prepare_log(path, cache_dir=cache_dir, max_tasks=max_tasks, settings=settings)


def _prepare_scenario(name: str, cache_dir: Path | None, tasks: int, settings: Any,
                      seed: int = SCENARIO_TEST_SEED) -> jd.Case:
    return jd.prepare_scenario(name, cache_dir=cache_dir, tasks=tasks, settings=settings,
                               seed=seed)


def _prepare(kind: str, *args: Any) -> jd.Case:
    if kind == "log":
        return _prepare_log(*args)
    return _prepare_scenario(*args)


def prepare_cases(logs: Sequence[tuple[Path, int | None]], scenarios: Sequence[tuple[str, int]],
                  *, cache_dir: Path | None, settings: Any = None, pool: Pool = SERIAL,
                  scenario_seed: int = SCENARIO_TEST_SEED,
                  progress: Progress | None = None) -> list[jd.Case]:
    """The log cases (path, max tasks or None), then the scenario cases (name, tasks; test
    trace of ``scenario_seed``), as ``judge.prepare_log`` and ``prepare_scenario`` make
    them, each one call of ``pool``; ``progress("NAME: ...")`` as each is ready."""
    calls: list[tuple[Any, ...]] = [("log", Path(p), cache_dir, n, settings) for p, n in logs]
    calls += [("scenario", name, cache_dir, tasks, settings, scenario_seed)
              for name, tasks in scenarios]

    def ready(i: int) -> None:
        if progress is not None:
            progress(f"{_label(calls[i])}: ready")

    cases = list(pool(_prepare, calls, done=ready))
    if progress is not None:
        for case in cases:
            for note in case_notes(case):
                progress(note)
    return cases


def _label(call: tuple[Any, ...]) -> str:
    from desched.bench.judge_cases import log_name

    return log_name(call[1]) if call[0] == "log" else str(call[1])


def _outcomes(case: jd.Case, runs: Sequence[tuple[str, Mapping[str, Any]]]) -> list[jd.Outcome]:
    return [jd.evaluate(case, spec, extra) for spec, extra in runs]


def default_runs(cases: Sequence[jd.Case], policies: Sequence[str] | None,
                 tuned: bool = False) -> list[tuple[int, str, str]]:
    """(case index, spec, resolved key) of every run of today's scorer, the bound and each
    candidate that ``run_judge`` makes without a tuner (with one, only today's and the
    bound's), each once, in ``run_judge``'s order."""
    from desched.bench.specs import policy_spec

    order = [jd.TODAY, jd.ORACLE] if tuned else _order(policies)
    runs = []
    for i, case in enumerate(cases):
        seen: set[str] = set()
        for spec in order:
            if case.kind == "scenario" and spec == jd.ORACLE:
                continue
            key = policy_spec(*jd.resolve(case, spec))
            if key not in seen and not _done(case, key):
                seen.add(key)
                runs.append((i, spec, key))
    return runs


def _order(policies: Sequence[str] | None) -> list[str]:
    candidates = policies if policies is not None else jd.default_policies()
    return list(dict.fromkeys([jd.TODAY, jd.ORACLE, *candidates]))


def _done(case: jd.Case, key: str) -> bool:
    return key in case.outcomes or PREFILLED + key in case.outcomes


def frontier_runs(case: jd.Case, *, deployable: bool = False) -> list[Run]:
    """The runs of log ``case``'s frontier (``frontier.frontier_of``): today's and the
    bound's, the family on the clairvoyant twin (made here, as ``run_judge`` would) and,
    with ``deployable``, on the case's own predictions."""
    from desched.bench.frontier import clairvoyant_case, family

    specs = family()
    twin = clairvoyant_case(case)
    runs: list[Run] = [(case, jd.TODAY, {}), (case, jd.ORACLE, {})]
    runs += [(twin, spec, {}) for spec in specs]
    if deployable:
        runs += [(case, spec, {}) for spec in specs]
    return runs


def judge_runs(cases: Sequence[jd.Case], policies: Sequence[str] | None = None, *,
               tune: jd.Tune | None = None,
               training_logs: Sequence[jd.Case] | None = None,
               deployable: bool = False) -> list[Run]:
    """The runs of ``run_judge(cases, policies, tune=tune, training_logs=training_logs,
    deployable=deployable)`` known before it runs (module docstring), in its order, possibly
    repeated."""
    from desched.bench.lolo import LoloTuner, grid_of

    order = _order(policies)
    lolo = tune if isinstance(tune, LoloTuner) else None
    gridded = [s for s in order[2:] if lolo is not None and len(grid_of(_name(s))) > 1]
    runs: list[Run] = []
    for case in cases:
        if case.kind == "log":
            runs += frontier_runs(case, deployable=deployable)
        for spec in order:
            known = spec in (jd.TODAY, jd.ORACLE) or tune is None or (
                lolo is not None and spec not in gridded)  # a grid of one: {} on any logs
            if known and not (case.kind == "scenario" and spec == jd.ORACLE):
                runs.append((case, spec, {}))
    if lolo is not None and gridded:
        names = list(dict.fromkeys(_name(s) for s in gridded))
        for log in jd.tuning_pool(cases if training_logs is None else training_logs):
            runs += frontier_runs(log, deployable=False)
            runs += [(log, name, point) for name in names for point in grid_of(name)]
        for scenario in lolo.scenarios:
            runs.append((scenario, jd.TODAY, {}))
            runs += [(scenario, name, point) for name in names for point in grid_of(name)]
    return runs


def _name(spec: str) -> str:
    return spec.partition("?")[0]


def pending(runs: Sequence[Run]) -> list[Run]:
    """``runs`` less those made or prefilled already, each resolved spec once per case, the
    largest cases first (stable): what ``prefill`` simulates."""
    from desched.bench.specs import policy_spec

    todo: dict[tuple[int, str], Run] = {}
    for case, spec, extra in runs:
        key = policy_spec(*jd.resolve(case, spec, extra))
        if not _done(case, key):
            todo.setdefault((id(case), key), (case, spec, extra))
    return sorted(todo.values(), key=lambda run: -run[0].tasks)


def prefill(runs: Sequence[Run], *, pool: Pool = SERIAL, progress: Progress | None = None,
            per_call: int = 8) -> int:
    """Simulate the ``pending`` runs on ``pool``, up to ``per_call`` runs of one case per call
    (a case's test part is pickled once per call: about 20 ms for 36,000 tasks, a fifth of a
    simulation), and put each outcome in its case's ``outcomes`` as prefilled (module
    docstring); ``progress("K/N simulated, NAME: SPEC")`` once per run, as its call ends.
    Returns how many ran."""
    todo = pending(runs)
    by_case: dict[int, list[Run]] = {}
    for run in todo:
        by_case.setdefault(id(run[0]), []).append(run)
    calls = [group[k:k + per_call] for group in by_case.values()
             for k in range(0, len(group), per_call)]  # still the largest cases first
    finished = 0

    def ended(i: int) -> None:
        nonlocal finished
        for case, spec, extra in calls[i]:
            finished += 1
            if progress is not None:
                extra_text = "" if not extra else f" {dict(extra)}"
                progress(f"{finished}/{len(todo)} simulated, {case.name}: {spec}{extra_text}")

    # each call gets the case without its outcomes and caches: the process reads its own
    args = [(dataclasses.replace(call[0][0], outcomes={}, tenants=None, table=None),
             [(spec, dict(extra)) for _, spec, extra in call]) for call in calls]
    for call, outcomes in zip(calls, pool(_outcomes, args, done=ended), strict=True):
        for (case, _, _), outcome in zip(call, outcomes, strict=True):
            case.outcomes[PREFILLED + outcome.policy] = outcome
    return len(todo)


def prefill_outcomes(cases: Sequence[jd.Case], policies: Sequence[str] | None = None, *,
                     tuned: bool = False, pool: Pool = SERIAL) -> int:
    """``prefill`` the runs of ``default_runs`` (today's scorer, the bound and, without a
    tuner, each candidate on each case); returns how many ran."""
    runs: list[Run] = [(cases[i], spec, {}) for i, spec, _ in default_runs(cases, policies,
                                                                           tuned)]
    return prefill(runs, pool=pool)
