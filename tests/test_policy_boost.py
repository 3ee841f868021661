"""``boost-predicted`` and ``fair-boost``: known answers of γ-Boost, the label model, the
estimator's fallback, the overtaking bound, the completion correction, and fast-naive
agreement on workloads with quantile predictions and non-default parameters."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies import make_policy
from desched.policies.boost_predicted import (
    BoostEstimator,
    BoostParams,
    naive_gamma,
    shifted_exponential,
)
from desched.simulator import simulate
from desched.trace import TaskTable
from tests.builders import T, examples, make_frame
from tests.test_policy_contract import requeue_ops

_times = st.integers(0, 40).map(lambda x: x / 2)
_sizes = st.integers(1, 12).map(lambda x: x / 2)


@st.composite
def quantile_workloads(draw: st.DrawFn, max_tasks: int = 40) -> TaskTable:
    """Random small workloads whose tasks have p50/p90 predictions (some missing, some
    crossed), tenants ``a``..``d`` with weights drawn too."""
    n = draw(st.integers(1, max_tasks))
    k = draw(st.integers(1, 4))
    tasks = [T("abcd"[draw(st.integers(0, k - 1))], draw(_times), draw(_sizes), draw(_sizes))
             for _ in range(n)]
    frame = make_frame(*tasks)
    p50 = [draw(st.one_of(st.just(math.nan), _sizes)) for _ in range(n)]
    p90 = [draw(st.one_of(st.just(math.nan), _sizes.map(lambda x: 3 * x))) for _ in range(n)]
    table = TaskTable.from_frame(frame)
    table.predicted_p50_s[:] = p50
    table.predicted_p90_s[:] = p90
    weights = draw(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=k, max_size=k))
    table.tenant_weight.update({c: w for c, w in enumerate(weights[: len(table.tenant_names)])
                                if w != 1.0})
    return table


_params = st.fixed_dictionaries({
    "window": st.sampled_from(["2", "3", "8", "256"]),
    "workers": st.sampled_from(["0", "1", "3"]),
    "scale": st.sampled_from(["1", "0.5", "10"]),
    "max_load": st.sampled_from(["0.5", "0.98"]),
})


def _decisions(tasks: TaskTable, name: str, params: dict[str, str], workers: int, naive: bool
               ) -> list[tuple[object, ...]]:
    d = simulate(tasks, make_policy(name, tasks, params, naive=naive), workers).decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts, strict=True))


@pytest.mark.parametrize("name", ["boost-predicted", "fair-boost"])
@settings(max_examples=examples(200), deadline=None)
@given(tasks=quantile_workloads(), workers=st.integers(1, 4), params=_params,
       sympathy=st.sampled_from(["0", "0.5", "3"]))
def test_fast_and_naive_boost_agree_with_quantiles_weights_and_any_setting(
    name, tasks, workers, params, sympathy
):
    if name == "boost-predicted":
        params = {**params, "sympathy": sympathy}
    assert _decisions(tasks, name, params, workers, False) == _decisions(
        tasks, name, params, workers, True)


def test_the_label_is_the_shifted_exponential_through_the_median_and_the_90th_percentile():
    c, theta = shifted_exponential(5.0, 4.0, 10.0)
    # P(S <= q) = 1 - exp(-(q - c) / theta) at the two quantiles
    assert 1 - math.exp(-(4.0 - c) / theta) == pytest.approx(0.5)
    assert 1 - math.exp(-(10.0 - c) / theta) == pytest.approx(0.9)
    # a p90 far above the median keeps the p90 (c would be negative): Exp through p90
    c, theta = shifted_exponential(5.0, 1.0, 100.0)
    assert c == 0.0 and 1 - math.exp(-100.0 / theta) == pytest.approx(0.9)
    assert shifted_exponential(5.0, math.nan, math.nan) == (0.0, 5.0)  # Exp(mean predicted)
    assert shifted_exponential(5.0, 4.0, 3.0) == (4.0, 0.0)  # crossed: the point p50


def _estimate(labels: list[tuple[float, float, float]], params: BoostParams) -> BoostEstimator:
    est = BoostEstimator(TaskTable.empty(), params)
    est.labels.extend(labels)
    est.refresh()
    return est


@pytest.mark.parametrize("rho", [0.3, 0.7, 0.9])
def test_gamma_of_exponential_sizes_is_the_mm1_decay_rate(rho):
    # M/M/1, mean size m: E[e^(gS)] = 1 / (1 - g m), so g = lambda (g m / (1 - g m)) gives
    # g = (1 - rho) / m, the decay rate of the FCFS waiting-time tail
    m, n = 2.0, 101
    gap = m / rho  # one arrival every m / rho seconds: lambda = rho / m
    est = _estimate([(0.0, m, j * gap) for j in range(n)], BoostParams(workers=1))
    assert est.gamma == pytest.approx((1 - rho) / m, rel=1e-9)
    solved = naive_gamma([(0.0, m, j * gap) for j in range(n)], 1, 0.98)
    assert solved is not None and solved[0] == est.gamma


def test_a_point_label_gets_the_boost_of_a_known_size():
    # b(s) = (1/g) ln(1 / (1 - e^(-g s))) (Yu & Scully, the known-size rule)
    est = _estimate([(3.0, 0.0, float(j)) for j in range(50)], BoostParams(workers=1, scale=1.0))
    g = est.gamma
    assert g is not None and g > 0
    # the root: g = lambda (e^(g s) - 1), lambda = 1 / s per second at rho = 3 capped to 0.98
    lam = 1.0 * (0.98 / 3.0)
    assert g == pytest.approx(lam * (math.exp(3 * g) - 1), rel=1e-9)
    for s in (0.5, 3.0, 20.0):
        assert est.boost(s, 0.0) == pytest.approx(math.log(1 / (1 - math.exp(-g * s))) / g)


def test_an_overloaded_estimate_is_solved_at_max_load():
    over = _estimate([(0.0, 2.0, j * 1.0) for j in range(101)], BoostParams(workers=1))
    at = _estimate([(0.0, 2.0, j * 2.0 / 0.9) for j in range(101)],
                   BoostParams(workers=1, max_load=0.9))
    capped = _estimate([(0.0, 2.0, j * 1.0) for j in range(101)],
                       BoostParams(workers=1, max_load=0.9))
    assert over.gamma == pytest.approx((1 - 0.98) / 2.0, rel=1e-9)  # rho 2 solved as 0.98
    assert capped.gamma == pytest.approx(at.gamma, rel=1e-9)


def test_workers_divide_the_arrival_rate():
    labels = [(0.0, 2.0, j * 1.0) for j in range(101)]  # rho 2 on one worker, 0.5 on four
    assert _estimate(labels, BoostParams(workers=4)).gamma == pytest.approx(0.25, rel=1e-9)


@settings(max_examples=examples(100), deadline=None)
@given(tasks=quantile_workloads(), params=_params)
def test_a_task_is_overtaken_only_by_tasks_that_arrive_within_their_boost(tasks, params):
    # one worker: j started before i although i arrived first and was queued when j started
    # means submit_j - b_j <= submit_i - b_i <= submit_i, so submit_j - submit_i <= b_j
    params = {**params, "workers": "1"}
    result = simulate(tasks, make_policy("boost-predicted", tasks, params), 1)
    boost = {int(i): float(b) for i, b in zip(result.decisions.task, result.decisions.parts[0],
                                              strict=True)}
    s, start = tasks.submit_s, result.start_s
    for i in range(len(tasks)):
        for j in range(len(tasks)):
            if s[i] < s[j] and start[j] < start[i] and s[j] <= start[j]:
                assert s[j] - s[i] <= boost[j] + 1e-9


def test_fair_boost_charges_an_under_estimated_task_in_full_at_completion():
    # a's first task is predicted 1 s and runs 10 s; every other task is predicted and runs
    # 1 s. Charged 10 s at a0's completion, a waits while b catches up with all three of
    # its tasks (charged only 1 s, a would get its second task after b's first)
    tasks = TaskTable.from_frame(make_frame(
        T("a", 0, 10, 1), T("b", 0, 1, 1), T("a", 0, 1, 1), T("b", 0, 1, 1), T("b", 0, 1, 1)))
    policy = make_policy("fair-boost", tasks)
    result = simulate(tasks, policy, 1, engine="python")  # the object keeps the state
    assert list(result.decisions.task) == [0, 1, 3, 4, 2]
    state = policy.state()
    assert state is not None and state["counter"] == {"a": 11.0, "b": 3.0}


def test_fair_boost_honours_weights_in_its_charges():
    tasks = TaskTable.from_frame(make_frame(T("a", 0, 4, 2), T("b", 0, 4, 2)))
    tasks.tenant_weight[0] = 2.0
    policy = make_policy("fair-boost", tasks)
    simulate(tasks, policy, 1, engine="python")
    state = policy.state()
    assert state is not None and state["counter"] == {"a": 2.0, "b": 4.0}


@pytest.mark.parametrize("name", ["boost-predicted", "boost-lanes", "boost-ledger", "fair-boost"])
@settings(max_examples=examples(150), deadline=None)
@given(data=st.data(), tasks=quantile_workloads(), params=_params, run=requeue_ops)
def test_a_task_taken_out_of_order_then_handed_back_decides_as_the_naive_twin(
    name: str, data: st.DataObject, tasks: TaskTable, params: dict[str, str],
    run: list[object],
) -> None:
    """The service's memory-fit dispatch ``take``s a task that is not the boost order's
    first, and a lease that expires hands it back with a boost of its new push: the fast
    class's heap entry from its first push must not come back to life (it did: a small
    ``window`` re-solves γ between the pushes)."""
    from tests.test_policy_contract import FitDriver, memory_needs

    mem = data.draw(memory_needs(tasks))
    fast, naive = make_policy(name, tasks, params), make_policy(name, tasks, params, naive=True)
    d_fast, d_naive = FitDriver(tasks, mem), FitDriver(tasks, mem)
    for op in [*run, *[1] * (2 * len(tasks))]:
        assert d_fast.step(fast, op) == d_naive.step(naive, op)  # type: ignore[arg-type]
    assert len(fast) == len(naive) == 0
