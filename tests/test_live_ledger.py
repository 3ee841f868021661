"""The live demo's submit ledger: it counts every answer, retries a 503 or 429 with the same
Idempotency-Key, and finds acknowledged tasks that the database does not show done."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx

from desched.cli.live_ledger import NO_ANSWER, SubmitLedger


def scripted(answers: list[httpx.Response | Exception], seen: list[httpx.Request]) -> httpx.Client:
    """A client whose requests get ``answers`` in order (an exception is raised instead)."""

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.Client(base_url="http://service", transport=httpx.MockTransport(handle))


def test_a_503_or_no_answer_is_retried_with_the_same_key_and_every_answer_is_counted() -> None:
    seen: list[httpx.Request] = []
    answers: list[httpx.Response | Exception] = [
        httpx.Response(503, headers={"Retry-After": "0"}, json={"detail": "x", "retry": True}),
        httpx.ConnectError("refused"),
        httpx.Response(201, json={"task_ids": ["t1", "t2"], "created": True}),
    ]
    ledger = SubmitLedger(max_wait_s=0.0)
    with scripted(answers, seen) as http:
        assert ledger.submit(http, "acme", "tok", [{"a": 1}, {"a": 2}], "acme-0") == 201
    assert [r.headers["Idempotency-Key"] for r in seen] == ["acme-0"] * 3
    assert ledger.codes["acme"] == {503: 1, NO_ANSWER: 1, 201: 1}
    assert ledger.acknowledged["acme"] == {"t1", "t2"}


def test_a_refusal_that_no_retry_fixes_is_counted_once_and_acknowledges_nothing() -> None:
    seen: list[httpx.Request] = []
    answers: list[httpx.Response | Exception] = [
        httpx.Response(413, json={"detail": "a submit of 5 tasks can never pass"})
    ]
    ledger = SubmitLedger(max_wait_s=0.0)
    with scripted(answers, seen) as http:
        assert ledger.submit(http, "acme", "tok", [{}] * 5, "acme-1") == 413
    assert len(seen) == 1 and ledger.codes["acme"] == {413: 1}
    assert "acme" not in ledger.acknowledged


def test_an_acknowledged_task_not_done_in_the_database_is_lost(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE tasks (task_id TEXT, tenant TEXT, state TEXT)")
        con.executemany(
            "INSERT INTO tasks VALUES (?, ?, ?)",
            [("t1", "acme", "done"), ("t2", "acme", "queued"), ("t4", "globex", "done")],
        )
    con.close()
    ledger = SubmitLedger()
    ledger.acknowledged = {"acme": {"t1", "t2", "t3"}, "globex": {"t4"}}
    acme, globex, initech = ledger.outcomes(db, ["acme", "globex", "initech"])
    assert (acme.acknowledged, acme.done, acme.lost) == (3, 1, ("t2", "t3"))  # t3 never stored
    assert (globex.acknowledged, globex.done, globex.lost) == (1, 1, ())
    assert (initech.acknowledged, initech.done, initech.lost) == (0, 0, ())
