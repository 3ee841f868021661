"""The service's housekeeper (``desched.service.app.Housekeeper``) when the database goes
away: a driver error is an outage, one warning when it starts and one when a round gets
through, never an ERROR with a traceback per round (a PostgreSQL restart, or its sessions
terminated, is not an error of the service); any other failure is still logged with its
traceback, and the rounds go on."""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

import pytest

from desched.service.app import Housekeeper


class FlakyScheduler:
    """A scheduler whose sweep raises ``failures[k]`` on round ``k`` while there are any."""

    def __init__(self, failures: list[BaseException]) -> None:
        self.failures = failures
        self.rounds = 0
        self.after = threading.Event()

    def sweep(self) -> None:
        self.rounds += 1
        if self.failures:
            raise self.failures.pop(0)
        if self.rounds >= 8:
            self.after.set()

    def __getattr__(self, name: str) -> Any:  # refresh_*, save_policy_state: nothing to do
        return lambda: None

    class predictions:  # the duration registry: nothing to follow
        @staticmethod
        def refresh(lock: Any) -> bool:
            return False


def _run(failures: list[BaseException], caplog: pytest.LogCaptureFixture) -> list[Any]:
    sched = FlakyScheduler(failures)
    keeper = Housekeeper(sched, 0.001)  # type: ignore[arg-type]
    with caplog.at_level("INFO", logger="desched.service"):
        keeper.start()
        try:
            assert sched.after.wait(10)
        finally:
            keeper.stopped.set()
            keeper.join(5)
    return [r for r in caplog.records if r.name == "desched.service"]


def test_a_lost_database_is_two_warnings_not_a_traceback_per_round(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lost = sqlite3.OperationalError("terminating connection due to administrator command\nmore")
    records = _run([lost, lost, lost, lost], caplog)
    assert [r.levelname for r in records] == ["WARNING", "WARNING"], records
    assert not any(r.exc_info for r in records)
    first, back = (r.getMessage() for r in records)
    assert first == ("the housekeeper's database session is lost, retrying every 0.00 s: "
                     "terminating connection due to administrator command")
    assert back.startswith("the housekeeper's database session is back after ")


def test_any_other_failure_is_logged_with_its_traceback_and_the_rounds_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    records = _run([RuntimeError("a bug")], caplog)
    assert [(r.levelname, r.getMessage()) for r in records] == [("ERROR", "housekeeping failed")]
    assert records[0].exc_info is not None
