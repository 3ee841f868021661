"""``boost-now`` (desched.policies.boost_now, judged by scripts/boost_now.py): its fast
class (``boost-predicted``'s heaps, rebuilt when the ranking γ is set) and its naive twin
(every boost computed afresh at every decision) decide alike, at every queue depth of the
amortised re-keying; with every label equal its order is first-come whatever the γ estimate
does (``boost-predicted``'s is not); a deep queue is re-keyed at most once per ``q /
rekey_spread`` dispatches; it never reads ``duration_s``."""

from __future__ import annotations

import copy
import json
import math
import random
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies import make_policy
from desched.policies.boost_now import BoostNow, BoostNowNaive
from desched.policies.boost_predicted import keys_state
from desched.simulator import simulate
from desched.trace import TaskTable
from tests.builders import T, examples, make_tasks, workloads
from tests.test_policy_contract import FitDriver, copies, fit_ops, memory_needs, requeue_ops
from tests.test_policy_state import Driver, ops


def _decisions(tasks: TaskTable, naive: bool, workers: int, window: int = 256,
               depth: int = 4096, spread: int = 16) -> list[tuple[float, ...]]:
    cls = BoostNowNaive if naive else BoostNow
    policy = cls(tasks, cls.Params(window=window, rekey_depth=depth, rekey_spread=spread))
    d = simulate(tasks, policy, workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts))


_depths, _spreads = st.sampled_from([0, 1, 3, 4096]), st.sampled_from([0, 1, 2, 5, 16])
_deep = st.fixed_dictionaries({"window": st.sampled_from(["2", "3", "8"]),
                               "rekey_depth": st.sampled_from(["0", "1", "3"]),
                               "rekey_spread": st.sampled_from(["1", "2", "5"])})
"""Settings under which most moves of the estimate are deferred on the generated queues."""


@settings(max_examples=examples(200), deadline=None)
@given(tasks=workloads(max_tasks=80, max_tenants=4), workers=st.integers(1, 4),
       window=st.sampled_from([2, 4, 256]), depth=_depths, spread=_spreads)
def test_the_twins_agree_at_every_queue_depth_of_the_amortised_re_keying(
    tasks: TaskTable, workers: int, window: int, depth: int, spread: int
) -> None:
    assert (_decisions(tasks, False, workers, window, depth, spread)
            == _decisions(tasks, True, workers, window, depth, spread))


@settings(max_examples=examples(80), deadline=None)
@given(data=st.data(), tasks=workloads(), run=requeue_ops, params=_deep)
def test_take_pop_fitting_and_state_match_the_naive_twin_with_re_keys_deferred(
    data: st.DataObject, tasks: TaskTable, run: list[object], params: dict[str, str]
) -> None:
    mem = data.draw(memory_needs(tasks))
    fast = make_policy("boost-now", tasks, params)
    naive = make_policy("boost-now", tasks, params, naive=True)
    d_fast, d_naive = FitDriver(tasks, mem), FitDriver(tasks, mem)
    for op in [*run, *[1] * (2 * len(tasks))]:
        assert d_fast.step(fast, op) == d_naive.step(naive, op)
        assert fast.state() == naive.state()


@settings(max_examples=examples(80), deadline=None)
@given(data=st.data(), tasks=workloads(), before=fit_ops, params=_deep)
def test_the_pop_sequence_is_successive_pops_on_a_copy_with_re_keys_deferred(
    data: st.DataObject, tasks: TaskTable, before: list[object], params: dict[str, str]
) -> None:
    """The lookahead of a memory-aware poll tracks the ranking γ a pop would set (and the
    dispatches counted since) as the pops themselves do."""
    driver = FitDriver(tasks, data.draw(memory_needs(tasks)))
    policy = make_policy("boost-now", tasks, params)
    for op in before:
        driver.step(policy, op)
    now = driver.now + 0.25
    trial, _ = copies(policy, driver)
    assert list(policy.pop_sequence(now)) == [trial.pop(now) for _ in range(len(trial))]


@settings(max_examples=examples(80), deadline=None)
@given(tasks=workloads(), before=ops, after=ops, params=_deep)
def test_a_restart_keeps_the_ranking_gamma_and_the_dispatches_since(
    tasks: TaskTable, before: list[int], after: list[int], params: dict[str, str]
) -> None:
    driver = Driver(tasks)
    original = make_policy("boost-now", tasks, params)
    for op in before:
        driver.step(original, op)
    restored = make_policy("boost-now", tasks, params)
    for i in sorted(driver.queued):
        restored.push(i, driver.now)
    restored.restore(json.loads(json.dumps(original.state(), allow_nan=False)))
    twin = copy.deepcopy(driver)
    for op in [*after, *[1] * len(tasks)]:
        assert driver.step(original, op) == twin.step(restored, op)
    assert restored.state() == original.state()


def test_a_deep_queue_is_re_keyed_once_per_q_over_spread_dispatches() -> None:
    """A 6,000-task burst (one minute's arrivals) under ``window`` 8: the estimate moves at nearly every 8th
    dispatch; at the default settings the queue is re-keyed only where ``q <= 4,096`` or
    ``q / 16`` dispatches have passed since the last re-key, and at ``rekey_spread`` 0 at
    every move."""
    rng = random.Random(7)
    tasks = make_tasks(*(T(tenant=rng.choice("abcd"), submit_s=k * 0.01, duration_s=1.0,
                           predicted_s=rng.choice([1.0, 5.0, 30.0, 200.0]))
                         for k in range(6000)))

    def run(spread: int) -> list[tuple[int, bool, bool, int]]:
        """Per dispatch: tasks left, whether the estimate moved, whether the queue was
        re-keyed, dispatches since the re-key before."""
        policy = BoostNow(tasks, BoostNow.Params(window=8, rekey_spread=spread))
        for i in range(len(tasks)):
            policy.push(i, 60.0)
        seen, since = [], 0
        for _ in range(len(tasks)):
            estimate, ranking = policy.estimator.gamma, policy.gamma
            policy.pop(60.0)
            since += 1
            rekeyed = policy.gamma != ranking
            seen.append((len(policy), policy.estimator.gamma != estimate, rekeyed, since))
            since = 0 if rekeyed else since
        return seen

    amortised, every = run(16), run(0)
    deep = [(q, d) for q, _, rekeyed, d in amortised if rekeyed and q > 4096]
    assert len(deep) >= 5 and all(d * 16 >= q for q, d in deep)
    assert all(rekeyed == moved for q, moved, rekeyed, _ in amortised if q < 4096)
    assert all(rekeyed == moved for _, moved, rekeyed, _ in every)
    moves = sum(moved for _, moved, _, _ in every)
    assert moves > sum(rekeyed for _, _, rekeyed, _ in amortised) + 100


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
        deferred = cls.Params(window=8, rekey_depth=0, rekey_spread=2)
        assert _order(tasks, cls(tasks, deferred), 2) == fifo
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


_label_part = st.one_of(st.just(0.0), st.just(math.nan), st.just(math.inf),
                        st.floats(1e-6, 1e7, allow_nan=False))


@settings(max_examples=examples(300), deadline=None)
@given(labels=st.lists(st.tuples(_label_part, _label_part), min_size=0, max_size=40),
       g=st.one_of(st.none(), st.floats(1e-9, 10.0)), scale=st.sampled_from([0.25, 1.0, 10.0]))
def test_the_re_key_s_array_boosts_are_the_scalar_boosts_bit_for_bit(
    labels: list[tuple[float, float]], g: float | None, scale: float
) -> None:
    """The re-keying computes boosts over arrays; each is the scalar ``boost_under`` of its
    label: past the pole (γθ >= 1), past the float range (γc > 700), at the point label
    (c = θ = 0: infinite boost), NaN labels included."""
    tasks = _bursty_equal(0, 10)
    est = BoostNow(tasks, BoostNow.Params(scale=scale)).estimator
    c = np.array([x[0] for x in labels], dtype=np.float64)
    theta = np.array([x[1] for x in labels], dtype=np.float64)
    got = est.boosts_under(c, theta, g).tolist()
    want = [est.boost_under(a, t, g) for a, t in labels]
    assert [struct.pack("<d", x) for x in got] == [struct.pack("<d", x) for x in want]


@settings(max_examples=examples(80), deadline=None)
@given(tasks=workloads(), before=ops, between=st.lists(st.just(0), max_size=20), after=ops,
       params=st.sampled_from([{}, {"window": "2"}, {"window": "3", "rekey_depth": "1",
                                                     "rekey_spread": "2"}]))
def test_a_task_queued_after_the_save_is_ranked_under_the_restored_gamma(
    tasks: TaskTable, before: list[int], between: list[int], after: list[int],
    params: dict[str, str]
) -> None:
    """A service killed after a state save restarts from the queue as stored, which may hold
    tasks pushed after that save: the fast class and its naive twin, each rebuilt from that
    queue and the older state, then decide alike (every queued task under the one γ)."""
    driver = Driver(tasks)
    original = make_policy("boost-now", tasks, params)
    for op in before:
        driver.step(original, op)
    state = json.loads(json.dumps(original.state(), allow_nan=False))
    for op in between:  # pushes only: tasks the saved state does not hold
        driver.step(original, op)
    rebuilt = []
    for naive in (False, True):
        policy = make_policy("boost-now", tasks, params, naive=naive)
        for i in sorted(driver.queued):
            policy.push(i, driver.now)
        policy.restore(state)
        rebuilt.append(policy)
    fast, naive_twin = rebuilt
    twin = copy.deepcopy(driver)
    for op in [*after, *[1] * len(tasks)]:
        assert driver.step(fast, op) == twin.step(naive_twin, op)
    assert fast.state() == naive_twin.state()


def test_the_saved_state_does_not_grow_with_the_queue() -> None:
    """Boosts are recomputed from the ranking γ at a restore, so the state holds the
    estimator, the ranking γ and the finite due times only: the service saves it every few
    seconds under its lock (a state of every queued task's keys was 4 MB and ~180 ms of
    ``state()`` and ``json.dumps`` at 100,000 queued)."""
    sizes = []
    for queued in (100, 5000):
        tasks = _bursty_equal(5, queued + 300)
        policy = make_policy("boost-now", tasks)
        for i in range(queued + 300):
            policy.push(i, 1e9)
        for _ in range(300):
            policy.pop(1e9)
        state = policy.state()
        assert state is not None and policy.estimator.gamma is not None and state["due"] == {}
        sizes.append(len(json.dumps(state)))
    assert sizes[1] < sizes[0] + 100
    guarded = make_policy("boost-now", tasks, {"sympathy": "2"})
    for i in range(400):
        guarded.push(i, 1e9)
        if i % 2:
            guarded.pop(1e9)
    state = guarded.state()
    assert state is not None
    assert set(state["due"]) == {tasks.task_id[i] for i in guarded.keys
                                 if guarded.keys[i][2] != math.inf} != set()


@settings(max_examples=examples(60), deadline=None)
@given(tasks=workloads(), before=ops, after=ops)
def test_a_state_saved_before_the_ranking_gamma_is_read_as_the_estimate_s(
    tasks: TaskTable, before: list[int], after: list[int]
) -> None:
    """A service upgraded under a saved state of the earlier form (every queued task's
    ``[boost, boosted arrival, due]`` under the estimator's γ, no ranking γ) restarts from
    it: ranking γ the estimator's, due times from those keys; both twins decide alike."""
    driver = Driver(tasks)
    original = make_policy("boost-now", tasks, {"sympathy": "1"})
    for op in before:
        driver.step(original, op)
    estimator = original.estimator
    keys = {i: (b, k, d) for i, (b, k, d) in original.keys.items()}
    old = json.loads(json.dumps({"estimator": estimator.state(),
                                 "keys": keys_state(tasks, keys)}, allow_nan=False))
    rebuilt = []
    for naive in (False, True):
        policy = make_policy("boost-now", tasks, {"sympathy": "1"}, naive=naive)
        for i in sorted(driver.queued):
            policy.push(i, driver.now)
        policy.restore(old)
        rebuilt.append(policy)
    fast, naive_twin = rebuilt
    assert fast.gamma == estimator.gamma
    assert {i: d for i, (_, _, d) in fast.keys.items()} == {i: d for i, (_, _, d) in keys.items()}
    twin = copy.deepcopy(driver)
    for op in [*after, *[1] * len(tasks)]:
        assert driver.step(fast, op) == twin.step(naive_twin, op)


def test_a_long_walk_of_a_deep_queue_is_the_pops_on_a_copy() -> None:
    """A memory-aware poll may walk thousands of candidates; each time the walk would set the
    ranking γ, the rest is ranked over arrays: the walk's first 1,500 candidates are the
    first 1,500 pops of a copy, with the queue above and below ``rekey_depth``."""
    rng = random.Random(11)
    tasks = make_tasks(*(T(tenant=rng.choice("abcd"), submit_s=k * 0.05, duration_s=1.0,
                           predicted_s=rng.choice([1.0, 3.0, 30.0, 200.0, 900.0]))
                         for k in range(6000)))
    for depth in (10_000, 100):
        policy = make_policy("boost-now", tasks, {"window": "16", "rekey_depth": str(depth)})
        for i in range(len(tasks)):
            policy.push(i, 400.0)
        for _ in range(40):  # an estimate, and a ranking γ, before the walk
            policy.pop(400.0)
        trial = copy.deepcopy(policy, {id(policy.tasks): policy.tasks})
        walk = policy.pop_sequence(400.0)
        assert [next(walk) for _ in range(1500)] == [trial.pop(400.0) for _ in range(1500)]
