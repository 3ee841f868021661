"""Empty and tiny inputs: a zero-row or one-row trace gets a one-line answer from every
command, an error naming the file or a result that says what it holds, never a traceback."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner, Result

from desched.cli import cli

ROW = {"task_id": "t0", "tenant": "a", "task_type": "extract", "submit_s": 0.0, "duration_s": 2.0}


@pytest.fixture
def traces(tmp_path: Path) -> dict[str, Path]:
    one = pl.DataFrame([ROW])
    paths = {"zero": tmp_path / "zero.parquet", "one": tmp_path / "one.parquet"}
    one.head(0).write_parquet(paths["zero"])
    one.write_parquet(paths["one"])
    return paths


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_line_error(result: Result, *words: str) -> str:
    """The single line of a refused command, checked: exit 2, no traceback, names ``words``."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith("error: "), lines[0]
    for word in words:
        assert word in lines[0], (word, lines[0])
    return lines[0]


def test_simulate_refuses_a_zero_row_trace_naming_it(traces, tmp_path):
    line = one_line_error(run("simulate", "--trace", traces["zero"], "--policy", "fifo",
                              "--workers", 2, "--out", tmp_path / "run"), str(traces["zero"]))
    assert "no tasks (0 rows)" in line


def test_simulate_runs_a_one_row_trace(traces, tmp_path):
    result = run("simulate", "--trace", traces["one"], "--policy", "fifo", "--workers", 2,
                 "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert "1 tasks, mean wait 0.0 s" in result.output


def test_compare_refuses_a_zero_row_trace_and_runs_a_one_row_one(traces, tmp_path):
    one_line_error(run("compare", "--trace", traces["zero"], "--policies", "fifo,vtc",
                       "--workers", 2, "--out", tmp_path / "c0"), str(traces["zero"]), "0 rows")
    ok = run("compare", "--trace", traces["one"], "--policies", "fifo,vtc", "--workers", 2,
             "--out", tmp_path / "c1")
    assert ok.exit_code == 0, ok.output
    assert (tmp_path / "c1" / "compare.json").is_file()


def test_evaluate_refuses_a_zero_row_trace(traces, tmp_path):
    one_line_error(run("evaluate", "--traces", traces["zero"], "--policies", "fifo",
                       "--workers", 2, "--out", tmp_path / "e"), str(traces["zero"]), "0 rows")


def test_evaluate_on_a_one_row_trace_names_the_seeds_it_has_then_runs_with_them(
    traces, tmp_path
):
    line = one_line_error(run("evaluate", "--traces", traces["one"], "--policies", "fifo",
                              "--workers", 2, "--out", tmp_path / "e"), str(traces["one"]))
    assert "give seeds up to 0 (e.g. 0-0)" in line and "slice_tasks=N" in line
    ok = run("evaluate", "--traces", traces["one"], "--policies", "fifo", "--workers", 2,
             "--seeds", "0", "--out", tmp_path / "e")
    assert ok.exit_code == 0, ok.output
    assert "1 simulations" in ok.output


def test_train_refuses_a_zero_row_and_a_one_row_trace_naming_it(traces, tmp_path):
    one_line_error(run("train", "--trace", traces["zero"], "--registry", tmp_path / "r"),
                   str(traces["zero"]), "0 rows")
    line = one_line_error(run("train", "--trace", traces["one"], "--registry", tmp_path / "r"),
                          str(traces["one"]), "1 tasks, too few to train")
    assert "need at least" in line


def test_predict_refuses_a_zero_row_trace_before_it_needs_a_model(traces, tmp_path):
    one_line_error(run("predict", "--trace", traces["zero"], "--registry", tmp_path / "none",
                       "--out", tmp_path / "p.parquet"), str(traces["zero"]), "0 rows")


def test_predict_on_a_one_row_trace_writes_one_prediction(traces, tmp_path):
    bigger = pl.DataFrame([{**ROW, "task_id": f"t{i}", "duration_s": 1.0 + i % 7,
                            "submit_s": float(i)} for i in range(60)])
    bigger.write_parquet(tmp_path / "sixty.parquet")
    trained = run("train", "--trace", tmp_path / "sixty.parquet", "--registry", tmp_path / "r",
                  "--max-rounds", 5)
    assert trained.exit_code == 0, trained.output
    result = run("predict", "--trace", traces["one"], "--registry", tmp_path / "r",
                 "--out", tmp_path / "p.parquet")
    assert result.exit_code == 0, result.output
    assert "1 predictions" in result.output
    assert pl.read_parquet(tmp_path / "p.parquet")["predicted_s"].len() == 1


def test_tune_refuses_a_zero_row_trace_and_names_real_options_for_a_one_row_one(
    traces, tmp_path
):
    one_line_error(run("tune", "--trace", traces["zero"], "--workers", 2, "--out",
                       tmp_path / "w"), str(traces["zero"]), "0 rows")
    line = one_line_error(run("tune", "--trace", traces["one"], "--workers", 2, "--out",
                              tmp_path / "w"), str(traces["one"]))
    # every option the error names exists on the command
    assert "slice_tasks=N" in line and "--train-seeds" in line and "--heldout-seeds" in line
    help_text = run("tune", "--help").output
    assert "--train-seeds" in help_text and "--heldout-seeds" in help_text


def test_import_swf_refuses_an_empty_log_and_imports_a_one_job_log(tmp_path):
    empty = tmp_path / "empty.swf"
    empty.write_text("; UnixStartTime: 0\n")
    one_line_error(run("import-swf", empty, "--out", tmp_path / "e.parquet"), str(empty),
                   "no usable job")
    one = tmp_path / "one.swf"
    one.write_text("1 0 5 10 1 -1 -1 1 20 -1 1 3 1 1 1 -1 -1 -1\n")
    ok = run("import-swf", one, "--out", tmp_path / "o.parquet")
    assert ok.exit_code == 0, ok.output
    assert "kept 1" in ok.output and pl.read_parquet(tmp_path / "o.parquet").height == 1


def test_ingest_of_a_zero_row_log_says_it_loaded_nothing(prefect_harness, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    pl.DataFrame(schema={"kind": pl.String, "seq": pl.Int64, "t": pl.Float64,
                         "worker": pl.Int64, "task_id": pl.String, "tenant": pl.String}
                 ).write_parquet(logs / "decision-log.parquet")
    result = run("ingest", "--logs", logs, "--warehouse", tmp_path / "w.duckdb")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("1 of 1 files read; 0 rows loaded"), lines
