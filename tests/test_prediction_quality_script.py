"""scripts/prediction_quality.py: the blend is the model's predictions at alpha 0, the judge's
clairvoyant twin at alpha 1, and in between shrinks each prediction's log-ratio to the truth
by exactly 1 - alpha."""

from __future__ import annotations

import math

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from desched.bench.frontier import clairvoyant_frame
from scripts.prediction_quality import blend

positive = st.floats(0.5, 1e6, allow_nan=False, allow_infinity=False)


@st.composite
def frames(draw: st.DrawFn) -> pl.DataFrame:
    n = draw(st.integers(1, 20))
    cols = {c: [draw(positive) for _ in range(n)]
            for c in ("duration_s", "predicted_s", "predicted_p50_s", "predicted_p90_s")}
    return pl.DataFrame(cols)


@settings(max_examples=100, deadline=None)
@given(frames(), st.floats(0.0, 1.0))
def test_the_blend_shrinks_each_log_ratio_to_the_truth_by_one_minus_alpha(
    frame: pl.DataFrame, alpha: float,
) -> None:
    out = blend(frame, alpha)
    y = frame["duration_s"].to_list()
    for c in ("predicted_s", "predicted_p50_s", "predicted_p90_s"):
        for before, after, truth in zip(frame[c].to_list(), out[c].to_list(), y, strict=True):
            assert math.isclose(math.log(after / truth), (1 - alpha) * math.log(before / truth),
                                rel_tol=1e-9, abs_tol=1e-9)
    assert out["duration_s"].to_list() == y


@given(frames())
def test_alpha_zero_is_the_model_and_alpha_one_the_clairvoyant_twin(frame: pl.DataFrame) -> None:
    assert_frame_equal(blend(frame, 0.0), frame)
    assert_frame_equal(blend(frame, 1.0), clairvoyant_frame(frame))


def test_the_single_point_is_the_one_that_meets_the_share_on_the_most_logs() -> None:
    from scripts.prediction_quality import best_single

    per_spec: dict[str, list[float | None]] = {
        "a": [0.9, 0.85, None, 0.95],   # 3 logs at >= 0.8 (a promise broken on one), 0.85
        "b": [0.81, 0.82, 0.79, 0.9],   # 3 logs at >= 0.8, smallest 0.79: the tie goes to a
        "c": [1.0, None, None, None],
        "d": [0.0, -0.1, 0.0, 0.0],     # keeps the promises with no gain
    }
    assert best_single(per_spec) == ("a", 3, 0.85)
    assert best_single({**per_spec, "e": [0.8, 0.8, 0.8, 0.8]}) == ("e", 4, 0.8)
    assert best_single({"d": [0.0, -0.1]}) == ("d", 0, None)
    assert best_single({}) is None
