"""Policies rank on what a live system knows: ``duration_s`` is withheld from every policy that
does not declare itself clairvoyant (DESIGN.md, the second contract).

The mechanism (``Policy.__init__`` and ``make_policy``) hands such a policy
``TaskTable.without_durations()``, whose ``duration_s`` raises on any read. The poisoning
test checks the behaviour, whatever the mechanism: every non-clairvoyant policy decides the
same when the task table it is built over has its ``duration_s`` replaced by noise (the
simulator still runs each task for its true duration and sends the true completion record).
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.errors import DeschedError
from desched.policies import REGISTRY, make_policy
from desched.simulator import simulate
from desched.trace import DurationWithheld, TaskTable
from desched.workloads import generate
from tests.builders import T, make_tasks, workloads

NOT_CLAIRVOYANT = sorted(n for n, cls in REGISTRY.items() if not cls.clairvoyant())
CLAIRVOYANT = sorted(n for n, cls in REGISTRY.items() if cls.clairvoyant())


def with_quantiles(frame: pl.DataFrame, seed: int) -> pl.DataFrame:
    """``frame`` plus p50/p90 predictions around its ``predicted_s`` (some crossed)."""
    rng = np.random.default_rng(seed)
    p = frame["predicted_s"].to_numpy()
    return frame.with_columns(
        pl.Series("predicted_p50_s", p * rng.uniform(0.7, 1.1, p.size)),
        pl.Series("predicted_p90_s", p * rng.uniform(0.9, 4.0, p.size)),
    )


def poisoned(tasks: TaskTable, seed: int) -> TaskTable:
    """The same table with every ``duration_s`` replaced by noise (a fresh list)."""
    rng = random.Random(seed)
    noise = [rng.choice([1e-3, 1.0, 1e6]) * rng.random() + 1e-6 for _ in tasks.duration_s]
    return dataclasses.replace(tasks, duration_s=noise)


def decisions(tasks: TaskTable, policy_table: TaskTable, name: str, workers: int
              ) -> list[tuple[object, ...]]:
    """The decisions of ``name`` built over ``policy_table`` while the simulator runs
    ``tasks`` (their true durations). The Python loop runs the policy object itself; the
    compiled kernels are held to these objects' decisions by tests/test_kernels.py."""
    d = simulate(tasks, make_policy(name, policy_table), workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts, strict=True))


@pytest.fixture(scope="module")
def trace() -> TaskTable:
    frame = generate("flood", tasks=1500, tenants=12, workers=4, seed=5, predicted_noise=0.5)
    return TaskTable.from_frame(with_quantiles(frame, 5))


@pytest.mark.parametrize("name", NOT_CLAIRVOYANT)
def test_a_policy_that_is_not_clairvoyant_decides_the_same_on_poisoned_durations(name, trace):
    truth = decisions(trace, trace, name, 4)
    assert truth, "the run made no decision"
    assert decisions(trace, poisoned(trace, 1), name, 4) == truth


@pytest.mark.parametrize("name", NOT_CLAIRVOYANT)
@settings(max_examples=15, deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_poisoned_durations_change_no_decision_on_small_random_workloads(
    name, tasks, workers, seed
):
    assert decisions(tasks, poisoned(tasks, seed), name, workers) == decisions(
        tasks, tasks, name, workers)


@pytest.mark.parametrize("name", CLAIRVOYANT)
def test_the_poisoning_check_would_catch_a_policy_that_reads_durations(name, trace):
    # the clairvoyant bound reads duration_s by declaration: noise changes its decisions,
    # so the test above is able to fail
    assert decisions(trace, poisoned(trace, 1), name, 4) != decisions(trace, trace, name, 4)


def noisy_predictions(tasks: TaskTable, seed: int) -> TaskTable:
    """The same table with every ``predicted_s`` replaced by noise (a fresh list)."""
    rng = random.Random(seed)
    noise = [rng.choice([1e-3, 1.0, 1e6]) * rng.random() + 1e-6 for _ in tasks.predicted_s]
    return dataclasses.replace(tasks, predicted_s=noise)


PREDICTION_BLIND = sorted(n for n, cls in REGISTRY.items()
                          if "predicted_s" not in cls.reads | cls.optional_reads)


@pytest.mark.parametrize("name", PREDICTION_BLIND)
def test_a_policy_that_declares_no_prediction_decides_the_same_on_noisy_predictions(name, trace):
    # `desched policies` and the README's table say which policies a prediction moves: vtc,
    # which charges it at dispatch, had said nothing (a QA pass)
    assert decisions(trace, noisy_predictions(trace, 2), name, 4) == decisions(
        trace, trace, name, 4)


def test_the_prediction_check_would_catch_a_policy_that_uses_predictions_undeclared(trace):
    for name in ("vtc", "sjf-predicted"):
        assert "predicted_s" in REGISTRY[name].reads | REGISTRY[name].optional_reads
        assert decisions(trace, noisy_predictions(trace, 2), name, 4) != decisions(
            trace, trace, name, 4), name


@pytest.mark.parametrize("name", NOT_CLAIRVOYANT)
def test_reading_duration_from_a_policy_that_is_not_clairvoyant_raises(name):
    tasks = make_tasks(T("a", 0, 3, 2), T("b", 0, 5, 4))
    for naive in (False, True):
        policy = make_policy(name, tasks, naive=naive)
        with pytest.raises(DurationWithheld):
            policy.tasks.duration_s[0]
        with pytest.raises(DurationWithheld):
            list(policy.tasks.duration_s)
        assert isinstance(DurationWithheld("x"), DeschedError)
        # every other column is the caller's own list: a task added there is seen here
        assert policy.tasks.submit_s is tasks.submit_s
        assert policy.tasks.predicted_s is tasks.predicted_s


@pytest.mark.parametrize("name", CLAIRVOYANT)
def test_a_clairvoyant_policy_sees_the_true_durations(name):
    tasks = make_tasks(T("a", 0, 3, 2), T("b", 0, 5, 4))
    assert make_policy(name, tasks).tasks.duration_s == [3.0, 5.0]


def test_a_live_table_appends_to_the_view_of_a_policy_but_never_its_duration():
    tasks = TaskTable.empty()
    view = tasks.without_durations()
    assert view.without_durations() is view
    i = tasks.append("t0", "a", 1.0, duration_s=7.0, predicted_s=2.0, predicted_p90_s=5.0)
    assert (view.task_id[i], view.tenant_names[view.tenant[i]]) == ("t0", "a")
    assert (view.predicted_s[i], view.predicted_p50_s[i] != view.predicted_p50_s[i],
            view.predicted_p90_s[i]) == (2.0, True, 5.0)
    with pytest.raises(DurationWithheld):
        view.duration_s[i]
