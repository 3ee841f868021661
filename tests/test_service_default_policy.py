"""The service's default policy: the recommended one with a duration model, one that needs no
prediction without, said at start and on /healthz."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from desched.cli.models import DEFAULT_REGISTRY
from desched.policies import RECOMMENDED, WITHOUT_PREDICTION, default_policy, get_policy
from desched.service.settings import ServiceSettings
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
