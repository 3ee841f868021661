"""The candidate of scripts/boost_slowdown.py keeps the registry's contract though it is not
registered: its fast class (ratings sorted at each completion, a heap per tenant) and its
naive twin (a list of every completion's slowdown per tenant, rescanned at each decision)
decide alike, with the guard firing; the guard serves the starved tenant's oldest task; it
never reads ``duration_s`` from the task table."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.simulator import simulate
from desched.trace import TaskTable
from scripts.boost_slowdown import BoostSlowdown, BoostSlowdownNaive
from tests.builders import T, examples, make_tasks, workloads


def _decisions(tasks: TaskTable, naive: bool, workers: int) -> list[tuple[float, ...]]:
    cls = BoostSlowdownNaive if naive else BoostSlowdown
    d = simulate(tasks, cls(tasks), workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts))


@settings(max_examples=examples(200), deadline=None)
@given(tasks=workloads(max_tasks=80, max_tenants=4), workers=st.integers(1, 4))
def test_the_fast_class_gives_the_same_decisions_as_its_naive_twin(
    tasks: TaskTable, workers: int
) -> None:
    assert _decisions(tasks, False, workers) == _decisions(tasks, True, workers)


def _skewed(seed: int, n: int = 400, starved: str = "a", others: str = "bc",
            gap: float = 6.0) -> TaskTable:
    """An overloaded queue: the ``starved`` tenants send short tasks predicted long (they
    wait behind everyone under the boost order and finish at a high bounded slowdown), the
    ``others`` long tasks predicted about right; ``gap``: the mean time between arrivals."""
    rng = random.Random(seed)
    rows, t = [], 0.0
    for _ in range(n):
        t += rng.expovariate(1 / gap)
        tenant = rng.choice(starved + others)
        if tenant in starved:
            rows.append(T(tenant=tenant, submit_s=t, duration_s=rng.uniform(1, 5),
                          predicted_s=rng.uniform(200, 400)))
        else:
            d = rng.uniform(5, 40)
            rows.append(T(tenant=tenant, submit_s=t, duration_s=d,
                          predicted_s=d * rng.uniform(0.8, 1.25)))
    return make_tasks(*rows)


class _Counting(BoostSlowdown):
    fired = 0

    def pop(self, now: float) -> int:
        if self._guard_choice() is not None:
            type(self).fired += 1
        return super().pop(now)


def test_on_a_skewed_queue_the_guard_fires_and_both_twins_agree() -> None:
    # one starved tenant on 2 workers; three of eight on 4 workers, where the guard's share
    # of the workers (ceil(4 / 2) = 2 running guard tasks) binds before one per tenant does
    for seed, workers, starved, others in [(0, 2, "a", "bc"), (1, 2, "a", "bc"),
                                           (2, 4, "ade", "bcfgh"), (3, 4, "ade", "bcfgh")]:
        tasks = _skewed(seed, 600, starved, others, gap=12.0 / workers)
        _Counting.fired = 0
        simulate(tasks, _Counting(tasks), workers, engine="python")
        assert _Counting.fired > 5
        assert _decisions(tasks, False, workers) == _decisions(tasks, True, workers)


def _rated(cls: type[BoostSlowdown | BoostSlowdownNaive], tasks: TaskTable, first: int,
           starved: str, workers: int) -> BoostSlowdown | BoostSlowdownNaive:
    """A policy given the ``first`` tasks at 0 s, all dispatched; the ``starved`` tenants'
    completing at 100 s, the others' at 10 s (each ran 10 s: bounded slowdowns 10 and 1);
    then the remaining tasks pushed at 202 s."""
    policy = cls(tasks, cls.Params(workers=workers))
    for i in range(first):
        policy.push(i, 0.0)
    order = [policy.pop(0.0) for _ in range(first)]
    late = [i for i in order if tasks.tenant_names[tasks.tenant[i]] in starved]
    for i in order:
        if i not in late:
            policy.complete(i, 10.0, 10.0)
    for i in late:
        policy.complete(i, 100.0, 10.0)
    for i in range(first, len(tasks.task_id)):
        policy.push(i, 202.0)
    return policy


def test_the_guard_serves_the_starved_tenants_oldest_task() -> None:
    # a's four finished tasks ran 10 s and ended at 100 s (bounded slowdown 10), b's and c's
    # ended at 10 s (1): a is rated 10 against a typical 4, above 2 x 4, so at 202 s a's
    # oldest queued task goes before b's task predicted at 1 s
    rows = [T(tenant=u, submit_s=0.0, duration_s=10.0, predicted_s=10.0)
            for u in "aaaabbbbcccc"]
    rows += [T(tenant="a", submit_s=200.0, duration_s=10.0, predicted_s=500.0),
             T(tenant="a", submit_s=201.0, duration_s=10.0, predicted_s=400.0),
             T(tenant="b", submit_s=202.0, duration_s=10.0, predicted_s=1.0)]
    tasks = make_tasks(*rows)
    seconds = []
    for cls in (BoostSlowdown, BoostSlowdownNaive):
        policy = _rated(cls, tasks, first=12, starved="a", workers=4)
        assert tasks.task_id[policy.pop(202.0)] == "t12", cls  # a's oldest
        if isinstance(policy, BoostSlowdown):  # a has a running guard task: no guard now
            assert policy._guard_choice() is None
        seconds.append(policy.pop(202.0))
    assert seconds[0] == seconds[1]


def test_decisions_do_not_change_when_duration_s_is_noise() -> None:
    """The table a policy gets raises on any read of ``duration_s``
    (``TaskTable.without_durations``); the completion records carry the real durations."""
    tasks = _skewed(7)
    first = _decisions(tasks, False, 2)
    assert first == _decisions(tasks, True, 2)
    for cls in (BoostSlowdown, BoostSlowdownNaive):
        with pytest.raises(Exception):  # noqa: B017 - any refusal will do
            cls(tasks).tasks.duration_s[0]


def test_the_guard_holds_at_most_half_the_workers() -> None:
    # a and d rated 10, four tenants rated 1 (typical 4): both starved, but with 2 workers
    # one running guard task is the guard's share; d's task waits for boost's order
    rows = [T(tenant=u, submit_s=0.0, duration_s=10.0, predicted_s=10.0)
            for u in "aaaaddddbbbbcccceeeeffff"]
    rows += [T(tenant="a", submit_s=200.0, duration_s=10.0, predicted_s=500.0),
             T(tenant="b", submit_s=201.0, duration_s=10.0, predicted_s=1.0),
             T(tenant="d", submit_s=201.5, duration_s=10.0, predicted_s=500.0)]
    tasks = make_tasks(*rows)
    n = len(rows) - 3
    picks = []
    for cls in (BoostSlowdown, BoostSlowdownNaive):
        policy = _rated(cls, tasks, first=n, starved="ad", workers=2)
        first = tasks.task_id[policy.pop(202.0)]
        assert first == f"t{n}", cls  # a's task: a and d tie at 10, a has the smaller code
        picks.append([first, tasks.task_id[policy.pop(202.0)]])
    # b's, older and predicted shorter than d's, by boost's order (first come or boosted);
    # not d's: the guard already holds one of the 2 workers
    assert picks[0] == picks[1] == [f"t{n}", f"t{n + 1}"]
