"""scripts/similar_job_history.py: its "same user, same request" history equals a brute-force
scan of the jobs that ended strictly before each submit, and the held-back logs are refused."""

from __future__ import annotations

import math
import subprocess
import sys

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from scripts.similar_job_history import SAME_REQUEST, WINDOW, size_features, with_same_request


def brute_force(rows: list[dict[str, object]]) -> list[tuple[float, float, float]]:
    """Per row: (last, mean of the last WINDOW, count) over the same tenant's jobs with the
    same request that ended strictly before its submit, in end-time order (ties: row order)."""
    out = []
    for row in rows:
        key = (row["tenant"], row["req_time_s"], row["req_procs"])
        done = sorted(
            (float(r["submit_s"]) + float(r["duration_s"]), j, float(r["duration_s"]))
            for j, r in enumerate(rows)
            if (r["tenant"], r["req_time_s"], r["req_procs"]) == key
            and float(r["submit_s"]) + float(r["duration_s"]) < float(row["submit_s"])
        )
        if not done:
            out.append((math.nan, math.nan, math.nan))
            continue
        last = [d for _, _, d in done][-WINDOW:]
        out.append((done[-1][2], sum(last) / len(last), float(len(done))))
    return out


@st.composite
def jobs(draw: st.DrawFn) -> list[dict[str, object]]:
    n = draw(st.integers(1, 25))
    return [
        {
            "tenant": draw(st.sampled_from(["u1", "u2"])),
            # few distinct values, so that submits, ends and requests tie often
            "submit_s": float(draw(st.integers(0, 12))),
            "duration_s": float(draw(st.integers(1, 6))),
            "req_time_s": draw(st.sampled_from([None, 100.0, 200.0])),
            "req_procs": draw(st.sampled_from([None, 1, 4])),
        }
        for _ in range(n)
    ]


@settings(max_examples=150, deadline=None)
@given(jobs())
def test_the_same_request_history_is_the_brute_force_scan(rows: list[dict[str, object]]) -> None:
    frame = pl.DataFrame(rows, schema={"tenant": pl.String, "submit_s": pl.Float64,
                                       "duration_s": pl.Float64, "req_time_s": pl.Float64,
                                       "req_procs": pl.Int64})
    got = with_same_request(frame).select(SAME_REQUEST).rows()
    for (last, mean, count), want in zip(got, brute_force(rows), strict=True):
        for value, expected in zip((last, mean, count), want, strict=True):
            assert (math.isnan(value) and math.isnan(expected)) or math.isclose(
                value, expected, rel_tol=1e-12)


def test_the_extra_size_features_last_only_as_long_as_the_block() -> None:
    from desched.models import features

    before = features.SIZE_CANDIDATES
    with size_features(SAME_REQUEST):
        assert features.SIZE_CANDIDATES == (*before, *SAME_REQUEST)
    assert features.SIZE_CANDIDATES == before


def test_a_held_back_log_is_refused_before_anything_runs() -> None:
    res = subprocess.run([sys.executable, "-m", "scripts.similar_job_history", "--logs",
                          "LLNL-Atlas-2006-2.1-cln"], capture_output=True, text=True,
                         check=False, timeout=120)
    assert res.returncode != 0
    assert "LLNL-Atlas-2006-2.1-cln: held back" in res.stderr
