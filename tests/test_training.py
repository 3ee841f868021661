"""Duration-model features, training, the registry's promotion rule, the flow and the CLI."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.cli import cli
from desched.models.features import HISTORY, with_history
from desched.models.promotion import decide, register
from desched.models.registry import Registry
from desched.models.training import OBJECTIVES, Split, TrainResult, TrainSettings, train
from desched.trace import write_trace
from desched.workloads import generate

FAST = TrainSettings(max_rounds=120, early_stopping_rounds=20)
WEAK = TrainSettings(max_rounds=2, objectives=("l2",), quantiles=())


def small_trace(tasks: int = 2500, seed: int = 7) -> pl.DataFrame:
    return generate("steady", tasks=tasks, tenants=10, seed=seed)


@pytest.fixture(scope="module")
def trained() -> TrainResult:
    return train(small_trace(), FAST)


# --- features ----------------------------------------------------------------------------


def reference_history(frame: pl.DataFrame, window: int = 5) -> list[dict[str, float]]:
    """The history columns by brute force: for each task, scan every task that ended before it
    was submitted, in end order, ties in row order. A task ends at its ``end_s`` where the
    frame has one that is a number no earlier than submit + duration, else at submit +
    duration."""
    rows = frame.to_dicts()

    def end(q: dict[str, object]) -> float:
        earliest = float(q["submit_s"]) + float(q["duration_s"])  # type: ignore[arg-type]
        logged = q.get("end_s")
        if logged is None or math.isnan(float(logged)) or float(logged) < earliest:  # type: ignore[arg-type]
            return earliest
        return float(logged)  # type: ignore[arg-type]

    out = []
    for r in rows:
        done = [
            (end(q), j, q)
            for j, q in enumerate(rows)
            if q["tenant"] == r["tenant"] and end(q) < r["submit_s"]
        ]
        done.sort(key=lambda e: (e[0], e[1]))
        durations = [q["duration_s"] for _, _, q in done]
        same_type = [q["duration_s"] for _, _, q in done if q["task_type"] == r["task_type"]]

        def mean(xs: list[float]) -> float:
            return sum(xs) / len(xs) if xs else math.nan

        out.append(
            {
                "tenant_recent_mean_s": mean(durations[-window:]),
                "tenant_last2_mean_s": mean(durations[-2:]),
                "tenant_type_recent_mean_s": mean(same_type[-window:]),
                "tenant_done_n": float(len(durations)) if durations else math.nan,
            }
        )
    return out


_tasks = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["ocr_clean", "embed"]),
        st.integers(0, 30).map(float),
        st.integers(1, 12).map(float),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(_tasks)
def test_the_history_features_equal_a_brute_force_scan_of_tasks_that_ended_before_the_submit(
    tasks: list[tuple[str, str, float, float]],
) -> None:
    frame = pl.DataFrame(
        tasks, schema=["tenant", "task_type", "submit_s", "duration_s"], orient="row"
    ).with_columns(pl.format("t{}", pl.int_range(pl.len())).alias("task_id"))
    got = with_history(frame).select(HISTORY).to_dicts()
    want = reference_history(frame)
    for g, w in zip(got, want, strict=True):
        for c in HISTORY:
            assert (math.isnan(g[c]) and math.isnan(w[c])) or g[c] == pytest.approx(w[c]), c


_ends = st.lists(
    st.one_of(st.none(), st.just(math.nan), st.integers(-5, 60).map(float)),
    min_size=40, max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(_tasks, _ends)
def test_a_logged_end_counts_only_where_it_is_no_earlier_than_submit_plus_duration(
    tasks: list[tuple[str, str, float, float]], ends: list[float | None],
) -> None:
    """A user's ``end_s`` column (any numbers, nulls, NaN) never puts a task in its own
    history or any task in a history before it could have ended."""
    frame = pl.DataFrame(
        tasks, schema=["tenant", "task_type", "submit_s", "duration_s"], orient="row"
    ).with_columns(pl.format("t{}", pl.int_range(pl.len())).alias("task_id"),
                   pl.Series("end_s", ends[: len(tasks)], dtype=pl.Float64))
    got = with_history(frame).select(HISTORY).to_dicts()
    want = reference_history(frame)
    for g, w in zip(got, want, strict=True):
        for c in HISTORY:
            assert (math.isnan(g[c]) and math.isnan(w[c])) or g[c] == pytest.approx(w[c]), c


def test_a_task_never_sees_its_own_duration_whatever_its_end_column_says() -> None:
    for column, values in (("end_s", [0.0, 0.0, 0.0]), ("start_s", [-50.0, -50.0, -50.0]),
                           ("wait_s", [-100.0, -100.0, -100.0])):
        frame = pl.DataFrame({
            "task_id": ["x", "y", "z"], "tenant": ["a", "b", "c"], "task_type": ["t"] * 3,
            "submit_s": [10.0, 20.0, 30.0], "duration_s": [1.0, 2.0, 3.0], column: values,
        })
        history = with_history(frame)
        assert history["tenant_done_n"].is_nan().all(), column  # one task per tenant


def test_a_tenants_recent_mean_never_uses_a_task_that_finishes_after_the_submit() -> None:
    frame = pl.DataFrame(
        {
            "task_id": ["long", "short", "probe"],
            "tenant": ["a", "a", "a"],
            "task_type": ["extract"] * 3,
            "submit_s": [0.0, 1.0, 5.0],
            "duration_s": [100.0, 2.0, 1.0],  # "long" ends at 100, after probe's submit at 5
        }
    )
    probe = with_history(frame).row(2, named=True)
    assert probe["tenant_recent_mean_s"] == 2.0
    assert probe["tenant_done_n"] == 1.0


def test_a_task_ending_exactly_at_the_submit_is_not_yet_history() -> None:
    frame = pl.DataFrame(
        {
            "task_id": ["x", "y"],
            "tenant": ["a", "a"],
            "task_type": ["embed", "embed"],
            "submit_s": [0.0, 3.0],
            "duration_s": [3.0, 1.0],
        }
    )
    assert math.isnan(with_history(frame).row(1, named=True)["tenant_recent_mean_s"])


def test_history_uses_the_recorded_end_time_when_the_frame_has_one() -> None:
    frame = pl.DataFrame(
        {
            "task_id": ["x", "y"],
            "tenant": ["a", "a"],
            "task_type": ["embed", "embed"],
            "submit_s": [0.0, 5.0],
            "duration_s": [1.0, 1.0],
            "wait_s": [10.0, 0.0],  # x queued 10 s: it ends at 11, after y's submit
        }
    )
    assert math.isnan(with_history(frame).row(1, named=True)["tenant_recent_mean_s"])
    assert with_history(frame.drop("wait_s")).row(1, named=True)["tenant_recent_mean_s"] == 1.0


def test_the_split_is_time_ordered_and_covers_every_row() -> None:
    s = Split.of(1000, 0.15, 0.15)
    assert (s.train.stop, s.valid.start, s.valid.stop, s.test.start, s.test.stop) == (
        700,
        700,
        850,
        850,
        1000,
    )


# --- training ------------------------------------------------------------------------------


def test_the_model_beats_every_baseline_on_mae_on_the_held_out_slice(trained: TrainResult) -> None:
    for name, baseline in trained.baselines.items():
        assert trained.metrics["mae_s"] < baseline["mae_s"], name
    assert trained.metrics["spearman"] > 0.9


def test_the_objective_is_the_one_with_the_lowest_valid_error(trained: TrainResult) -> None:
    assert set(trained.objectives) == set(OBJECTIVES)
    best = min(trained.objectives.values(), key=lambda o: o["valid_mae_s"])
    assert trained.objectives[trained.objective] == best


def test_the_p90_model_sits_above_the_p50_model(trained: TrainResult) -> None:
    q = trained.quantile_metrics
    assert q["p50_coverage"] < q["p90_coverage"]
    assert 0.75 < q["p90_coverage"] <= 1.0


def test_the_held_out_slice_is_the_last_tasks_by_submit_time(trained: TrainResult) -> None:
    w = trained.window
    assert w["train"]["submit_s_max"] <= w["valid"]["submit_s_min"]
    assert w["valid"]["submit_s_max"] <= w["test"]["submit_s_min"]
    assert trained.test_frame.height == w["test"]["rows"]


# --- registry --------------------------------------------------------------------------------


def test_the_promotion_rule_needs_a_strictly_lower_mae() -> None:
    assert decide(1.0, None, None).promoted
    assert decide(1.0, None, None, baseline_mae_s=1.5).promoted
    for baseline in (1.0, 0.5):  # a tie with the constant prediction is no gain either
        first = decide(1.0, None, None, baseline_mae_s=baseline)
        assert not first.promoted and "constant median prediction" in first.reason
    beaten = decide(1.0, "v0001", 2.0, baseline_mae_s=0.9)
    assert not beaten.promoted and beaten.champion_mae_s == 2.0
    assert decide(1.0, "v0001", 2.0).promoted
    tie = decide(2.0, "v0001", 2.0)
    assert not tie.promoted and "does not beat champion v0001" in tie.reason
    assert decide(9.0, "v0001", None, unscorable="it needs feature column(s) pages").promoted


MID = TrainSettings(max_rounds=10, objectives=("l2",), quantiles=())
"""Beats the constant median prediction on ``small_trace`` (MAE 9.8 s against 13.3 s) and
loses to ``FAST`` (4.3 s); ``WEAK`` (14.1 s) beats neither."""


def test_a_better_version_is_promoted_and_a_worse_one_is_kept_as_rejected_with_its_reason(
    tmp_path: Path, trained: TrainResult
) -> None:
    reg = Registry(tmp_path / "duration")
    weak = register(reg.root, train(small_trace(), WEAK), commit="abc")
    # no champion yet, and still not promoted: a constant prediction does better
    assert (weak.verdict, reg.champion()) == ("rejected", None)
    assert weak.reason.startswith("MAE ") and (
        "does not beat the constant median prediction's" in weak.reason)
    assert weak.beats_baselines["global_median"] is False

    mid = register(reg.root, train(small_trace(), MID), commit="abc")
    assert (mid.verdict, mid.reason, reg.champion()) == ("promoted", "no champion yet", "v0002")

    good = register(reg.root, trained, commit="abc")
    assert (good.verdict, reg.champion()) == ("promoted", "v0003")
    assert good.promotion.champion_before == "v0002"
    assert good.promotion.champion_mae_s is not None
    assert good.promotion.champion_mae_s > good.promotion.challenger_mae_s

    worse = register(reg.root, train(small_trace(), MID), commit="abc")
    assert worse.verdict == "rejected"
    assert "does not beat champion v0003" in worse.reason
    assert reg.champion() == "v0003"
    assert reg.versions() == ["v0001", "v0002", "v0003", "v0004"]
    card = json.loads((reg.root / "v0004" / "card.json").read_text())
    assert card["verdict"] == "rejected" and card["reason"] == worse.reason
    for name in ("model.txt", "model.so", "card.json"):
        assert (reg.root / "v0004" / name).is_file()
    # readable by a service run as another user: the umask's mode, not mkstemp's 0600
    for path in (reg.root / "CHAMPION", reg.root / "v0004" / "card.json"):
        assert path.stat().st_mode & 0o777 == 0o666 & ~_umask()


def test_two_registrations_racing_into_one_registry_are_judged_one_after_the_other(
    tmp_path: Path, trained: TrainResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each registration reads the champion, then waits (up to 2 s) for the other to have read
    # it too. Without the registry's lock both read "none", both were promoted and the last
    # pointer written won, whichever model was better; with it the second waits for the first.
    import threading

    from desched.models import promotion

    mid = train(small_trace(), MID)
    both_read = threading.Barrier(2, timeout=2.0)
    read_champion = promotion._current_champion

    def slow_read(reg: Registry) -> str | None:
        champion = read_champion(reg)
        try:
            both_read.wait()
        except threading.BrokenBarrierError:
            pass
        return champion

    monkeypatch.setattr(promotion, "_current_champion", slow_read)
    cards = {}

    def run(name: str, result: TrainResult) -> None:
        cards[name] = register(tmp_path / "duration", result, commit="abc", compile_model=False)

    threads = [threading.Thread(target=run, args=a) for a in (("mid", mid), ("good", trained))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert sorted(c.reason == "no champion yet" for c in cards.values()) == [False, True]
    good, champion = cards["good"], Registry(tmp_path / "duration").champion()
    assert good.verdict == "promoted" and champion == good.version
    assert cards["mid"].verdict == ("promoted" if cards["mid"].version < good.version
                                    else "rejected")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_the_card_records_features_window_metrics_baselines_and_commit(
    tmp_path: Path, trained: TrainResult
) -> None:
    card = register(tmp_path / "r", trained, commit="deadbeef")
    tenants = card.features.categories["tenant"]
    assert tenants == sorted(tenants) == trained.spec.categories["tenant"]
    assert card.features.size_features == ["doc_bytes", "pages"]
    assert set(card.baselines) == {"global_median", "tenant_type_mean", "tenant_last2_mean"}
    assert all(card.beats_baselines.values())
    assert card.git_commit == "deadbeef"
    assert card.data_window.heldout_fingerprint
    assert card.training_time_s > 0 and set(card.files) == {"model", "compiled", "p50", "p90"}


def test_a_champion_that_cannot_score_the_new_slice_is_replaced_with_the_reason(
    tmp_path: Path, trained: TrainResult
) -> None:
    register(tmp_path / "r", trained, commit="x")
    other = small_trace(1500, seed=3).drop("doc_bytes", "pages")
    card = register(tmp_path / "r", train(other, FAST), commit="x")
    assert card.verdict == "promoted"
    assert "cannot score" in card.reason and "doc_bytes" in card.reason


# --- flow ------------------------------------------------------------------------------------


def test_the_retrain_flow_registers_a_version_and_publishes_its_report(
    prefect_harness: None, tmp_path: Path
) -> None:
    from prefect.artifacts import Artifact

    from desched.flows.retrain import retrain_duration_model

    trace = write_trace(small_trace(1500, seed=11), tmp_path / "trace.parquet")
    out = retrain_duration_model(trace=str(trace), registry=str(tmp_path / "reg"), max_rounds=60)
    assert out.verdict == "promoted" and out.version == "v0001"
    report = Artifact.get("duration-model-report")
    assert (
        report is not None
        and "v0001" in str(report.data)
        and "tenant_last2_mean" in str(report.data)
    )


def test_the_training_data_loader_reads_the_warehouse_completions(tmp_path: Path) -> None:
    import duckdb

    from desched.tasks.retrain import load_training_data

    trace = small_trace(800, seed=5)
    completions = trace.with_columns(
        (pl.col("submit_s") + pl.col("duration_s") + 3.0).alias("t"), pl.lit("ok").alias("status")
    )
    failed = completions.head(2).with_columns(
        pl.format("f{}", pl.col("task_id")).alias("task_id"), pl.lit("failed").alias("status")
    )
    db = tmp_path / "warehouse.duckdb"
    with duckdb.connect(str(db)) as con:
        con.register("c", pl.concat([completions, failed]).to_arrow())
        con.execute("CREATE TABLE completions AS SELECT * FROM c")
    frame = load_training_data.fn(db=str(db))
    assert frame.height == 800 and "end_s" in frame.columns
    assert train(frame, WEAK).window["rows"] == 800


# --- CLI -------------------------------------------------------------------------------------


def test_predict_reads_an_swf_log_as_simulate_and_train_do(tmp_path: Path) -> None:
    # `simulate` sends a user with an SWF log to `desched predict`, which took only Parquet
    # (a QA pass): it imports the log as `import-swf` does, and never writes over it
    from desched.swf import import_swf
    from tests.test_judge import write_swf

    runner = CliRunner()
    log = write_swf(tmp_path / "small.swf", 400, 5)
    reg = tmp_path / "models" / "duration"
    res = runner.invoke(cli, ["train", "--trace", str(log), "--registry", str(reg),
                              "--max-rounds", "30"])
    assert res.exit_code == 0, res.output
    parquet = write_trace(import_swf(log)[0], tmp_path / "imported.parquet")
    outs = {}
    for name, source in (("from-swf", log), ("from-parquet", parquet)):
        outs[name] = tmp_path / f"{name}.parquet"
        res = runner.invoke(cli, ["predict", "--registry", str(reg), "--trace", str(source),
                                  "--out", str(outs[name])])
        assert res.exit_code == 0, res.output
    a, b = (pl.read_parquet(outs[k]) for k in ("from-swf", "from-parquet"))
    assert a.height == 400 and a.equals(b)
    res = runner.invoke(cli, ["predict", "--registry", str(reg), "--trace", str(log),
                              "--out", str(log)])
    assert res.exit_code == 2 and "the SWF log itself" in res.output
    assert log.read_text().startswith("; synthetic log")


def test_the_cli_trains_predicts_and_lists_models_end_to_end(tmp_path: Path) -> None:
    runner = CliRunner()
    trace = write_trace(small_trace(1500, seed=13), tmp_path / "trace.parquet")
    reg = tmp_path / "models" / "duration"
    res = runner.invoke(
        cli, ["train", "--trace", str(trace), "--registry", str(reg), "--max-rounds", "60"]
    )
    assert res.exit_code == 0, res.output
    assert res.output.startswith("v0001 promoted")
    out = tmp_path / "predicted.parquet"
    res = runner.invoke(
        cli, ["predict", "--registry", str(reg), "--trace", str(trace), "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    written = pl.read_parquet(out)
    predicted = written["predicted_s"].to_numpy()
    assert predicted.shape == (1500,) and np.all(predicted > 0)
    # the quantile labels the Boost policies read, from the models trained beside it
    import lightgbm as lgb

    from desched.models.duration import Predictor

    x = Predictor.load(reg).features_of(pl.read_parquet(trace))
    for key in ("p50", "p90"):
        booster = lgb.Booster(model_file=str(reg / "v0001" / f"{key}.txt"))
        np.testing.assert_allclose(written[f"predicted_{key}_s"].to_numpy(),
                                   np.maximum(np.exp(booster.predict(x)), 1e-6), rtol=1e-9)
    assert "predicted_s, predicted_p50_s, predicted_p90_s" in res.output
    assert "note:" not in res.stderr  # every feature there, every tenant known
    res = runner.invoke(cli, ["models", "--registry", str(reg), "--json"])
    rows = json.loads(res.output)
    assert [(r["version"], r["champion"]) for r in rows] == [("v0001", True)]
    assert "v0001" in runner.invoke(cli, ["models", "--registry", str(reg)]).output
    # a trace without the size features the model read, from tenants it never saw: said
    bare = write_trace(small_trace(50, seed=3).drop("doc_bytes", "pages").with_columns(
        pl.concat_str(pl.lit("new-"), pl.col("tenant")).alias("tenant")), tmp_path / "bare.parquet")
    res = runner.invoke(cli, ["predict", "--registry", str(reg), "--trace", str(bare),
                              "--out", str(tmp_path / "bare-out.parquet")])
    assert res.exit_code == 0, res.output
    assert f"note: {bare} lacks the model's size feature(s) doc_bytes, pages" in res.stderr
    assert f"note: no tenant of {bare} was in v0001's training data" in res.stderr
    # predictions the trace already holds are replaced, whatever they are (a trace with null
    # or negative predictions, refused by simulate, which sends the user here: a QA pass)
    stale = write_trace(pl.read_parquet(trace), tmp_path / "stale.parquet")
    pl.read_parquet(stale).with_columns(
        pl.lit(None, pl.Float64).alias("predicted_s"), pl.lit(-1.0).alias("predicted_p90_s"),
    ).write_parquet(stale)
    res = runner.invoke(cli, ["predict", "--registry", str(reg), "--trace", str(stale),
                              "--out", str(stale)])
    assert res.exit_code == 0, res.output
    assert pl.read_parquet(stale).select(sorted(written.columns)).equals(
        written.select(sorted(written.columns)))
    # but never over a file that is not a trace (it had replaced any file: a QA pass)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    res = runner.invoke(cli, ["predict", "--registry", str(reg), "--trace", str(trace),
                              "--out", str(notes)])
    assert res.exit_code == 2 and "not a Parquet trace" in res.output
    assert notes.read_text() == "mine"


def test_the_cli_gives_one_line_errors_for_bad_arguments_and_missing_models(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["train", "--registry", str(tmp_path)])
    assert res.exit_code == 2 and "exactly one of --warehouse" in res.output
    trace = write_trace(small_trace(300, seed=1), tmp_path / "t.parquet")
    (tmp_path / "none").mkdir()  # a registry folder without a model (a missing one: see below)
    res = runner.invoke(
        cli,
        [
            "predict",
            "--registry",
            str(tmp_path / "none"),
            "--trace",
            str(trace),
            "--out",
            str(tmp_path / "o.parquet"),
        ],
    )
    assert res.exit_code == 2 and "no champion model" in res.output
    res = runner.invoke(cli, ["models", "--registry", str(tmp_path / "typo")])
    assert res.exit_code == 2 and "--registry" in res.output and "does not exist" in res.output
    for command in ("train", "predict", "models"):
        assert runner.invoke(cli, [command, "--help"]).exit_code == 0


# --- one model per workload of the warehouse ---------------------------------------------------


def _warehouse(path: Path, logs: dict[str, pl.DataFrame]) -> Path:
    """A warehouse whose ``completions`` hold each trace as logged by the file named."""
    import duckdb

    frames = [
        trace.with_columns(
            pl.lit(source).alias("source"),
            (pl.col("submit_s") + pl.col("duration_s") + 1.0).alias("t"),
            pl.lit("ok").alias("status"),
        )
        for source, trace in logs.items()
    ]
    with duckdb.connect(str(path)) as con:
        con.register("c", pl.concat(frames, how="diagonal_relaxed").to_arrow())
        con.execute("CREATE TABLE completions AS SELECT * FROM c")
    return path


def test_workloads_are_the_folders_of_the_log_files_and_keys_are_stable_names(
    tmp_path: Path,
) -> None:
    from desched.models.training import load_warehouse_workloads, workload_key, workload_keys

    steady, flood = small_trace(300, seed=1), generate("flood", tasks=200, tenants=5, seed=2)
    day2 = small_trace(100, seed=3).with_columns(pl.format("d2-{}", pl.col("task_id")).alias("task_id"))
    db = _warehouse(tmp_path / "w.duckdb", {
        str(tmp_path / "logs/svc/decision-log-20261201.jsonl"): steady,
        str(tmp_path / "logs/svc/decision-log-20261202.jsonl"): day2,
        str(tmp_path / "runs/flood/decision-log.parquet"): flood,
    })
    workloads = load_warehouse_workloads(db)
    assert {k: v.height for k, v in workloads.items()} == {
        str(tmp_path / "logs/svc"): 400, str(tmp_path / "runs/flood"): 200}
    assert workload_key(str(tmp_path / "runs/flood")) == "runs-flood"
    assert workload_key("/elsewhere/Data/My Logs") == "data-my-logs"
    assert workload_key("logs") == "logs" and workload_key("/") == "workload"
    # the last two components, more where two folders would share a name; never the
    # directory the trainer runs in (three directories made three registries before)
    assert workload_keys(["/a/x/logs", "/b/x/logs", "/c/y/runs"]) == {
        "/a/x/logs": "a-x-logs", "/b/x/logs": "b-x-logs", "/c/y/runs": "y-runs"}
    assert workload_keys(["a/b", "/a/b"]) == {"a/b": "a-b-1", "/a/b": "a-b-2"}


def test_the_nightly_retrain_fits_one_model_per_workload_and_skips_a_small_one(
    prefect_harness: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from prefect.artifacts import Artifact

    from desched.flows.retrain import retrain_duration_model

    monkeypatch.chdir(tmp_path)
    steady = small_trace(1500, seed=11)
    heavy = generate("heavy-tail", tasks=1500, tenants=6, seed=4)
    db = _warehouse(tmp_path / "w.duckdb", {
        str(tmp_path / "logs/steady/decision-log.parquet"): steady,
        str(tmp_path / "logs/heavy/decision-log.parquet"): heavy,
        str(tmp_path / "logs/new/decision-log.parquet"): small_trace(50, seed=2),
    })
    out = retrain_duration_model(db=str(db), registry="reg", max_rounds=60)
    assert out.trained == 2 and out.nothing_to_train is None
    by_key = out.workloads
    assert by_key["logs-new"].skipped.startswith("50 completions")
    for key, trace in (("logs-steady", steady), ("logs-heavy", heavy)):
        assert by_key[key].version == "v0001" and by_key[key].verdict == "promoted"
        card = json.loads((tmp_path / "reg" / key / "v0001" / "card.json").read_text())
        # the model saw this workload's tasks and no other's
        assert card["data_window"]["rows"] == trace.height
        assert card["data_window"]["source"] == f"{db}:{tmp_path / 'logs' / key[5:]}"
        report = Artifact.get(f"duration-model-report-{key}")
        assert report is not None and "v0001" in str(report.data)
    assert not (tmp_path / "reg" / "logs-new").exists()


def test_the_nightly_retrain_on_a_fresh_setup_completes_with_nothing_to_train(
    prefect_harness: None, tmp_path: Path
) -> None:
    from desched.flows.enrich import retrain_memory_model
    from desched.flows.retrain import retrain_duration_model
    from desched.tasks.enrich import NothingToTrain
    from desched.warehouse.schema import open_warehouse

    missing = str(tmp_path / "none.duckdb")
    state = retrain_duration_model(db=missing, registry=str(tmp_path / "r"), return_state=True)
    assert state.is_completed(), state.message
    assert "no warehouse" in state.result().nothing_to_train
    empty = tmp_path / "empty.duckdb"
    open_warehouse(empty).close()  # what the first ingest-logs run leaves: tables, no rows
    out = retrain_duration_model(db=str(empty), registry=str(tmp_path / "r"))
    assert out.trained == 0 and "no successful completion" in out.nothing_to_train
    for db in (missing, str(empty)):
        state = retrain_memory_model(db_path=db, out=str(tmp_path / "m"), return_state=True)
        assert state.is_completed(), state.message
        assert isinstance(state.result(), NothingToTrain)
    assert not (tmp_path / "r").exists() and not (tmp_path / "m").exists()


def test_the_train_command_on_a_warehouse_trains_each_workload_into_its_own_registry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    db = _warehouse(tmp_path / "w.duckdb", {
        str(tmp_path / "runs/a/decision-log.parquet"): small_trace(400, seed=1),
        str(tmp_path / "runs/b/decision-log.parquet"): generate("flood", tasks=300, seed=2),
        str(tmp_path / "runs/c/decision-log.parquet"): small_trace(12, seed=3),
    })
    res = CliRunner().invoke(
        cli, ["train", "--warehouse", str(db), "--registry", "reg", "--max-rounds", "10"]
    )
    # the workload too small to train is skipped and said so; it aborted the others before
    assert res.exit_code == 0, res.output
    assert "runs-a: v0001 promoted" in res.stdout and "runs-b: v0001 promoted" in res.stdout
    assert "runs-c: skipped (" in res.stderr and "12 tasks, too few to train" in res.stderr
    assert not (tmp_path / "reg" / "runs-c").exists()
    rows = {k: json.loads((tmp_path / "reg" / k / "v0001" / "card.json").read_text())
            ["data_window"]["rows"] for k in ("runs-a", "runs-b")}
    assert rows == {"runs-a": 400, "runs-b": 300}
    # run from elsewhere: the same registries (the folder names came from the directory)
    monkeypatch.chdir(tmp_path / "reg")
    again = CliRunner().invoke(cli, ["train", "--warehouse", str(db), "--registry",
                                     str(tmp_path / "reg"), "--max-rounds", "10"])
    assert again.exit_code == 0, again.output
    assert "runs-a: v0002 rejected" in again.stdout
    assert sorted(p.name for p in (tmp_path / "reg").iterdir()) == ["runs-a", "runs-b"]


def test_lightgbm_is_imported_without_scikit_learn_which_stays_importable() -> None:
    # A fresh interpreter: the model layer's LightGBM import leaves scikit-learn out (a second
    # of CPU per process), fits and predicts, and scikit-learn imports afterwards as usual.
    import subprocess
    import sys

    code = """
import sys
import numpy as np
from desched.models.gbm import import_lightgbm
lgb = import_lightgbm()
assert "sklearn" not in sys.modules, "scikit-learn was imported"
assert import_lightgbm() is lgb is sys.modules["lightgbm"]
x = np.arange(200, dtype=float).reshape(100, 2)
booster = lgb.train({"verbose": -1, "min_data_in_leaf": 5}, lgb.Dataset(x, x[:, 0]),
                    num_boost_round=5)
assert booster.predict(x).shape == (100,)
import sklearn.base
print("ok", sklearn.base.__name__)
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=False, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["ok", "sklearn.base"]
