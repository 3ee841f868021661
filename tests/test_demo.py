"""The research bench end to end: ``desched demo --quick`` and its report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from desched.bench.report.build import gap_closed_pct, pareto_flags
from desched.bench.report.numbers import numbers_in_markdown, unmatched_numbers
from desched.bench.report.records import Report
from desched.bench.roles import predictive_policies, q1_family
from desched.cli import cli


@pytest.fixture(scope="module")
def quick_report(prefect_harness: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("demo")
    res = CliRunner().invoke(cli, ["demo", "--quick", "--out", str(out), "--run", "t"],
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    folder = out / "t"  # --out is used as given: OUT/RUN, working files in OUT/RUN/work
    return {"folder": folder, "output": res.output,
            "json": json.loads((folder / "report.json").read_text()),
            "md": (folder / "report.md").read_text()}


def test_the_quick_demo_shows_one_line_per_step_and_writes_the_report_and_its_plots(
    quick_report: dict[str, Any],
) -> None:
    for step in ("1/7", "4/7", "7/7 report done"):
        assert step in quick_report["output"]
    folder: Path = quick_report["folder"]
    report = quick_report["json"]
    for name in [*report["plots"]["q1"].values(), report["plots"]["q2"], report["plots"]["q3"],
                 report["plots"]["pareto"]]:
        assert (folder / name).stat().st_size > 1000, name
        assert f"]({name})" in quick_report["md"]


def test_q1_has_the_gap_the_counter_closes_and_its_cost_for_every_workload(
    quick_report: dict[str, Any],
) -> None:
    q1 = quick_report["json"]["q1"]["workloads"]
    assert set(q1) == {"flood", "steady", "lanl", "atlas"}
    for w, block in q1.items():
        assert set(block["policies"]) == set(q1_family("ifs-memoryless"))
        for row in block["policies"].values():
            for key in ("mean_response_s", "max_service_lag_s", "window_jain_min",
                        "jain_slowdown", "small_tenants_mean_wait_s"):
                assert isinstance(row[key], float), (w, key)
        assert set(block["gap_closed_pct"]) >= {"max_service_lag", "small_tenants_mean_wait"}
        assert isinstance(block["cost_pct"]["mean_response_vs_memoryless"], float)
    # flood: the counter's service term closes the whole lag gap (README, Q1)
    assert q1["flood"]["gap_closed_pct"]["max_service_lag"] == pytest.approx(100.0)
    assert quick_report["json"]["q1"]["over_seeds"]["flood"]["policies"]["vtc"]


def test_q2_compares_learned_and_default_weights_on_held_out_traces_for_both_learners(
    quick_report: dict[str, Any],
) -> None:
    learners = quick_report["json"]["q2"]["learners"]
    assert set(learners) == {"optuna", "rl"}
    for le in learners.values():
        assert le["steps"] == len(le["curve"]) >= 1
        assert set(le["weights"]) == {"w_backlog", "w_wait"}
        assert {"flood", "lanl", "atlas"} <= set(le["heldout"])
        overall = le["overall"]["learned"]
        assert isinstance(overall["J"]["mean"], float)
        assert overall["verdict"] in {"beats", "tie", "worse"}
    assert "rl-adaptive" in learners["rl"]["overall"]


def test_q3_scores_the_predictor_against_its_baselines_and_every_policy_on_unseen_tasks(
    quick_report: dict[str, Any],
) -> None:
    q3 = quick_report["json"]["q3"]["workloads"]
    assert q3
    for block in q3.values():
        p = block["predictor"]
        assert set(p["heldout"]) == {"model", "global_median", "tenant_type_mean",
                                     "tenant_last2_mean"}
        assert p["train_rows"] > 0 and p["heldout_rows"] > 0
        assert 0 < p["latency_us"]["p50"] <= p["latency_us"]["p99"]
        for policy in ("ifs-memoryless", "sjf-oracle", *predictive_policies()):
            row = block["policies"][policy]
            assert row["mean_response_s"] > 0 and row["p99_response_s"] > 0
            assert 0 < row["jain_slowdown"] <= 1
        assert set(block["tenants"]) == set(predictive_policies())
        # the clairvoyant bound: no runnable SJF variant has a lower mean response
        oracle = block["policies"]["sjf-oracle"]["mean_response_s"]
        assert block["policies"]["sjf-predicted"]["mean_response_s"] >= oracle * 0.999


def test_the_pareto_points_cover_every_policy_and_each_workload_has_a_front(
    quick_report: dict[str, Any],
) -> None:
    report = quick_report["json"]
    points = report["pareto"]["points"]
    for w, block in report["q3"]["workloads"].items():
        mine = [p for p in points if p["workload"] == w]
        assert {p["policy"] for p in mine} == set(block["policies"])
        assert any(p["pareto_jain"] for p in mine)
        assert not any(p["pareto_jain"] for p in mine if p["clairvoyant"])


def test_every_number_the_report_states_is_in_report_json(quick_report: dict[str, Any]) -> None:
    md = quick_report["md"]
    assert len(numbers_in_markdown(md)) > 200
    assert unmatched_numbers(md, quick_report["json"]) == []


def test_report_json_reads_back_as_the_typed_report_it_was_written_from(
    quick_report: dict[str, Any],
) -> None:
    report = Report.from_json(quick_report["json"])
    assert json.dumps(report.to_json()) == json.dumps(quick_report["json"])


def test_the_report_says_which_policy_to_deploy_from_a_judge_run_on_its_own_logs(
    quick_report: dict[str, Any],
) -> None:
    deploy = quick_report["json"]["deploy"]
    assert len(deploy["logs"]) == 2 and set(deploy["scenarios"]) == {"flood", "steady"}
    assert deploy["policies"] == predictive_policies()
    assert deploy["recommendation"] in deploy["policies"]
    judged = {(r["workload"], r["policy"]) for r in deploy["rows"]}
    assert judged == {(w, p) for w in deploy["logs"]
                      for p in [deploy["oracle"], *deploy["policies"]]}
    assert "## Which policy to deploy" in quick_report["md"]
    assert f"**Recommendation: `{deploy['recommendation']}`**" in quick_report["md"]
    plot = quick_report["json"]["plots"]["deploy"]
    assert (quick_report["folder"] / plot).stat().st_size > 5000


def test_a_number_absent_from_the_json_is_caught() -> None:
    report = {"a": 6285.7, "b": 0.8724, "c": [12.0]}
    assert unmatched_numbers("wait 6,286 s, Jain 0.872, p99 of t00 is 12", report) == []
    assert unmatched_numbers("wait 6,290 s and 0.87 and `1234` in code", report) == ["6,290"]


def test_the_gap_closed_is_the_share_of_the_way_from_memoryless_to_vtc() -> None:
    assert gap_closed_pct(100.0, 100.0, 0.0) == 0.0
    assert gap_closed_pct(100.0, 50.0, 0.0) == 50.0
    assert gap_closed_pct(100.0, 0.0, 0.0) == 100.0
    assert gap_closed_pct(100.0, 120.0, 0.0) == pytest.approx(-20.0)
    assert gap_closed_pct(100.0, 50.0, 100.0) is None  # vtc no better: no gap to close
    assert gap_closed_pct(0.0, 0.0, 0.0) is None


def test_a_point_is_on_the_front_unless_another_is_no_worse_on_both_and_better_on_one() -> None:
    assert pareto_flags([(1.0, 1.0), (2.0, 0.5), (2.0, 1.0), (0.5, 3.0)]) == [
        True, True, False, True]


def test_a_number_stated_with_the_wrong_sign_is_caught() -> None:
    report = {"d_bsld_pct": -2.0, "d_jain": 0.005}
    assert unmatched_numbers("Δ bsld -2.0 %, Δ Jain +0.005", report) == []
    assert unmatched_numbers("Δ bsld 2.0 %, Δ Jain -0.005", report) == ["2.0", "-0.005"]


def test_demo_settings_take_the_mode_preset_and_the_environment_for_the_rest(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    from desched.bench.demo import DemoSettings

    monkeypatch.setenv("DESCHED_DEMO_JOBS", "3")
    monkeypatch.setenv("DESCHED_DEMO_SWF_DIR", str(tmp_path))
    monkeypatch.setenv("DESCHED_DEMO_TUNE_TRIALS", "99")  # the quick preset fixes it
    quick = DemoSettings.of("quick")
    assert (quick.jobs, quick.swf_dir, quick.tune_trials) == (3, tmp_path, 6)
    assert DemoSettings.of("full").tune_trials == 99
    assert quick.roles().baseline == "ifs-memoryless"


def test_tenant_mean_durations_sum_each_tenants_tasks_in_trace_order() -> None:
    """The same bits as a plain loop in trace order, every run (polars' parallel group-by
    had made the report's tenant figures differ in their last digit between two runs)."""
    import numpy as np
    import polars as pl

    from desched.bench.demo import tenant_mean_durations

    rng = np.random.default_rng(3)
    tenants = rng.choice(["a", "b", "c", "d"], 60_000).tolist()
    durations = (rng.lognormal(3.0, 2.0, 60_000) * 1.000000001).tolist()
    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for t, d in zip(tenants, durations):
        totals[t] = totals.get(t, 0.0) + d
        counts[t] = counts.get(t, 0) + 1
    got = tenant_mean_durations(pl.DataFrame({"tenant": tenants, "duration_s": durations}))
    assert got == {t: totals[t] / counts[t] for t in totals}
