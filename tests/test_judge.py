"""The deployment judge: metric definitions on hand-computed examples, the protocol on small
synthetic SWF logs, the leave-one-log-out hook and ``desched judge``."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from desched.bench import judge as jd
from desched.bench.judge_cases import Case, rescale_to_load
from desched.cli import cli
from desched.errors import DeschedError


@pytest.fixture(autouse=True)
def quick_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """``desched train``'s code with one objective and few rounds: the protocol, not the
    model, is under test here."""
    monkeypatch.setenv("DESCHED_TRAIN_OBJECTIVES", '["l2-log"]')
    monkeypatch.setenv("DESCHED_TRAIN_MAX_ROUNDS", "20")


def outcome(mean: float, p99: float, bsld: dict[str, float], tasks: dict[str, int]) -> jd.Outcome:
    from desched.metrics import jain

    return jd.Outcome(policy="p", params={}, mean_response_s=mean, p99_response_s=p99,
                      jain_bsld=jain(list(bsld.values())), jain_slowdown=0.0,
                      max_service_lag_s=0.0, tenant_bsld=bsld, tenant_tasks=tasks)


def test_the_criteria_match_a_hand_computed_example() -> None:
    tasks = {"a": 10, "b": 12}
    today = outcome(100.0, 200.0, {"a": 2.0, "b": 4.0}, tasks)
    oracle = outcome(50.0, 150.0, {"a": 1.0, "b": 1.0}, tasks)
    policy = outcome(60.0, 180.0, {"a": 1.0, "b": 9.0}, tasks)
    criteria, worst, ratios = jd.log_criteria(policy, today, oracle, jd.Thresholds(),
                                              frontier_gain=0.64)
    assert criteria["gain"].value == pytest.approx(0.8)  # (100 - 60) / (100 - 50)
    assert criteria["gain"].passed  # above the floor 0.1
    assert criteria["frontier_share"].value == pytest.approx(0.8 / 0.64)
    assert criteria["frontier_share"].passed
    assert criteria["p99"].value == pytest.approx(0.9) and criteria["p99"].passed
    # Jain today (2 + 4)^2 / (2 (4 + 16)) = 0.9; policy (1 + 9)^2 / (2 (1 + 81)) = 100 / 164
    assert criteria["delta_jain"].value == pytest.approx(100 / 164 - 0.9)
    assert not criteria["delta_jain"].passed
    assert criteria["delta_jain"].distance == pytest.approx(-0.02 + 0.9 - 100 / 164)
    assert ratios == pytest.approx({"a": 0.5, "b": 2.25})
    assert worst == "b" and criteria["worst_tenant"].value == pytest.approx(2.25)
    assert criteria["worst_tenant"].distance == pytest.approx(0.25)


def test_a_tenant_with_fewer_than_ten_tasks_is_not_counted_as_the_worst() -> None:
    tasks = {"a": 10, "b": 9}
    today = outcome(100.0, 200.0, {"a": 2.0, "b": 4.0}, tasks)
    oracle = outcome(50.0, 150.0, {"a": 1.0, "b": 1.0}, tasks)
    policy = outcome(90.0, 250.0, {"a": 1.0, "b": 40.0}, tasks)
    criteria, worst, _ = jd.log_criteria(policy, today, oracle, jd.Thresholds(),
                                         frontier_gain=0.5)
    assert worst == "a" and criteria["worst_tenant"].value == pytest.approx(0.5)
    assert criteria["gain"].value == pytest.approx(0.2) and criteria["gain"].passed
    assert criteria["frontier_share"].value == pytest.approx(0.4)
    assert not criteria["frontier_share"].passed
    assert criteria["p99"].value == pytest.approx(1.25) and not criteria["p99"].passed


def test_the_gain_floor_holds_only_where_the_frontier_reaches_it() -> None:
    tasks = {"a": 10}
    today = outcome(100.0, 200.0, {"a": 2.0}, tasks)
    oracle = outcome(50.0, 150.0, {"a": 1.0}, tasks)
    policy = outcome(97.0, 200.0, {"a": 2.0}, tasks)  # gain 0.06
    reachable, _, _ = jd.log_criteria(policy, today, oracle, jd.Thresholds(), frontier_gain=0.3)
    assert not reachable["gain"].passed and reachable["gain"].distance == pytest.approx(0.04)
    unreachable, _, _ = jd.log_criteria(policy, today, oracle, jd.Thresholds(),
                                        frontier_gain=0.05)
    assert unreachable["gain"].passed and unreachable["frontier_share"].value == pytest.approx(1.2)


def test_gain_is_undefined_when_the_oracle_does_not_beat_today() -> None:
    tasks = {"a": 10}
    today = outcome(100.0, 200.0, {"a": 2.0}, tasks)
    faster = outcome(90.0, 200.0, {"a": 2.0}, tasks)
    slower = outcome(110.0, 200.0, {"a": 2.0}, tasks)
    for policy, ok in ((faster, True), (slower, False)):
        criteria, _, _ = jd.log_criteria(policy, today, today, jd.Thresholds())
        assert criteria["gain"].value is None and criteria["gain"].passed is ok
        assert criteria["frontier_share"].value is None
        assert criteria["frontier_share"].passed is ok


def test_outcome_metrics_match_a_hand_computed_run() -> None:
    # one worker: a runs 0-5 and 5-25, b runs 25-35; all submitted at 0
    out = jd.outcome_of("x", {}, np.array(["a", "a", "b"]), np.zeros(3),
                        np.array([5.0, 20.0, 10.0]), np.array([0.0, 5.0, 25.0]), 1)
    assert out.mean_response_s == pytest.approx((5 + 25 + 35) / 3)
    # bounded slowdown max(1, r / max(d, 10)): 5/10 -> 1, 25/20 = 1.25, 35/10 = 3.5
    assert out.tenant_bsld == pytest.approx({"a": 1.125, "b": 3.5})
    assert out.tenant_tasks == {"a": 2, "b": 1}
    assert out.jain_bsld == pytest.approx((1.125 + 3.5) ** 2 / (2 * (1.125**2 + 3.5**2)))
    # Jain over per-tenant mean (plain) slowdown: a (1 + 1.25) / 2, b 3.5
    assert out.jain_slowdown == pytest.approx((1.125 + 3.5) ** 2 / (2 * (1.125**2 + 3.5**2)))


def test_the_no_harm_check_compares_mean_response_jain_and_service_lag_with_today() -> None:
    today = jd.Outcome(policy="t", params={}, mean_response_s=10.0, p99_response_s=1.0,
                       jain_bsld=0.5, jain_slowdown=0.8, max_service_lag_s=100.0,
                       tenant_bsld={}, tenant_tasks={})
    better = today.model_copy(update={"mean_response_s": 9.0, "max_service_lag_s": 50.0})
    unfair = today.model_copy(update={"jain_slowdown": 0.7})
    assert all(c.passed for c in jd.scenario_criteria(better, today).values())
    checks = jd.scenario_criteria(unfair, today)
    assert not checks["jain_slowdown"].passed
    assert checks["jain_slowdown"].distance == pytest.approx(0.1)
    assert checks["mean_response"].passed and checks["max_service_lag"].passed


def test_a_value_equal_to_today_up_to_rounding_is_no_worse() -> None:
    today = jd.Outcome(policy="t", params={}, mean_response_s=10.0, p99_response_s=1.0,
                       jain_bsld=0.5, jain_slowdown=0.8, max_service_lag_s=25821.27780953888,
                       tenant_bsld={}, tenant_tasks={})
    same = today.model_copy(update={"max_service_lag_s": 25821.277809545456})
    worse = today.model_copy(update={"max_service_lag_s": 25821.3})
    assert jd.scenario_criteria(same, today)["max_service_lag"].passed
    assert not jd.scenario_criteria(worse, today)["max_service_lag"].passed


def test_rescaling_gives_exactly_the_offered_load() -> None:
    import polars as pl

    frame = pl.DataFrame({"submit_s": [0.0, 10.0, 40.0], "duration_s": [30.0, 30.0, 60.0]})
    scaled = rescale_to_load(frame, workers=2, load=0.9)
    span = float(scaled["submit_s"].max())
    assert 120.0 / (span * 2) == pytest.approx(0.9)


def write_swf(path: Path, jobs: int, seed: int) -> Path:
    """A synthetic SWF log: four users, two of short and two of long jobs, Poisson arrivals."""
    rng = random.Random(seed)
    lines = ["; synthetic log for tests"]
    t = 0.0
    for j in range(1, jobs + 1):
        t += rng.expovariate(1 / 60)
        user = rng.choice([1, 2, 3, 4])
        run = rng.uniform(10, 60) if user <= 2 else rng.uniform(300, 1200)
        procs = 1 if user <= 2 else 8
        fields = [j, int(t), 0, int(run), procs, -1, -1, procs, int(run * 2), -1, 1, user, 1,
                  user, 1, -1, -1, -1]
        lines.append(" ".join(str(f) for f in fields))
    path.write_text("\n".join(lines) + "\n")
    return path


def small_case(tmp_path: Path, seed: int = 1, name: str = "syn") -> Case:
    log = write_swf(tmp_path / f"{name}.swf", 600, seed)
    return jd.prepare_log(log, cache_dir=tmp_path / "cache")


def test_a_log_case_has_predictions_but_no_training_task_and_starts_at_zero(tmp_path: Path) -> None:
    case = small_case(tmp_path)
    assert case.tasks == 180  # the last 30 % of 600
    assert float(case.frame["submit_s"].min()) == 0.0
    for column in ("predicted_s", "predicted_p50_s", "predicted_p90_s"):
        assert case.frame[column].min() > 0  # type: ignore[operator]
    ids = set(case.frame["task_id"].to_list())
    assert ids == {f"j{j}" for j in range(421, 601)}
    span = float(case.frame["submit_s"].max())
    load = float(case.frame["duration_s"].sum()) / (span * case.workers)
    assert load == pytest.approx(0.9)


def test_predictions_of_the_test_part_alone_equal_those_made_among_all_rows(
    tmp_path: Path,
) -> None:
    from desched.bench.judge_cases import predict_frame, split_log
    from desched.models.training import TrainSettings, train
    from desched.swf import import_swf

    full, _ = import_swf(write_swf(tmp_path / "syn.swf", 600, 1))
    full = full.sort("submit_s", maintain_order=True)
    first, _ = split_log(full, 0.7)
    result = train(first, TrainSettings(), source="syn")
    alone = predict_frame(result, full, from_row=first.height)
    assert alone.height == 180 and "predicted_p90_s" in alone.columns
    assert alone.equals(predict_frame(result, full)[first.height:])  # bit for bit


def test_today_keeps_no_gain_and_the_oracle_all_of_it(tmp_path: Path) -> None:
    case = small_case(tmp_path)
    today = jd.verdict_of(case, jd.TODAY)
    oracle = jd.verdict_of(case, jd.ORACLE)
    assert today.criteria["gain"].value == pytest.approx(0.0)
    assert today.criteria["p99"].value == pytest.approx(1.0)
    assert today.criteria["delta_jain"].value == pytest.approx(0.0)
    assert oracle.criteria["gain"].value == pytest.approx(1.0)
    assert set(today.tenant_ratio.values()) == {1.0}


def test_the_cache_returns_the_same_case(tmp_path: Path) -> None:
    first = small_case(tmp_path)
    again = small_case(tmp_path)
    assert again.frame.equals(first.frame)
    assert again.workers == first.workers and again.model == first.model


def test_runs_of_a_case_share_its_tenant_codes_and_table_and_match_a_fresh_case(
    tmp_path: Path,
) -> None:
    from desched.bench.verdicts import case_table, case_tenants

    case = small_case(tmp_path)
    specs = (jd.TODAY, jd.ORACLE, "guarded-sjf", "boost-predicted")
    first = [jd.evaluate(case, spec) for spec in specs]
    assert case.tenants is not None and case.table is not None
    # every run of the case after the first reused them; a case that never ran any of these
    # specs recomputes from scratch and gives the same outcomes
    for spec, before in zip(specs, first, strict=True):
        fresh = Case(name=case.name, kind=case.kind, source=case.source, frame=case.frame,
                     workers=case.workers, mean_train_duration_s=case.mean_train_duration_s)
        assert jd.evaluate(fresh, spec) == before
    names, codes = case_tenants(case)
    assert names.tolist() == sorted(set(case.frame["tenant"].to_list()))
    assert names[codes].tolist() == case.frame["tenant"].to_list()
    # a run cannot change the kept table; a case given another frame reads that frame
    table = case_table(case)
    table.predicted_s[0] = -1.0
    assert case_table(case).predicted_s[0] == case.frame["predicted_s"][0]
    case.frame = case.frame.with_columns(tenant=case.frame["tenant"] + "x")
    assert all(n.endswith("x") for n in case_tenants(case)[0])
    assert all(n.endswith("x") for n in case_table(case).tenant_names)


def test_leave_one_log_out_tunes_on_the_other_logs_only(tmp_path: Path) -> None:
    one = small_case(tmp_path)
    cases = [Case(name=f"log{k}", kind="log", source=one.source, frame=one.frame,
                  workers=one.workers, mean_train_duration_s=one.mean_train_duration_s,
                  model=one.model) for k in (1, 2, 3)]
    calls: list[tuple[str, list[str]]] = []

    def tune(policy: str, training: list[Case]) -> dict[str, str]:
        calls.append((policy, sorted(c.name for c in training)))
        return {}

    result = jd.run_judge(cases, ["sjf-predicted"], tune=tune)
    assert calls == [("sjf-predicted", ["log2", "log3"]), ("sjf-predicted", ["log1", "log3"]),
                     ("sjf-predicted", ["log1", "log2"])]
    assert {v.workload for v in result.verdicts} == {"log1", "log2", "log3"}


def test_desched_judge_writes_judge_json_and_its_table(tmp_path: Path) -> None:
    log = write_swf(tmp_path / "syn.swf", 600, 1)
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["judge", "--logs", str(log), "--scenarios", "steady",
                                   "--max-tasks", "500", "--policies", "hrrn-predicted",
                                   "--out", str(out), "--cache", str(tmp_path / "cache")])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "judge.json").read_text())
    assert data["policies"] == ["ifs-memoryless", "sjf-oracle", "hrrn-predicted"]
    assert data["recommendation"] == "hrrn-predicted"
    kinds = {(v["workload"], v["policy"]): v["kind"] for v in data["verdicts"]}
    assert kinds[("syn", "hrrn-predicted")] == "log"
    assert kinds[("steady", "hrrn-predicted")] == "scenario"
    assert ("steady", "sjf-oracle") not in kinds
    md = (out / "judge.md").read_text()
    assert "| syn | hrrn-predicted |" in md and "| steady | hrrn-predicted |" in md
    assert jd.read_judge(out).recommendation == "hrrn-predicted"


def test_desched_judge_says_which_jobs_of_a_log_the_import_dropped(tmp_path: Path) -> None:
    log = write_swf(tmp_path / "holes.swf", 600, 1)
    lines = log.read_text().splitlines()
    for k in (5, 50, 500):  # no run time (field 4 is -1): the import drops these three
        fields = lines[k].split()
        fields[3] = "-1"
        lines[k] = " ".join(fields)
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["judge", "--logs", str(log), "--scenarios", "none",
                                   "--policies", "hrrn-predicted", "--jobs", "1",
                                   "--tune", "lolo",
                                   "--out", str(out), "--cache", str(tmp_path / "cache")])
    assert res.exit_code == 0, res.output
    assert "note: --tune: fewer than two logs to tune on" in res.output  # one log: defaults
    note = "holes: kept 597 of the log's 600 jobs (dropped no run time 3)"
    assert note in res.output
    case = json.loads((out / "judge.json").read_text())["cases"][0]
    assert case["log_jobs"] == 600 and case["log_dropped"]["no run time"] == 3
    assert sum(case["log_dropped"].values()) == 3
    assert note in (out / "judge.md").read_text()
    cached = jd.prepare_log(log, cache_dir=tmp_path / "cache")  # read back from the cache
    assert (cached.log_jobs, cached.log_dropped) == (600, case["log_dropped"])


def test_desched_judge_refuses_a_missing_log_in_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(cli, ["judge", "--logs", str(tmp_path / "none.swf"),
                                   "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert res.output.strip().splitlines() == [(f"error: --logs: {tmp_path / 'none.swf'}: "
                                               "no such file")]


def test_desched_judge_refuses_bad_logs_and_an_unknown_scenario_before_any_work(
    tmp_path: Path,
) -> None:
    log = str(write_swf(tmp_path / "s.swf", 200, 1))
    (tmp_path / "again").mkdir()
    same_name = str(write_swf(tmp_path / "again" / "s.swf.gz", 200, 2))
    for args, says in (
        (["--logs", ""], "error: --logs: no file named (leave the option out"),
        (["--logs", str(tmp_path / "again")], f"error: --logs: {tmp_path / 'again'}: a folder"),
        (["--logs", f"{log},{same_name}"],
         f"error: --logs: {log} and {same_name} both name the log 's' in the tables"),
        (["--logs", f"{log},{tmp_path / 'again' / '..' / 's.swf'}"],  # judged twice (QA)
         f"error: --logs: {tmp_path / 'again' / '..' / 's.swf'}: named twice"),
        (["--logs", log, "--scenarios", "steady,nosuch"],
         "error: --scenarios: unknown scenario 'nosuch' (scenarios: "),
        (["--logs", log, "--policies", " , "],  # it had judged every candidate (QA)
         "error: --policies: no policy named (leave the option out"),
        (["--logs", str(write_swf(tmp_path / "steady.swf", 200, 3)), "--scenarios", "steady"],
         "error: --logs: the log 'steady' has the name of a scenario in --scenarios"),
    ):
        res = CliRunner().invoke(cli, ["judge", *args, "--out", str(tmp_path / "out")])
        assert res.exit_code == 2
        [line] = res.output.strip().splitlines()
        assert line.startswith(says)
    assert not (tmp_path / "out").exists()


def test_desched_judge_offers_processes_and_refuses_a_bad_dask_address_in_one_line(
    tmp_path: Path,
) -> None:
    help_text = CliRunner().invoke(cli, ["judge", "--help"]).output
    assert "--jobs INTEGER" in help_text and "--dask ADDRESS" in help_text
    res = CliRunner().invoke(cli, ["judge", "--logs", str(write_swf(tmp_path / "s.swf", 200, 1)),
                                   "--dask", "nonsense://x", "--out", str(tmp_path / "out")])
    assert res.exit_code == 2
    [line] = res.output.strip().splitlines()
    assert line.startswith("error: no Dask scheduler at nonsense://x: unknown address scheme")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_desched_judge_on_two_processes_writes_the_serial_judge_json(tmp_path: Path) -> None:
    logs = ",".join(str(write_swf(tmp_path / f"syn{k}.swf", 500, k)) for k in (1, 2))
    texts = []
    for jobs in ("1", "2"):
        out = tmp_path / f"jobs{jobs}"
        res = CliRunner().invoke(cli, ["judge", "--logs", logs, "--scenarios", "steady",
                                       "--max-tasks", "400", "--jobs", jobs, "--out", str(out),
                                       "--cache", str(tmp_path / "cache")])
        assert res.exit_code == 0, res.output
        texts.append(((out / "judge.json").read_bytes(), (out / "judge.md").read_bytes()))
    assert texts[1] == texts[0]
    assert len(list((tmp_path / "cache").glob("*.parquet"))) == 3  # both runs share the cache


def test_the_report_section_states_only_numbers_of_its_record_and_draws_the_harm_plot(
    tmp_path: Path,
) -> None:
    from desched.bench.report.deploy import deploy_section, markdown_section, plot_tenant_harm
    from desched.bench.report.numbers import unmatched_numbers
    from desched.policies import RECOMMENDED

    cases = [small_case(tmp_path), jd.prepare_scenario("steady", cache_dir=None, tasks=500)]
    result = jd.run_judge(cases, ["sjf-predicted", "hrrn-predicted"])
    section = deploy_section(result, "a test run")
    assert {r.policy for r in section.rows} == {"sjf-oracle", "sjf-predicted", "hrrn-predicted"}
    assert {h.workload for h in section.harm} == {"steady"}
    assert section.recommendation == result.recommendation
    assert section.deployed_default == RECOMMENDED
    text = "\n".join(markdown_section(section, "deploy-tenants.png"))
    assert "## Which policy to deploy" in text
    assert f"**Recommendation: `{result.recommendation}`**" in text
    assert unmatched_numbers(text, section.model_dump()) == []
    png = plot_tenant_harm(section, tmp_path / "deploy-tenants.png")
    assert png.stat().st_size > 5000


def test_the_cache_keeps_apart_cases_of_different_settings(tmp_path: Path) -> None:
    log = write_swf(tmp_path / "syn.1-x.swf", 600, 1)  # dots in the name, as the real logs
    whole = jd.prepare_log(log, cache_dir=tmp_path / "cache")
    part = jd.prepare_log(log, cache_dir=tmp_path / "cache", max_tasks=400)
    assert (whole.tasks, part.tasks) == (180, 120)
    assert len(list((tmp_path / "cache").glob("*.parquet"))) == 2
    assert jd.prepare_log(log, cache_dir=tmp_path / "cache", max_tasks=400).tasks == 120


@pytest.mark.slow
def test_desched_judge_tunes_leave_one_log_out_with_the_builtin_tuner(tmp_path: Path) -> None:
    logs = [write_swf(tmp_path / f"syn{k}.swf", 500, k) for k in (1, 2)]
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["judge", "--logs", ",".join(map(str, logs)),
                                   "--scenarios", "none", "--policies", "guarded-sjf",
                                   "--tune", "lolo", "--out", str(out),
                                   "--cache", str(tmp_path / "cache")])
    assert res.exit_code == 0, res.output
    result = jd.read_judge(out)
    assert result.settings == {"tune": "lolo", "tuning_logs": ["syn1", "syn2"]}
    assert "fewer than two logs" not in res.output
    assert len(result.frontiers) == 2 and {f.workload for f in result.frontiers} == {"syn1",
                                                                                      "syn2"}
    from desched.bench.lolo import grid_of

    for log in ("syn1", "syn2"):
        assert result.verdict(log, "guarded-sjf").params in grid_of("guarded-sjf")
    md = (out / "judge.md").read_text()
    assert "frontier share" in md and "clairvoyant:" in md


def test_a_log_whose_test_part_arrives_at_one_instant_says_no_load_was_applied(
    tmp_path: Path,
) -> None:
    from desched.bench.judge_cases import load_note, prepare_log

    lines = ["; every job after the first 70 % submitted at one instant"]
    for j in range(1, 101):
        submit = j * 60 if j <= 70 else 10_000
        lines.append(" ".join(str(f) for f in [j, submit, 0, 30 + j, 1, -1, -1, 1, 100, -1, 1,
                                               1 + j % 3, 1, 1, 1, -1, -1, -1]))
    log = tmp_path / "burst.swf"
    log.write_text("\n".join(lines) + "\n")
    said: list[str] = []
    case = prepare_log(log, cache_dir=None, progress=said.append)
    assert case.load is None
    assert load_note(case) in said
    assert load_note(case) == ("burst: every test task is submitted at one instant, so no load "
                               "could be applied (the log's own arrivals are kept)")


def test_a_test_part_submitted_within_a_moment_runs_on_capped_workers_and_says_so(
    tmp_path: Path,
) -> None:
    # The last 30 % within 3 ms for hours of work: the log's own time scale asked for
    # millions of workers, nothing queued and every policy kept every promise in silence
    # (a QA pass). Capped at one worker per 10 tasks, the submissions are spread instead.
    from desched.bench.judge_cases import TASKS_PER_WORKER, cap_note, prepare_log

    lines = ["; the test part submitted within a moment"]
    for j in range(1, 1001):
        submit = j * 60 if j <= 700 else 50_000 + (j - 700) * 1e-5
        lines.append(" ".join(str(f) for f in [j, submit, 0, 300 + j % 7 * 100, 1, -1, -1, 1,
                                               2000, -1, 1, 1 + j % 4, 1, 1, 1, -1, -1, -1]))
    log = tmp_path / "moment.swf"
    log.write_text("\n".join(lines) + "\n")
    said: list[str] = []
    case = prepare_log(log, cache_dir=tmp_path / "cache", progress=said.append)
    assert case.workers == 300 // TASKS_PER_WORKER == 30
    assert case.workers_wanted is not None and case.workers_wanted > 1_000_000
    note = cap_note(case)
    assert note is not None and note in said and "nothing would queue" in note
    span = float(case.frame["submit_s"].max())  # type: ignore[arg-type]
    work = float(case.frame["duration_s"].sum())
    assert work / (span * case.workers) == pytest.approx(0.9)  # spread to the judge's load
    cached = prepare_log(log, cache_dir=tmp_path / "cache")
    assert (cached.workers, cached.workers_wanted) == (case.workers, case.workers_wanted)
    result = jd.run_judge([case], policies=["sjf-predicted"])
    jd.write_judge(result, tmp_path / "out")
    assert note in (tmp_path / "out" / "judge.md").read_text()
    # a log on its own time scale is not capped and says nothing of it
    plain = small_case(tmp_path)
    assert plain.workers_wanted is None and cap_note(plain) is None


def test_a_log_too_short_for_the_judge_says_how_many_jobs_it_needs_and_where_they_went(
    tmp_path: Path,
) -> None:
    from desched.bench.judge_cases import min_log_jobs, prepare_log
    from desched.models.training import TrainSettings

    assert min_log_jobs(0.7, TrainSettings()) == 40
    text = write_swf(tmp_path / "src.swf", 60, 2).read_text().splitlines()
    short = tmp_path / "short.swf"
    short.write_text("\n".join(text[:40]) + "\n")  # the comment and 39 jobs
    with pytest.raises(DeschedError, match=r"needs a log of at least 40 usable jobs .*"
                                           r"it has 39 usable jobs"):
        prepare_log(short, cache_dir=None)
    reused = tmp_path / "reused.swf"  # every job number 1: all but one are duplicates
    reused.write_text("\n".join([text[0], *("1 " + line.split(" ", 1)[1] for line in text[1:])])
                      + "\n")
    with pytest.raises(DeschedError, match=r"the import kept 1 of its 60 jobs \(dropped "
                                           r"duplicate job 59\)"):
        prepare_log(reused, cache_dir=None)


def test_a_log_whose_fairness_promises_cannot_fail_says_so(tmp_path: Path) -> None:
    # A log without user ids is one tenant, 'unknown': Δ Jain is 0 and the worst tenant 1.00×
    # whatever a policy does, and judge.md said nothing of it (a QA pass).
    text = write_swf(tmp_path / "src.swf", 600, 4).read_text().splitlines()
    one = tmp_path / "nouser.swf"
    rows = [line if line.startswith(";") else " ".join(
        f if k != 11 else "-1" for k, f in enumerate(line.split())) for line in text]
    one.write_text("\n".join(rows) + "\n")
    case = jd.prepare_log(one, cache_dir=tmp_path / "cache")
    result = jd.run_judge([case], ["sjf-predicted"])
    assert case.frame["tenant"].unique().to_list() == ["unknown"]
    assert "nouser: one tenant in the test part" in jd.markdown(result)
    res = CliRunner().invoke(cli, ["judge", "--logs", str(one), "--scenarios", "none",
                                   "--policies", "sjf-predicted", "--jobs", "2", "--cache",
                                   str(tmp_path / "cache"), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "note: nouser: one tenant in the test part (one user, or a log" in res.stderr
    assert res.stderr.splitlines()[0].endswith(  # said before the long silent part
        f"preparing 1 workload(s) (2 processes): each log imported, its duration model trained "
        f"on its first 70 %, its test part predicted (cached under {tmp_path / 'cache'})")
    many = jd.run_judge([small_case(tmp_path)], ["sjf-predicted"])
    assert "one tenant" not in jd.markdown(many) and not jd.vacuous_notes(many)


def test_the_reports_judge_leaves_out_only_the_family_run_on_predictions(
    tmp_path: Path,
) -> None:
    """``judge_for_report`` runs the judge without ``deployable_frontiers`` (a diagnostic the
    report does not show): every verdict, standing and the recommendation are the full
    judge's, and so is the report's section."""
    from desched.bench.report.deploy import deploy_section, judge_for_report

    log = write_swf(tmp_path / "syn.swf", 600, 1)
    cache = tmp_path / "cache"
    ours, _ = judge_for_report([("syn", log, None)], [("steady", 500)], results=None,
                               cache_dir=cache)
    cases = [jd.prepare_log(log, cache_dir=cache),
             jd.prepare_scenario("steady", cache_dir=cache, tasks=500)]
    full = jd.run_judge(cases, deployable=True)
    assert ours.deployable_frontiers == [] and len(full.deployable_frontiers) == 1
    assert ours.model_dump(exclude={"deployable_frontiers"}) == full.model_dump(
        exclude={"deployable_frontiers"})
    assert deploy_section(ours, "x") == deploy_section(full, "x")


def test_desched_judge_adds_the_frontier_on_predictions_when_asked_and_nothing_else(
    tmp_path: Path,
) -> None:
    log = write_swf(tmp_path / "syn.swf", 600, 1)
    outs, mds = {}, {}
    for flag in ("--frontier-on-predictions", "--no-frontier-on-predictions"):
        out = tmp_path / flag
        res = CliRunner().invoke(cli, ["judge", "--logs", str(log), "--scenarios", "steady",
                                       "--policies", "hrrn-predicted,boost-predicted", flag,
                                       "--out", str(out), "--cache", str(tmp_path / "cache"),
                                       "--jobs", "1"])
        assert res.exit_code == 0, res.output
        outs[flag] = json.loads((out / "judge.json").read_text())
        mds[flag] = (out / "judge.md").read_text()
    full, lean = outs["--frontier-on-predictions"], outs["--no-frontier-on-predictions"]
    assert len(full["deployable_frontiers"]) == 1 and lean["deployable_frontiers"] == []
    assert {k: v for k, v in full.items() if k != "deployable_frontiers"} == {
        k: v for k, v in lean.items() if k != "deployable_frontiers"}
    # judge.md shows the diagnostic's two columns only when it ran, and says how to ask
    assert "on predictions: best gain" in mds["--frontier-on-predictions"]
    assert "on predictions: best gain" not in mds["--no-frontier-on-predictions"]
    assert "`--frontier-on-predictions` adds" in mds["--no-frontier-on-predictions"]
    # the diagnostic is asked for: the command leaves it out by default
    from desched.cli.judge import judge

    option = next(p for p in judge.params if p.name == "on_predictions")
    assert option.default is False
    assert "--frontier-on-predictions" in CliRunner().invoke(cli, ["judge", "--help"]).output


def bad_tuner(policy: str, training: list[Case]) -> object:
    """A --tune target that returns no mapping (the QA pass's ``badtune:notdict``)."""
    return ["scale", 2.0]


def unknown_parameter_tuner(policy: str, training: list[Case]) -> dict[str, float]:
    return {"nosuch": 1.0}


def test_a_custom_tuner_that_returns_no_parameters_is_named_in_one_line(tmp_path: Path) -> None:
    logs = ",".join(str(write_swf(tmp_path / f"s{k}.swf", 200, k)) for k in (1, 2))
    for target, says in (
        ("tests.test_judge:bad_tuner",
         ("error: --tune 'tests.test_judge:bad_tuner': returned list for policy "
          "'boost-predicted', not a mapping of its parameters")),
        ("tests.test_judge:unknown_parameter_tuner",
         ("error: --tune 'tests.test_judge:unknown_parameter_tuner' for policy "
          "'boost-predicted': policy 'boost-predicted' has no parameter 'nosuch'")),
        ("os:getcwd",
         "error: --tune 'os:getcwd': cannot be called as tune(policy, training_cases)"),
    ):
        res = CliRunner().invoke(cli, ["judge", "--logs", logs, "--scenarios", "none",
                                       "--policies", "boost-predicted", "--tune", target,
                                       "--no-cache", "--out", str(tmp_path / "out")])
        assert res.exit_code == 2, res.output
        assert res.output.strip().splitlines()[-1].startswith(says), res.output


def _log_case(durations: list[float], submits: list[float]) -> Case:
    import polars as pl

    frame = pl.DataFrame({"task_id": [f"t{i}" for i in range(len(durations))],
                          "tenant": "u1", "task_type": "x", "submit_s": submits,
                          "duration_s": durations, "predicted_s": durations})
    return Case(name="odd", kind="log", source="odd.swf", frame=frame, workers=2,
                mean_train_duration_s=1.0)


def test_a_log_whose_few_tasks_hold_its_work_or_whose_span_is_one_gap_gets_a_note() -> None:
    """The QA pass's logs: three 30-day jobs among 2,000 short ones (the load is theirs), and
    a long outage inside the test part (the load an average over it); an ordinary log gets
    no note, and judge.md carries the notes of the logs that do."""
    from desched.bench.judge_cases import case_notes, shape_note

    rng = random.Random(5)
    short = [rng.uniform(10, 100) for _ in range(2000)]
    even = [float(i) for i in range(2000)]
    assert shape_note(_log_case(short, even)) is None
    heavy = _log_case([*short[:-3], 2.6e6, 2.6e6, 2.6e6], even)
    [note] = case_notes(heavy)
    assert note.startswith("odd: its longest 20 of 2,000 test tasks hold 9")
    assert "the load of 0.9 is mostly theirs" in note
    gap = _log_case(short, [t if t < 1000 else t + 5000.0 for t in even])
    assert "one gap without a submission is 71% of its test part's span" in shape_note(gap)
    info = heavy.info()
    assert jd.CaseInfo.model_validate_json(info.model_dump_json()) == info  # judge.json keeps it
    assert shape_note(info) == note
