"""The candidate of scripts/fsp_calibrated.py keeps the registry's contract though it is not
registered: its fast class (a ring of records) and its naive twin (every record in a list)
decide alike, also with takes, withdrawals and hand-backs; it never reads ``duration_s``
from the task table; the calibration is worked by hand."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies.base import Policy
from desched.simulator import simulate
from desched.trace import TaskTable
from desched.workloads import generate
from scripts.fsp_calibrated import MIN_DONE, FspCalibrated, FspCalibratedNaive
from tests.builders import T, examples, make_tasks, workloads
from tests.test_duration_withheld import poisoned, with_quantiles
from tests.test_policy_contract import FitDriver, memory_needs, requeue_ops


def _decisions(policy: Policy, tasks: TaskTable, workers: int) -> list[tuple[float, ...]]:
    d = simulate(tasks, policy, workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts, strict=True))


@settings(max_examples=examples(150), deadline=None)
@given(tasks=workloads(max_tasks=80, max_tenants=4), workers=st.integers(1, 4))
def test_the_fast_class_gives_the_same_decisions_as_its_naive_twin(
    tasks: TaskTable, workers: int
) -> None:
    assert (_decisions(FspCalibrated(tasks), tasks, workers)
            == _decisions(FspCalibratedNaive(tasks), tasks, workers))


@settings(max_examples=examples(100), deadline=None)
@given(data=st.data(), tasks=workloads(max_tasks=60), run=requeue_ops)
def test_takes_removals_and_hand_backs_decide_as_the_naive_twin(
    data: st.DataObject, tasks: TaskTable, run: list[object]
) -> None:
    mem = data.draw(memory_needs(tasks))
    f, n = FspCalibrated(tasks), FspCalibratedNaive(tasks)
    d_fast, d_naive = FitDriver(tasks, mem), FitDriver(tasks, mem)
    for op in [*run, *[1] * (2 * len(tasks))]:
        assert d_fast.step(f, op) == d_naive.step(n, op)  # type: ignore[arg-type]
    assert len(f) == len(n) == 0


def test_both_twins_decide_the_same_on_poisoned_durations_and_unlike_fsp_predicted() -> None:
    from desched.policies.fsp_predicted import FspPredicted

    frame = generate("flood", tasks=1500, tenants=12, workers=4, seed=5, predicted_noise=0.5)
    tasks = TaskTable.from_frame(with_quantiles(frame, 5))
    truth = _decisions(FspCalibrated(tasks), tasks, 4)
    assert len(truth) == 1500
    assert _decisions(FspCalibrated(poisoned(tasks, 1)), tasks, 4) == truth
    assert _decisions(FspCalibratedNaive(poisoned(tasks, 2)), tasks, 4) == truth
    assert _decisions(FspPredicted(tasks), tasks, 4) != truth


@pytest.mark.parametrize("cls", [FspCalibrated, FspCalibratedNaive])
def test_the_labels_scale_by_the_recorded_work_once_enough_tasks_completed(
        cls: type[FspCalibrated]) -> None:
    # MIN_DONE tasks predicted 1 s that ran 3 s; then a task predicted 2 s, alone in the
    # virtual system at 100 s: its finish is V + 3 * 2. One short of MIN_DONE: V + 2.
    for done, factor in [(MIN_DONE, 3.0), (MIN_DONE - 1, 1.0)]:
        rows = [T("a", 0, 3, 1) for _ in range(done)] + [T("b", 100, 2, 2)]
        tasks = make_tasks(*rows)
        p = cls(tasks, cls.Params(workers=done))
        for i in range(done):
            p.push(i, 0.0)
        for _ in range(done):
            p.complete(p.pop(0.0), 3.0, 3.0)
        p.push(done, 100.0)
        v = p.v if isinstance(p, FspCalibrated) else p.clock
        assert p.pop(100.0) == done
        assert p.score == v + factor * 2.0


@pytest.mark.parametrize("cls", [FspCalibrated, FspCalibratedNaive])
def test_a_calibration_that_overflows_gives_a_label_of_0_not_nan(
        cls: type[FspCalibrated]) -> None:
    # labels near 1e-310 that ran 1 s: the calibration is infinite, and inf * 0 is NaN,
    # which had hung the fast class's virtual clock (a QA repro)
    rows = [T("a", 0, 1, 1e-310)] * MIN_DONE + [T("a", 1, 1, 0.0), T("a", 2, 1, 1.0)]
    tasks = make_tasks(*rows)
    p = cls(tasks)
    for i in range(MIN_DONE):
        p.push(i, 0.0)
    for _ in range(MIN_DONE):
        p.complete(p.pop(0.0), 1.0, 1.0)
    p.push(MIN_DONE, 1.0)
    p.push(MIN_DONE + 1, 2.0)
    # both labels are 0 (0 * inf and 1 * inf are not finite): each finish is the clock at its
    # push, which stopped at the first tasks' common finish
    assert p.pop(2.0) == MIN_DONE and p.score == 1e-310
    assert p.pop(2.0) == MIN_DONE + 1 and p.score == 1e-310
