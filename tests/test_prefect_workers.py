"""Prefect's background workers do not outlive the test that started them (tests/conftest.py,
``_prefect_workers_stopped``): the events worker's websocket pings every 20 s with a payload
from the global ``random``, which Hypothesis, drawing an example in a later test, reports as
a strategy using ``random``."""

from __future__ import annotations

from tests.conftest import stop_prefect_workers


def test_after_a_flow_the_events_worker_is_stopped_and_a_later_flow_starts_its_own(
    prefect_harness: None,
) -> None:
    from prefect import flow
    from prefect.events.worker import EventsWorker

    @flow
    def tiny() -> int:
        return 1

    assert tiny() == 1
    assert EventsWorker._instances  # the flow's events went through a running worker
    stop_prefect_workers()
    assert not EventsWorker._instances
    assert tiny() == 1
    assert EventsWorker._instances
    stop_prefect_workers()
    assert not EventsWorker._instances
