"""``boost-lanes`` beyond the registry's contract suite: its fast class and naive twin decide
alike with the worker count told or estimated and save the same state; with the true worker
count its running out-of-order tasks never hold more than half the workers; the lane opens
on a hand-worked case; the lazy pop sequence is the pops of a copy; the live service keeps
its state across a restart."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from desched.policies.base import Policy
from desched.policies.boost_lanes import BoostLanes, BoostLanesNaive
from desched.policies.boost_predicted import BoostParams
from desched.service.records import NewTask
from desched.service.writer import wait
from desched.simulator import simulate
from desched.trace import TaskTable
from tests.builders import T, assert_state_round_trips, examples, make_tasks, workloads
from tests.test_service_scheduler import (
    FakeTime,
    FixedPredictor,
    assert_a_restart_resumes,
    make_scheduler,
    poll,
)


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
    assert_state_round_trips(BoostLanes, BoostLanesNaive, tasks, cut)


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


def test_an_overtaker_whose_lease_expires_while_work_arrives_closes_the_lane_as_in_the_twin(
) -> None:
    """The quiet path: no completion ever comes for task 2; its lease expires (the service
    pushes it again) just as task 4 arrives. It runs no more, so it holds no worker and the
    lane closes; fast and naive then decide alike and save the same state."""
    tasks = make_tasks(*(T("a", float(k), 1.0, predicted_s=1.0) for k in range(5)))
    fast = BoostLanes(tasks, BoostParams(workers=2))
    naive = BoostLanesNaive(tasks, BoostParams(workers=2))
    picks = []
    for policy in (fast, naive):
        for i in range(4):
            policy.push(i, 3.0)
        policy.take(2, 3.0)  # an overtaker: the lane opens
        policy.push(2, 9.0)  # its lease expired at 9.0, with no completion record
        policy.push(4, 9.0)  # and new work arrives at the same instant
        assert policy.state() == {**policy.state(), "overtakers": []}
        picks.append([policy.pop(9.0) for _ in range(5)])
    assert not fast.lane_open()
    assert picks[0] == picks[1] and sorted(picks[0]) == [0, 1, 2, 3, 4]
    assert fast.state() == naive.state()


def test_the_lazy_pop_sequence_is_the_sequence_of_pops_of_a_copy() -> None:
    tasks = make_tasks(*(T("ab"[k % 2], float(k // 3), 1.0, predicted_s=1.0 + (7 * k) % 5)
                         for k in range(24)))
    lanes = BoostLanes(tasks, BoostParams(window=2))
    for i in range(12):
        lanes.push(i, 3.0)
    for _ in range(4):
        lanes.pop(3.0)
    for i in range(12, 24):
        lanes.push(i, 7.0)
    walked = list(lanes.pop_sequence(7.0))
    copied = list(Policy.pop_sequence(lanes, 7.0))
    assert walked == copied and len(walked) == 20 and len(lanes) == 20


def test_the_service_keeps_the_running_overtakers_across_a_restart(tmp_path: Path) -> None:
    """A restart takes back the running out-of-order tasks with the estimator, and the next
    poll is the one the uninterrupted policy would make."""
    now = FakeTime()
    db = tmp_path / "state.db"
    first = make_scheduler(db, now, predictor=FixedPredictor(), policy="boost-lanes")
    for phase, done in ((4, True), (12, False)):  # γ is estimated in the first phase
        for k in range(phase):
            now.t += 1.0
            _, _, pending = first.submit("ab"[k % 2],
                                         [NewTask("extract", pages=1 + (5 * k) % 7)])
            wait(pending)
        for _ in range(3):
            grant = poll(first, "w")
            if done:
                wait(first.complete("w", grant.task.task_id, grant.lease_id, 1.0))
    policy = first.policy
    assert isinstance(policy, BoostLanes) and policy.overtakers
    assert_a_restart_resumes(first, db, now, "boost-lanes")
