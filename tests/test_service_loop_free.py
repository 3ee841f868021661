"""The event loop never waits on the scheduler's lock or on a database read that one request
needs (a QA pass on PostgreSQL): a cancel of a task that is not live reads the database
outside the lock and off the loop, and while another thread holds the lock (a rebuild after a
failed commit reads the database under it) polls, completions, ``/healthz`` and ``/metrics``
wait in worker threads, so ``/livez`` and every request that needs neither answer at once."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.test_service import auth, task
from tests.test_service_stateful import InProcess, after_first_sweep


def test_a_cancel_whose_database_read_stalls_holds_up_neither_polls_nor_healthz(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It did: the cancel route read the database on the event loop under the scheduler's
    # lock, so a cancel of a made-up id during a 6 s database stall held /livez for 5.5 s.
    svc = InProcess(tmp_path)
    sched, a, w = svc.scheduler, auth(svc.tokens.tenant_a), auth(svc.tokens.worker)
    release, entered = threading.Event(), threading.Event()
    read = sched.store.task_view

    def stalled(*args: Any) -> Any:
        entered.set()
        release.wait(30)
        return read(*args)

    answers: dict[str, httpx.Response] = {}
    valve = threading.Timer(20, release.set)  # were the loop blocked, this would free it
    try:
        after_first_sweep(sched)  # the tokens known from their first requests stay cached
        created = svc.client.post("/v1/tasks", json=[task(), task()], headers=a)
        assert created.status_code == 201
        first = svc.client.post("/v1/poll", json={"worker_id": "w"}, headers=w)
        assert first.status_code == 200
        monkeypatch.setattr(sched.store, "task_view", stalled)
        valve.start()
        canceller = threading.Thread(target=lambda: answers.update(cancel=svc.client.post(
            "/v1/tasks/no-such-task/cancel", headers=a)))
        canceller.start()
        assert entered.wait(10)
        live = svc.client.get("/livez")
        health = svc.client.get("/healthz")
        poll = svc.client.post("/v1/poll", json={"worker_id": "w"}, headers=w)
        answered_during_stall = not release.is_set()
        release.set()
        canceller.join(30)
    finally:
        release.set()
        valve.cancel()
        svc.close()
    assert answered_during_stall, "the cancel's database read held up the event loop"
    assert live.status_code == 200 and health.status_code == 200
    assert poll.status_code == 200, poll.text
    assert answers["cancel"].status_code == 404, answers["cancel"].text


def test_requests_that_need_the_lock_wait_for_it_off_the_loop(tmp_path: Path) -> None:
    # They did not: a poll took the lock on the event loop, so while a rebuild held it
    # reading a stalled database (7.5 s) /livez and every other request waited too.
    svc = InProcess(tmp_path)
    sched, a, w = svc.scheduler, auth(svc.tokens.tenant_a), auth(svc.tokens.worker)
    answers: dict[str, httpx.Response] = {}
    try:
        created = svc.client.post("/v1/tasks", json=[task()], headers=a)
        assert created.status_code == 201
        assert sched.lock.acquire(timeout=10)  # as a rebuild holds it
        held_at = time.monotonic()
        try:
            waiting = [threading.Thread(target=lambda k=k, call=call: answers.update(
                {k: call()})) for k, call in (
                    ("poll", lambda: svc.client.post("/v1/poll", json={"worker_id": "w"},
                                                     headers=w)),
                    ("health", lambda: svc.client.get("/healthz")),
                    ("metrics", lambda: svc.client.get("/metrics")))]
            for t in waiting:
                t.start()
            time.sleep(0.5)  # they are waiting for the lock now
            live = svc.client.get("/livez", timeout=10)
            live_s = time.monotonic() - held_at
            assert not answers, "a request that needs the lock was answered while it was held"
        finally:
            sched.lock.release()
        for t in waiting:
            t.join(30)
    finally:
        svc.close()
    assert live.status_code == 200 and live_s < 5.0, live_s
    assert answers["poll"].status_code == 200, answers["poll"].text
    assert answers["health"].status_code == 200 and answers["metrics"].status_code == 200
