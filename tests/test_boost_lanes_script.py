"""The candidate of scripts/boost_lanes.py keeps the registry's contract though it is not
registered: its fast class and naive twin decide alike and save the same state; and with the
true worker count, its running out-of-order tasks never hold more than half the workers."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies.boost_predicted import BoostParams
from desched.simulator import simulate
from desched.trace import TaskTable
from scripts.boost_lanes import BoostLanes, BoostLanesNaive
from tests.builders import T, examples, make_tasks, workloads


def _decisions(tasks: TaskTable, naive: bool, workers: int,
               params: BoostParams | None = None) -> list[tuple[float, ...]]:
    policy = (BoostLanesNaive if naive else BoostLanes)(tasks, params)
    d = simulate(tasks, policy, workers, engine="python").decisions
    return list(zip(d.t, d.worker, d.task, d.score, *d.parts))


@settings(max_examples=examples(150), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 4), told=st.booleans())
def test_the_fast_class_gives_the_same_decisions_as_its_naive_twin(
    tasks: TaskTable, workers: int, told: bool
) -> None:
    params = BoostParams(workers=workers) if told else None
    assert _decisions(tasks, False, workers, params) == _decisions(tasks, True, workers, params)


@settings(max_examples=examples(60), deadline=None)
@given(tasks=workloads(max_tasks=30), cut=st.integers(1, 29))
def test_both_save_the_same_state_and_a_restored_copy_saves_it_again(
    tasks: TaskTable, cut: int
) -> None:
    order = sorted(range(len(tasks.task_id)), key=tasks.submit_s.__getitem__)
    fast, naive = BoostLanes(tasks), BoostLanesNaive(tasks)
    for policy in (fast, naive):  # the same arrivals and pops, half of them completed
        for i in order:
            policy.push(i, tasks.submit_s[i])
        for k in range(min(cut, len(order))):
            now = tasks.submit_s[order[-1]]
            j = policy.pop(now)
            if k % 2:
                policy.complete(j, now + 1.0, tasks.duration_s[j])
    state = fast.state()
    assert state == naive.state()
    assert state is not None
    again = BoostLanes(tasks)
    for i in order:
        if i in fast.keys:
            again.push(i, tasks.submit_s[i])
    again.restore(state)
    assert again.state() == state


class _Watched(BoostLanes):
    """``BoostLanes`` that records the most running out-of-order tasks after a dispatch."""

    most = 0

    def take(self, i: int, now: float) -> None:
        super().take(i, now)
        self.most = max(self.most, len(self.overtakers))


@settings(max_examples=examples(100), deadline=None)
@given(tasks=workloads(), workers=st.integers(1, 6))
def test_told_the_worker_count_overtakers_never_hold_more_than_half_the_workers(
    tasks: TaskTable, workers: int
) -> None:
    policy = _Watched(tasks, BoostParams(workers=workers))
    simulate(tasks, policy, workers, engine="python")
    assert policy.most <= -(-workers // 2)


def test_a_task_taken_past_an_older_one_is_an_overtaker_and_opens_the_lane_until_it_ends(
) -> None:
    tasks = make_tasks(*(T("a", float(k), 1.0, predicted_s=1.0) for k in range(4)))
    lanes = BoostLanes(tasks, BoostParams(workers=2))
    for i in range(4):
        lanes.push(i, 3.0)
    lanes.take(2, 3.0)  # task 0 is older: 2 overtakes, and holds ceil(2 / 2) = 1 worker
    assert lanes.overtakers == {2} and lanes.lane_open()
    assert lanes.pop(3.0) == 0  # the oldest; not an overtaker
    assert lanes.overtakers == {2}
    lanes.complete(2, 4.0, 1.0)
    assert lanes.overtakers == set() and not lanes.lane_open()
