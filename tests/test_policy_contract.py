"""Contract tests that run over every registered policy by themselves."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies import REGISTRY, make_policy
from desched.simulator import simulate
from tests.builders import decision_sequence, workloads

POLICIES = sorted(REGISTRY)


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=150, deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4))
def test_fast_policy_gives_the_same_decisions_as_its_naive_twin(name, tasks, workers):
    fast = decision_sequence(tasks, name, workers, naive=False)
    naive = decision_sequence(tasks, name, workers, naive=True)
    assert fast == naive


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=60, deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4))
def test_every_task_runs_exactly_once_and_never_before_its_submission(name, tasks, workers):
    result = simulate(tasks, make_policy(name, tasks), workers)
    assert sorted(result.decisions.task) == list(range(len(tasks)))
    for i in range(len(tasks)):
        assert result.start_s[i] >= tasks.submit_s[i]
        assert result.end_s[i] == result.start_s[i] + tasks.duration_s[i]


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=30, deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4))
def test_a_worker_never_runs_two_tasks_at_once_and_is_never_idle_while_work_waits(
    name, tasks, workers
):
    result = simulate(tasks, make_policy(name, tasks), workers)
    by_worker: dict[int, list[tuple[float, float]]] = {}
    for i in range(len(tasks)):
        by_worker.setdefault(result.worker[i], []).append((result.start_s[i], result.end_s[i]))
    for spans in by_worker.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert start >= end
    # work conservation: when a task starts later than its submission, every worker was busy
    # at its submission instant or later until it started
    for i in range(len(tasks)):
        if result.start_s[i] > tasks.submit_s[i]:
            t = tasks.submit_s[i]
            busy = sum(
                1 for j in range(len(tasks)) if result.start_s[j] <= t < result.end_s[j]
            )
            assert busy == workers


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=20, deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4))
def test_the_simulation_is_deterministic(name, tasks, workers):
    assert decision_sequence(tasks, name, workers, False) == decision_sequence(
        tasks, name, workers, False
    )
