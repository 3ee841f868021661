"""``boost-now`` (desched.policies.boost_now, judged by scripts/boost_now.py): its fast
class (``boost-predicted``'s heaps, rebuilt when γ moves) and its naive twin (every boost
computed afresh at every decision) decide alike; with every label equal its order is
first-come whatever the γ estimate does (``boost-predicted``'s is not); it never reads
``duration_s``."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies import make_policy
from desched.policies.boost_now import BoostNow, BoostNowNaive
from desched.simulator import simulate
from desched.trace import TaskTable
from tests.builders import T, examples, make_tasks, workloads


def _decisions(tasks: TaskTable, naive: bool, workers: int, window: int = 256
               ) -> list[tuple[float, ...]]:
    cls = BoostNowNaive if naive else BoostNow
    policy = cls(tasks, cls.Params(window=window))
    d = simulate(tasks, policy, workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts))


@settings(max_examples=examples(200), deadline=None)
@given(tasks=workloads(max_tasks=80, max_tenants=4), workers=st.integers(1, 4),
       window=st.sampled_from([2, 4, 256]))
def test_the_fast_class_gives_the_same_decisions_as_its_naive_twin(
    tasks: TaskTable, workers: int, window: int
) -> None:
    assert _decisions(tasks, False, workers, window) == _decisions(tasks, True, workers, window)


def _bursty_equal(seed: int, n: int = 1500) -> TaskTable:
    """Every task runs 100 s and is predicted 100 s; arrivals alternate between lulls and
    bursts, so the γ estimate moves a long way between windows."""
    rng = random.Random(seed)
    rows, t = [], 0.0
    for k in range(n):
        t += rng.expovariate(1 / (400.0 if (k // 300) % 2 == 0 else 20.0))
        rows.append(T(tenant=rng.choice("abc"), submit_s=t, duration_s=100.0,
                      predicted_s=100.0))
    return make_tasks(*rows)


def _order(tasks: TaskTable, policy: object, workers: int) -> list[int]:
    return list(simulate(tasks, policy, workers, engine="python").decisions.task)


@pytest.mark.parametrize("seed", [0, 1])
def test_with_every_label_equal_the_order_is_first_come(seed: int) -> None:
    tasks = _bursty_equal(seed)
    fifo = _order(tasks, make_policy("fifo", tasks), 2)
    for cls in (BoostNow, BoostNowNaive):
        assert _order(tasks, cls(tasks, cls.Params(window=64)), 2) == fifo
    # the defect it mends: boosts fixed at push under a moving γ reorder equal labels
    frozen = make_policy("boost-predicted", tasks, {"window": "64"})
    assert _order(tasks, frozen, 2) != fifo
    assert _decisions(tasks, False, 2, 64) == _decisions(tasks, True, 2, 64)


def test_the_policy_never_reads_duration_s() -> None:
    """The table a policy gets raises on any read of ``duration_s``
    (``TaskTable.without_durations``); the completion records carry the real durations."""
    tasks = _bursty_equal(3, 200)
    for cls in (BoostNow, BoostNowNaive):
        with pytest.raises(Exception):  # noqa: B017 - any refusal will do
            cls(tasks).tasks.duration_s[0]
