"""The report people read: one page of answers first (Q1, Q2, Q3, which policy to deploy, each
one sentence and one figure), the evidence after; ties said as ties; intervals only over three
values or more; figures on few windows say so; images as files beside report.md and
report.html."""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from desched.bench import demo
from desched.bench.pool import Pool
from desched.bench.report.answers import answers
from desched.bench.report.deploy import standing, tenant_harm_figure
from desched.bench.report.html import image_sources
from desched.bench.report.inputs import HeldoutRuns, Ingestion, Latency, PredictorResult
from desched.bench.report.markdown import _over_windows
from desched.bench.report.numbers import fmt_ci, unmatched_numbers
from desched.bench.report.plots import compact, q3_tenants_figure
from desched.bench.report.records import CI, DeployHarmRow, DeployRow, DeploySection, Report
from desched.bench.report.write import draw_plots, write_report
from desched.bench.verdicts import Thresholds
from desched.bench.weights import read_card
from desched.cli import cli
from desched.trace import write_trace
from desched.workloads import generate

QUESTIONS = ("Q1:", "Q2:", "Q3:", "Which policy to deploy")


def _row(log: str, policy: str, passed: int, ratios: dict[str, float]) -> DeployRow:
    return DeployRow(workload=log, policy=policy, gain=0.5, p99_ratio=1.1, delta_jain=-0.01,
                     worst_tenant=max(ratios.values()), worst_tenant_name="u1", passed=passed,
                     criteria=4, failed=["gain", "p99", "delta_jain", "worst_tenant"][passed:],
                     mean_response_s=10.0, today_mean_response_s=20.0, tenant_ratio=ratios)


def deploy_section(tie: bool, recommendation: str = "guarded-sjf") -> DeploySection:
    """Two candidates on two logs and one scenario; ``tie``: both pass 5 of 10."""
    ratios = {"u1": 2.5, "u2": 1.0, "u3": 0.4}
    rows = [_row("lanl", "guarded-sjf", 2, ratios), _row("atlas", "guarded-sjf", 2, ratios),
            _row("lanl", "hrrn-predicted", 3 if tie else 1, ratios),
            _row("atlas", "hrrn-predicted", 1, ratios),
            _row("lanl", "sjf-oracle", 4, ratios)]
    harm = [DeployHarmRow(workload="flood", policy=p, mean_response_s=1.0,
                          today_mean_response_s=1.0, jain_slowdown=0.9,
                          today_jain_slowdown=0.9, max_service_lag_s=0.0,
                          today_max_service_lag_s=0.0, passed=1, criteria=2,
                          failed=["mean_response"]) for p in ("guarded-sjf", "hrrn-predicted")]
    return DeploySection(
        source="test", today="ifs-memoryless", oracle="sjf-oracle",
        thresholds={k: float(v) for k, v in Thresholds().model_dump().items()},
        load=0.9, logs=["lanl", "atlas"], scenarios=["flood"],
        policies=["guarded-sjf", "hrrn-predicted"], rows=rows, harm=harm,
        recommendation=recommendation, recommendation_passed=5, recommendation_criteria=10,
        reason="test", deployed_default="guarded-sjf", all_pass=[])


def test_a_recommendation_that_shares_the_best_count_is_reported_as_a_tie() -> None:
    assert standing(deploy_section(tie=True)) == \
        "tied for the most with `hrrn-predicted` (also 5 of 10)"
    assert standing(deploy_section(tie=False)) == "the most of any candidate"


def test_a_recommendation_that_passes_fewer_criteria_says_which_pass_more() -> None:
    text = standing(deploy_section(tie=False, recommendation="hrrn-predicted"))
    assert text.startswith("fewer than `guarded-sjf` (5 of 10)")


def test_an_interval_is_shown_over_three_values_or_more_and_never_over_fewer() -> None:
    ci = CI(mean=1.05, lo=0.9, hi=1.2, half=0.15, n=2)
    assert fmt_ci(ci, 3, n=1) == "1.050"
    assert fmt_ci(ci, 3, n=2) == "1.050"
    assert fmt_ci(ci, 3, n=3) == "1.050 ± 0.150"


def test_a_window_figure_on_few_windows_says_how_many() -> None:
    assert _over_windows("1,252", 1) == "1,252 (1 window)"
    assert _over_windows("1,252", 3) == "1,252 (3 windows)"
    assert _over_windows("0", 0) == "- (no window qualified)"
    assert _over_windows("1,252", 12) == "1,252"


def test_tick_labels_stay_short_in_engineering_form() -> None:
    assert [compact(v) for v in (1_600_000, 2_400_000, 240_000, 4_000, 0.05)] == \
        ["1.6M", "2.4M", "240k", "4,000", "0.05"]


def _overlapping_ticks(fig: Any) -> list[str]:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    bad = []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            labels = [t for t in axis.get_ticklabels()
                      if t.get_text() and lo <= t.get_position()[axis is ax.yaxis] <= hi]
            boxes = [t.get_window_extent(renderer) for t in labels]
            if any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2)):
                bad.append(f"{ax.get_title()} {axis.axis_name}")
    return bad


def test_the_q3_tenant_plot_has_no_overlapping_ticks_and_a_legend_of_every_policy() -> None:
    import random

    import matplotlib.pyplot as plt

    rng = random.Random(3)
    points = {w: {p: [(10 ** rng.uniform(1.3, 4.0), 10 ** rng.uniform(-3.5, 1.0))
                      for _ in range(60)] for p in ("sjf-predicted", "hrrn-predicted")}
              for w in ("steady", "lanl")}
    fig = q3_tenants_figure(points, "ifs-memoryless")
    try:
        assert _overlapping_ticks(fig) == []
        [legend] = fig.legends
        names = [t.get_text() for t in legend.get_texts()]
        assert names == ["sjf-predicted", "hrrn-predicted", "as under ifs-memoryless"]
    finally:
        plt.close(fig)


def test_the_deploy_plot_names_every_line_and_both_bounds_in_its_legend() -> None:
    import matplotlib.pyplot as plt

    fig = tenant_harm_figure(deploy_section(tie=True))
    try:
        [legend] = fig.legends
        names = [t.get_text() for t in legend.get_texts()]
        assert names[:3] == ["guarded-sjf", "hrrn-predicted", "sjf-oracle"]
        assert "as under ifs-memoryless (1×)" in names
        assert "the judge's bound (2.0×)" in names
        lines = [line for ax in fig.axes for line in ax.get_lines()]
        assert {line.get_label() for line in lines} <= set(names)  # no line left unnamed
        assert _overlapping_ticks(fig) == []
    finally:
        plt.close(fig)


def _invoke(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def small_report_parts(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Report, dict[str, dict[str, str]], dict[str, HeldoutRuns], Path]:
    """A report from the demo's own steps on small traces, with a judge section in which the
    recommendation ties with another candidate: the record, what its plots are drawn from
    (Q1's run folders, the held-out runs) and the folder it was written to."""
    tmp = tmp_path_factory.mktemp("report")
    settings = demo.DemoSettings.of("quick")
    spec = demo.WorkloadSpec(name="flood", kind="scenario", source="flood", tasks=400,
                             workers=2)
    workload = demo.prepare_workload(spec, settings, str(tmp))
    q1 = demo.simulate_q1(workload, str(tmp / "logs"), str(tmp / "runs"), settings.baseline)
    weights = tmp / "weights" / "optuna"
    _invoke("tune", "--trace", "flood?tasks=200&tenants=4", "--workers", "2", "--trials", "2",
            "--train-seeds", "0", "--heldout-seeds", "1-2", "--out", str(weights))
    learned = {"optuna": (read_card(weights), str(weights))}
    predicted = write_trace(generate("flood", tasks=400, tenants=5, workers=2, seed=4,
                                     predicted_noise=0.5), tmp / "predicted.parquet")
    sims = demo.simulate_heldout("flood", str(predicted), 2,
                                 demo.heldout_candidates(workload.info, learned,
                                                         settings.baseline))
    scores = {"mae_s": 1.5, "mdape_pct": 12.0, "spearman": 0.9}
    latency = Latency(p50=3.0, p99=6.0, mean=3.5, n=100.0)
    trained = PredictorResult(
        workload="flood", version="v0001", registry="", objective="l1",
        objectives_compared={}, train_rows=240, heldout_rows=400, cut_s=0.0, train_frac=0.6,
        card_test={}, heldout={"model": scores, "global_median": {**scores, "mae_s": 4.0}},
        quantiles={}, training_time_s=1.0, compile_time_s=1.0, latency_us=latency,
        booster_latency_us=latency, heldout_trace=str(predicted), workers=2)
    def assemble(**deploy: Any) -> Report:
        return demo.assemble_report(
            run="small", settings=settings, specs={}, workloads={"flood": workload},
            ingestion=Ingestion(files_seen=1, files_read=1, decisions_loaded=400,
                                completions_loaded=400, rows_quarantined=0,
                                quarantined_by_rule={}, gx_rows_checked=400,
                                warehouse_rows={}),
            q1={"flood": q1}, eval_rows=[], cards={"optuna": learned["optuna"][0]},
            trained={"flood": trained}, sims={"flood": sims}, steps={}, total_s=1.0,
            root=tmp, **deploy)

    DRAFTS[tmp] = assemble(draft=True)  # makes no judge: deploy_of is not patched yet
    mp = pytest.MonkeyPatch()
    mp.setattr(demo, "deploy_of", lambda settings, root, pool=None: deploy_section(tie=True))
    try:
        report = assemble()
    finally:
        mp.undo()
    folder = write_report(report, {"flood": q1.dirs}, tmp / "out", {"flood": sims})
    return report, {"flood": q1.dirs}, {"flood": sims}, folder


DRAFTS: dict[Path, Report] = {}
"""The draft (``assemble_report(draft=True)``) of each ``small_report_parts``, by its folder."""


@pytest.fixture(scope="module")
def small_report(
    small_report_parts: tuple[Report, dict[str, dict[str, str]], dict[str, HeldoutRuns], Path],
) -> Path:
    """The folder of ``small_report_parts``."""
    return small_report_parts[3]


@pytest.mark.slow
def test_plots_drawn_on_a_pool_and_a_draft_s_before_the_judge_are_the_serial_ones(
    small_report_parts: tuple[Report, dict[str, dict[str, str]], dict[str, HeldoutRuns], Path],
    tmp_path: Path,
) -> None:
    report, q1_dirs, sims, serial = small_report_parts
    draft = DRAFTS[serial.parent]
    assert draft.deploy is None and draft.plots.deploy is None and report.plots.deploy
    with Pool(jobs=2) as pool:
        # the draft's figures first, as the demo draws them while its judge finishes
        drawn = draw_plots(draft, q1_dirs, tmp_path / "pooled", sims, pool)
        assert report.plots.deploy not in drawn and len(drawn) == 4
        pooled = write_report(report, q1_dirs, tmp_path / "pooled", sims, pool, drawn)
    pngs = sorted(p.name for p in serial.glob("*.png"))
    assert pngs and pngs == sorted(p.name for p in pooled.glob("*.png"))
    for name in pngs:
        assert (pooled / name).read_bytes() == (serial / name).read_bytes(), name
    assert (pooled / "report.md").read_text() == (serial / "report.md").read_text()


@pytest.mark.slow
def test_the_first_page_answers_the_four_questions_each_with_a_figure_beside_it(
    small_report: Path,
) -> None:
    md = (small_report / "report.md").read_text()
    first, _, appendix = md.partition("# Appendix: the evidence")
    assert appendix, "the evidence comes after the answers"
    heads = re.findall(r"^### (.+)$", first, flags=re.MULTILINE)
    assert [h for h in heads if h.startswith(QUESTIONS)] == heads and len(heads) == 4
    for q in QUESTIONS:
        assert sum(h.startswith(q) for h in heads) == 1
    for block in re.split(r"^### ", first, flags=re.MULTILINE)[1:]:
        sentence = next(line for line in block.splitlines()[1:] if line.strip())
        assert sentence.endswith(".") and not sentence.startswith("!")
        [image] = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", block)
        assert (small_report / image).is_file()
    data = json.loads((small_report / "report.json").read_text())
    assert unmatched_numbers(md, data) == []
    assert "tied for the most with `hrrn-predicted`" in first
    assert "the most of any candidate" not in md


@pytest.mark.slow
def test_the_answers_come_from_the_run_not_from_fixed_text(small_report: Path) -> None:
    from desched.bench.report.write import read_report

    report = read_report(small_report)
    pages = answers(report)
    assert [a.figure for a in pages] == [report.plots.q1["flood"], report.plots.q2,
                                         report.plots.pareto, report.plots.deploy]
    learner = report.q2.learners["optuna"]
    assert f"{learner.overall['learned'].J.mean:.3f}" in pages[1].sentence
    assert "`guarded-sjf`: it passes 5 of 10" in pages[3].sentence


@pytest.mark.slow
def test_images_are_files_beside_the_markdown_and_the_html_links_only_those(
    small_report: Path,
) -> None:
    md = (small_report / "report.md").read_text()
    assert "base64" not in md and "data:image" not in md
    page = (small_report / "report.html").read_text()
    assert "data:image" not in page and page.startswith("<!doctype html>")
    sources = image_sources(page)
    assert sources and len(sources) == len(re.findall(r"!\[[^\]]*\]\(", md))
    for src in sources:
        assert "/" not in src and (small_report / src).is_file()
    assert "<table>" in page


@pytest.mark.slow
def test_an_interval_over_two_held_out_traces_is_not_printed(small_report: Path) -> None:
    report = json.loads((small_report / "report.json").read_text())
    overall = report["q2"]["learners"]["optuna"]["overall"]["learned"]
    assert overall["J"]["n"] == 2
    md = (small_report / "report.md").read_text()
    line = next(x for x in md.splitlines() if x.startswith("| all held-out | learned |"))
    assert "±" not in line


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_q3_judges_the_flood_on_a_held_out_part_that_holds_the_flood(seed: int) -> None:
    import polars as pl

    full = demo.DemoSettings.of("full")
    frac = full.q3_train_frac["flood"]
    trace = generate("flood", tasks=20_000, workers=8, load=0.85, seed=seed)
    flood = trace.filter(pl.col("tenant") == "flood")["submit_s"]

    def cut(fraction: float) -> float:
        return float(trace["submit_s"].quantile(fraction, "lower"))  # type: ignore[arg-type]

    assert float(flood.min()) >= cut(frac)  # type: ignore[arg-type]  # all of it held out
    assert float(flood.max()) < cut(full.train_frac)  # type: ignore[arg-type]  # the default: none


def test_the_report_says_how_long_the_command_ran_from_its_start() -> None:
    """The title's time is the command's, from the process's start (Prefect's local server
    starting before the flow counts), the flow's own beside it; the flow's alone where the
    process's start is unknown."""
    from desched.bench.demo import process_seconds
    from desched.bench.report.markdown import ran_for
    from desched.bench.report.records import Timing

    whole = process_seconds()
    assert whole is not None and 0.0 < whole < 7 * 86400.0  # this test process's own age
    timing = Timing(steps={}, total_s=46.2, load_average=[1.0], cpus=2, process_s=75.4)
    assert ran_for(timing) == "75 s from its process's start to this report (46 s in its flow)"
    assert ran_for(timing.model_copy(update={"process_s": None})) == "46 s"
