"""The constrained clairvoyant frontier (desched.bench.frontier) on small hand-made traces."""

from __future__ import annotations

import polars as pl
import pytest

from desched.bench import frontier as fr
from desched.bench import judge as jd
from desched.bench.judge_cases import Case


def one_worker_case(rows: list[tuple[str, str, float, float]], predicted: list[float] | None = None,
                    ) -> Case:
    """A log case on one worker from ``(task_id, tenant, submit_s, duration_s)`` rows."""
    frame = pl.DataFrame(
        [(i, t, "x", s, d) for i, t, s, d in sorted(rows, key=lambda r: r[2])],
        schema=["task_id", "tenant", "task_type", "submit_s", "duration_s"], orient="row")
    pred = pl.Series("predicted_s", predicted) if predicted else frame["duration_s"] * 0 + 50.0
    frame = frame.with_columns(pred.alias("predicted_s"), pred.alias("predicted_p50_s"),
                               pred.alias("predicted_p90_s"))
    return Case(name="hand", kind="log", source="test", frame=frame, workers=1,
                mean_train_duration_s=30.0)


def starving_case() -> Case:
    """Ten 100 s tasks of tenant ``long`` at 0-9 s, then 200 tasks of 10 s of tenant
    ``short`` every 10.5 s: shortest-first starves ``long`` behind an endless stream."""
    rows = [(f"L{k}", "long", float(k), 100.0) for k in range(10)]
    rows += [(f"S{k}", "short", 5.0 + 10.5 * k, 10.0) for k in range(200)]
    return one_worker_case(rows)


def test_the_clairvoyant_twin_feeds_the_true_durations_as_predictions() -> None:
    case = starving_case()
    twin = fr.clairvoyant_case(case)
    assert twin.name == "clairvoyant:hand" and twin.model is None  # no model: true durations
    for column in ("predicted_s", "predicted_p50_s", "predicted_p90_s"):
        assert twin.frame[column].to_list() == case.frame["duration_s"].to_list()
    assert case.frame["predicted_s"].to_list() == [50.0] * 210  # the case keeps its own
    assert fr.clairvoyant_case(case) is twin
    # shortest predicted first fed the truth is the clairvoyant oracle
    sjf = jd.evaluate(twin, "sjf-predicted")
    assert sjf.mean_response_s == pytest.approx(jd.evaluate(case, jd.ORACLE).mean_response_s)


def test_the_frontier_is_zero_when_nothing_keeps_the_promises_with_a_positive_gain() -> None:
    case = starving_case()
    f = fr.frontier_of(case, specs=["sjf-predicted"])
    (point,) = f.points
    assert point.spec == "clairvoyant:sjf-predicted" and point.gain == pytest.approx(1.0)
    assert not point.kept and point.p99_ratio > 1.05 and point.worst_tenant > 2.0
    assert f.gain == 0.0 and f.best is None
    assert fr.frontier_share(0.4, f.gain) is None


def test_the_frontier_is_the_largest_gain_of_a_point_keeping_the_promises() -> None:
    f = fr.frontier_of(starving_case())
    assert all(p.spec.startswith(fr.CLAIRVOYANT_PREFIX) and p.clairvoyant for p in f.points)
    kept = [p for p in f.points if p.kept and p.gain is not None]
    assert f.gain == pytest.approx(max(p.gain for p in kept))  # type: ignore[type-var]
    best = next(p for p in f.points if p.spec == f.best)
    assert best.kept and best.p99_ratio <= 1.05 and best.worst_tenant <= 2.0
    assert best.delta_jain >= -0.02
    # the oracle's gain breaks the promises here: the frontier is far below it
    assert 0.0 < f.gain < 0.5
    assert any(not p.kept and (p.gain or 0) > f.gain for p in f.points)


def test_the_family_runs_from_nearly_first_come_to_shortest_first() -> None:
    specs = fr.family()
    assert "sjf-predicted" in specs
    guarded = [s for s in specs if s.startswith("guarded-sjf?")]
    assert guarded[0] == "guarded-sjf?beta=1.0&a=0.0" and guarded[-1].endswith("a=5000.0")
    assert fr.family({"sjf-predicted": ({},)}).count("sjf-predicted") == 1


def outcome(mean: float, p99: float, bsld: dict[str, float]) -> jd.Outcome:
    from desched.metrics import jain

    return jd.Outcome(policy="p", params={}, mean_response_s=mean, p99_response_s=p99,
                      jain_bsld=jain(list(bsld.values())), jain_slowdown=0.0,
                      max_service_lag_s=0.0, tenant_bsld=bsld,
                      tenant_tasks=dict.fromkeys(bsld, 10))


def test_the_frontier_of_hand_made_outcomes_skips_points_that_break_a_promise() -> None:
    today = outcome(100.0, 200.0, {"a": 2.0, "b": 2.0})
    oracle = outcome(50.0, 300.0, {"a": 1.0, "b": 1.0})
    points = [
        ("clairvoyant:tail", outcome(60.0, 215.0, {"a": 1.0, "b": 1.0})),  # p99 1.075x
        ("clairvoyant:unfair", outcome(65.0, 200.0, {"a": 1.0, "b": 4.5})),  # b 2.25x
        ("clairvoyant:safe", outcome(80.0, 209.0, {"a": 1.5, "b": 1.6})),  # gain 0.4
        ("clairvoyant:safer", outcome(90.0, 190.0, {"a": 1.8, "b": 1.8})),  # gain 0.2
    ]
    f = fr.frontier_from("hand", today, oracle, points, jd.Thresholds())
    assert [p.kept for p in f.points] == [False, False, True, True]
    assert f.gain == pytest.approx(0.4) and f.best == "clairvoyant:safe"
    assert fr.frontier_share(0.3, f.gain) == pytest.approx(0.75)
    # when the oracle does not beat today, no frontier is defined
    same = fr.frontier_from("hand", today, today, points, jd.Thresholds())
    assert same.gain is None and same.best is None


def test_every_declared_frontier_grid_holds_valid_parameters() -> None:
    from desched.bench.roles import predictive_policies
    from desched.policies import get_policy, parse_params

    declared = {n: get_policy(n).Params.frontier_grid for n in predictive_policies()}
    assert any(declared.values())
    for name, points in declared.items():
        for point in points:
            parse_params(name, {k: str(v) for k, v in point.items()})


def test_the_deployable_frontier_runs_the_same_family_on_the_predictions() -> None:
    case = starving_case()  # every prediction 50 s: no policy can tell the tasks apart
    f = fr.frontier_of(case, specs=["sjf-predicted"], clairvoyant=False)
    (point,) = f.points
    assert point.spec == "sjf-predicted" and not point.clairvoyant
    sjf_blind = jd.evaluate(case, "sjf-predicted")
    assert point.gain == pytest.approx(
        (f.today_mean_response_s - sjf_blind.mean_response_s)
        / (f.today_mean_response_s - f.oracle_mean_response_s))
    assert point.gain != pytest.approx(1.0)  # the clairvoyant twin's sjf is the oracle
