"""The service's default policy: the recommended one with a duration model, one that needs no
prediction without, said at start and on /healthz."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest

from desched.cli.models import DEFAULT_REGISTRY
from desched.policies import (
    RECOMMENDED,
    WITHOUT_PREDICTION,
    default_policy,
    get_policy,
    make_policy,
)
from desched.service.records import NewTask
from desched.service.settings import ServiceSettings
from desched.service.store import POLICY_STATE_KEY, Store
from desched.service.writer import wait
from tests.test_service_scheduler import FakeTime, FixedPredictor, make_scheduler


def test_with_a_duration_model_and_no_recorded_policy_the_service_runs_the_recommended_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="desched.service"):
        sched = make_scheduler(tmp_path / "state.db", FakeTime(), predictor=FixedPredictor())
    try:
        health = sched.health()
        assert health.policy == RECOMMENDED == health.default_policy
        assert "a duration model is loaded" in health.default_policy_reason
        assert f"running {RECOMMENDED}" in caplog.text
    finally:
        sched.stop()


def test_without_a_duration_model_the_service_falls_back_to_a_policy_that_needs_none_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="desched.service"):
        sched = make_scheduler(tmp_path / "state.db", FakeTime())
    try:
        health = sched.health()
        expected, _ = default_policy(False)
        assert health.policy == expected == health.default_policy
        assert "predicted_s" not in get_policy(health.policy).reads
        assert health.predicted_labels == []
        if "predicted_s" in get_policy(RECOMMENDED).reads:
            assert health.policy == WITHOUT_PREDICTION
            assert "no duration model is loaded" in health.default_policy_reason
            assert "no duration model is loaded" in caplog.text
    finally:
        sched.stop()


def test_a_recorded_policy_wins_over_the_default(tmp_path: Path) -> None:
    sched = make_scheduler(tmp_path / "state.db", FakeTime(), predictor=FixedPredictor(),
                           policy="fifo")
    try:
        health = sched.health()
        assert health.policy == "fifo"
        assert health.default_policy == RECOMMENDED
    finally:
        sched.stop()


def test_the_service_looks_for_the_duration_model_where_desched_train_puts_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DESCHED_PREDICTOR_REGISTRY", raising=False)
    assert ServiceSettings().predictor_registry == Path(DEFAULT_REGISTRY)


class NonPositivePredictor(FixedPredictor):
    """A model that cannot label some tasks: a non-positive prediction (stored as unknown)."""

    def predict_labels(self, task: dict[str, Any]) -> tuple[float, float, float]:
        if task.get("pages") == 13:
            return -1.0, math.nan, math.nan
        return super().predict_labels(task)


def queued_without_a_model(db: Path, now: FakeTime, pages: tuple[int, ...]) -> list[str]:
    """Tasks of ``pages`` pages submitted to a service without a duration model, which then
    stops: their ids, stored without a prediction."""
    first = make_scheduler(db, now)
    try:
        ids, _, pending = first.submit("a", [NewTask("extract", pages=p) for p in pages])
        wait(pending)
    finally:
        first.stop()
    return ids


def test_tasks_queued_without_a_model_are_predicted_when_a_restart_loads_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The README's walk-through: the service starts without a model (tasks stored with no
    prediction), a model is trained, the service restarts with it: it runs the recommended
    policy over the queued tasks, each predicted from its stored features (it had refused to
    start: the default policy could not be installed over unlabelled tasks)."""
    db, now = tmp_path / "state.db", FakeTime()
    ids = queued_without_a_model(db, now, (1, 4, 2))
    with caplog.at_level(logging.WARNING, logger="desched.service"):
        second = make_scheduler(db, now, predictor=FixedPredictor())
    try:
        assert second.health().policy == RECOMMENDED
        assert "predicted 3 live task(s) stored without a prediction" in caplog.text
        assert second.counters.tasks_labelled_late == 3
        assert "desched_tasks_labelled_late_total 3" in second.metrics()
        t = second.tasks
        labels = {t.task_id[i]: t.predicted_s[i] for i in second.queued}
        assert labels == {ids[0]: 2.0, ids[1]: 8.0, ids[2]: 4.0}
        granted = []
        for _ in ids:
            grant, pending = second.poll("w", "slot")
            wait(pending)
            granted.append(grant.task.task_id)
        assert sorted(granted) == sorted(ids)
    finally:
        second.stop()


def test_a_recorded_prediction_policy_set_while_unlabelled_tasks_wait_runs_over_them(
    tmp_path: Path
) -> None:
    """``desched policy set boost-now`` after a model was loaded while tasks submitted
    without one still wait: the switch predicts them and takes effect."""
    db, now = tmp_path / "state.db", FakeTime()
    sched = make_scheduler(db, now)
    try:
        _, _, pending = sched.submit("a", [NewTask("extract", pages=3)])
        wait(pending)
        sched.predictions.duration = FixedPredictor()
        sched.host.model_loaded()
        sched.write_store.set_policy(RECOMMENDED, {})
        assert sched.refresh_policy()
        assert sched.health().policy == RECOMMENDED
        assert [sched.tasks.predicted_s[i] for i in sched.queued] == [6.0]
    finally:
        sched.stop()


def test_a_queued_task_no_model_can_label_is_ranked_as_a_typical_one_after_a_restart(
    tmp_path: Path
) -> None:
    """Where the model cannot label a queued task either, the recommended policy still runs:
    that task is ranked as typical (the median prediction of the live tasks; it had kept the
    service from starting at all)."""
    db, now = tmp_path / "state.db", FakeTime()
    ids = queued_without_a_model(db, now, (13, 2, 5))
    second = make_scheduler(db, now, predictor=NonPositivePredictor())
    try:
        assert second.health().policy == RECOMMENDED
        t = second.tasks
        assert {t.task_id[i]: t.predicted_s[i] for i in second.queued} == {
            ids[0]: 7.0, ids[1]: 4.0, ids[2]: 10.0}
        assert second.counters.tasks_labelled_typical == 1
        assert second.counters.tasks_labelled_late == 2
    finally:
        second.stop()


def test_tasks_the_running_model_cannot_label_are_ranked_as_typical_and_the_state_saves(
    tmp_path: Path
) -> None:
    """A submit the loaded model cannot label, under the recommended policy: ranked as a
    typical task (a NaN label had entered Boost's window of labels: its γ estimate NaN and
    every later state save, and the service's stop, failing on JSON's lack of NaN); the
    stored record keeps the prediction unknown; a restart takes the saved state back."""
    db, now = tmp_path / "state.db", FakeTime()
    sched = make_scheduler(db, now, predictor=NonPositivePredictor())
    try:
        ids = []
        for _ in range(50):
            now.t += 0.5
            got, _, pending = sched.submit("a", [NewTask("extract", pages=p)
                                                 for p in (2, 13, 1, 5, 13, 3)])
            wait(pending)
            ids += got
        t = sched.tasks
        assert all(math.isfinite(t.predicted_s[i]) for i in sched.queued)
        assert sched.counters.tasks_labelled_typical == 100
        for _ in range(200):
            now.t += 1.0
            grant, pending = sched.poll("w", "slot")
            wait(pending)
            wait(sched.complete("w", grant.task.task_id, grant.lease_id, 1.0))
        assert sched.policy.estimator.gamma is not None
        assert math.isfinite(sched.policy.estimator.gamma)
        assert sched.task_view("a", ids[1]).predicted_s is None
    finally:
        sched.stop()
    again = make_scheduler(db, now, predictor=NonPositivePredictor())
    try:
        assert again.counters.policy_state_restores == 1
    finally:
        again.stop()


def _corrupt(state: dict[str, Any], variant: str) -> str:
    """The saved record of ``state``, altered as a hand edit or another version might."""
    est = dict(state["estimator"])
    if variant == "nan label":
        est["labels"] = [*est["labels"][:-1], ["NaN_HERE", 1.0, 2.0]]
        text = json.dumps({**state, "estimator": est}).replace('"NaN_HERE"', "NaN")
        return text
    if variant == "since past the float range":
        return json.dumps({**state, "ranking": {**state["ranking"], "since": 1}}).replace(
            '"since": 1', '"since": 1e999')
    if variant == "negative gamma":
        return json.dumps({**state, "estimator": {**est, "gamma": -1.0}})
    # the earlier form (every queued task's keys), one row unreadable: fails after the
    # estimator was restored
    keys = {tid: ["x", 0.0, None] for tid in state["due_ids"]}
    return json.dumps({"estimator": est, "keys": keys})


@pytest.mark.parametrize("variant", ["nan label", "since past the float range",
                                     "negative gamma", "unreadable key after the estimator"])
def test_a_corrupt_saved_state_is_ignored_whole_and_later_saves_work(
    tmp_path: Path, variant: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A saved state no run of this service writes (NaN or a number past the float range,
    which JSON readers accept; a value out of range; a row that fails half way through) is
    ignored with a warning: the service starts on a fresh policy (not a half-restored one)
    and its next saves succeed. A NaN had been taken back and then failed every save; a
    1e999 had stopped the service from starting."""
    db, now = tmp_path / "state.db", FakeTime()
    first = make_scheduler(db, now, predictor=FixedPredictor())
    try:
        for _ in range(40):
            now.t += 0.5
            wait(first.submit("a", [NewTask("extract", pages=p) for p in (1, 3, 7)])[2])
        for _ in range(30):
            wait(first.poll("w", "slot")[1])
        state = first.policy.state()
        assert state is not None and state["estimator"]["gamma"] is not None
        state["due_ids"] = [first.tasks.task_id[i] for i in sorted(first.queued)]
        spec = first.host.spec.identity()
    finally:
        first.stop()
    record = json.loads(Store(str(db)).get_config(POLICY_STATE_KEY) or "{}")
    assert record["policy"] == spec
    text = _corrupt(state, variant)
    corrupt = ('{"policy": ' + json.dumps(spec) + ', "saved_at": 1.0, "state": ' + text + "}")
    store = Store(str(db))
    store.set_config(POLICY_STATE_KEY, corrupt)
    store.close()
    with caplog.at_level(logging.WARNING, logger="desched.service"):
        second = make_scheduler(db, now, predictor=FixedPredictor())
    try:
        assert "saved policy state not restored" in caplog.text
        assert second.counters.policy_state_restores == 0
        fresh = make_policy(RECOMMENDED, second.tasks)
        for i in sorted(second.queued):
            fresh.push(i, now.t)
        assert second.policy.state() == fresh.state()
        now.t += 10.0
        grant, pending = second.poll("w", "slot")
        wait(pending)
        assert grant is not None
        wait(second.save_policy_state(force=True))
    finally:
        second.stop()
    saved = Store(str(db)).get_config(POLICY_STATE_KEY)
    assert saved is not None and "NaN" not in saved and json.loads(saved)["saved_at"] > 1.0


def test_under_the_default_a_lease_expiring_as_work_arrives_after_an_idle_gap_loses_nothing(
    tmp_path: Path
) -> None:
    """The quiet path under ``boost-now`` with a model: leases held through an idle gap
    expire at the sweep that follows new submits of the same instant; the expired tasks go
    back into the ranking beside the new ones (their labels kept), every acknowledged task
    is completed exactly once, the state saves, and a restart takes it back."""
    db, now = tmp_path / "state.db", FakeTime()
    sched = make_scheduler(db, now, predictor=FixedPredictor())
    try:
        assert sched.health().policy == RECOMMENDED
        owner: dict[str, str] = {}
        for k in range(30):
            now.t += 0.5
            ids, _, _ = sched.submit("ab"[k % 2], [NewTask("extract", pages=1 + k % 7)])
            owner.update(dict.fromkeys(ids, "ab"[k % 2]))
        sched.flush()
        held = []
        for _ in range(10):
            grant, pending = sched.poll("w", "slot")
            wait(pending)
            held.append(grant)
        done: list[str] = []
        for grant in held[:6]:
            wait(sched.complete("w", grant.task.task_id, grant.lease_id, 1.0))
            done.append(grant.task.task_id)
        now.t += 600.0  # an idle gap: nothing polls, nothing completes
        ids, _, pending = sched.submit("a", [NewTask("extract", pages=p) for p in (2, 9)])
        wait(pending)
        owner.update(dict.fromkeys(ids, "a"))
        assert sched.sweep() == 4
        while (grant := sched.poll("w2", "slot")[0]) is not None:
            now.t += 0.25
            wait(sched.complete("w2", grant.task.task_id, grant.lease_id, 1.0))
            done.append(grant.task.task_id)
        assert sorted(done) == sorted(owner)
        assert {g.task.task_id for g in held[6:]} <= set(done[6:])
        sched.flush()
        assert all(sched.task_view(t, i).state == "done" for i, t in owner.items())
        wait(sched.save_policy_state(force=True))
    finally:
        sched.stop()
    again = make_scheduler(db, now, predictor=FixedPredictor())
    try:
        assert again.counters.policy_state_restores == 1
        assert again.health().queued == 0 and again.health().leased == 0
    finally:
        again.stop()

