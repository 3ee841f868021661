"""Quiet by default: results on stdout, library logs only with -v; tables render with rich on a
terminal and stay plain markdown when piped; one markdown-table helper, numpy percentiles."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from desched.tables import markdown_table, table_lines
from desched.trace import write_trace
from tests.builders import T, make_frame

ROOT = Path(__file__).resolve().parents[1]
LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d+ \| (INFO|DEBUG) ", re.MULTILINE)


def desched(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    environ.pop("PREFECT_LOGGING_LEVEL", None)
    return subprocess.run([sys.executable, "-m", "desched.cli", *map(str, args)],
                          capture_output=True, text=True, env=environ, timeout=600, cwd=ROOT,
                          check=False)


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    from tests.test_ingest import simulated_log

    simulated_log(tmp_path / "logs" / "run1")
    return tmp_path / "logs"


def test_ingest_prints_its_result_on_stdout_and_no_library_info_logs(logs, tmp_path):
    result = desched("ingest", "--logs", logs, "--warehouse", tmp_path / "w.duckdb")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0].startswith("1 of 4 files read; 12 rows loaded")
    assert not LOG_LINE.search(result.stderr), result.stderr
    assert "Traceback" not in result.stderr, result.stderr


def test_verbose_lets_prefect_and_great_expectations_info_through(logs, tmp_path):
    result = desched("-v", "ingest", "--logs", logs, "--warehouse", tmp_path / "w.duckdb")
    assert result.returncode == 0, result.stderr
    infos = LOG_LINE.findall(result.stderr)
    assert infos, result.stderr
    assert "Beginning flow run" in result.stderr and "great_expectations" in result.stderr
    assert result.stdout.splitlines()[0].startswith("1 of 4 files read")


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    frame = make_frame(T("a", 0, 3), T("a", 0, 2), T("b", 1, 1), T("b", 5, 2), T("c", 5, 1))
    return write_trace(frame, tmp_path / "trace.parquet")


def test_a_table_stays_plain_markdown_when_piped(trace, tmp_path):
    result = desched("compare", "--trace", trace, "--policies", "fifo,vtc", "--workers", 1,
                     "--out", tmp_path / "c")
    assert result.returncode == 0, result.stderr
    assert "| policy | mean wait s |" in result.stdout and "|---|---:|" in result.stdout
    assert "\x1b[" not in result.stdout and "─" not in result.stdout


def test_a_table_renders_with_rich_on_a_terminal(trace, tmp_path):
    pty = pytest.importorskip("pty")
    master, slave = pty.openpty()
    environ = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "160", "TERM": "xterm"}
    environ.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "desched.cli", "compare", "--trace", str(trace), "--policies",
         "fifo,vtc", "--workers", "1", "--out", str(tmp_path / "c")],
        stdout=slave, stderr=subprocess.DEVNULL, env=environ, cwd=ROOT)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=300)
    os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, text
    assert "─" in text and "policy" in text and "fifo" in text
    assert "|---" not in text


def test_the_markdown_table_helper_aligns_escapes_and_refuses_a_ragged_row():
    text = markdown_table(["name", "n"], [["a|b", 1], ["c", 2.5]], "lr")
    assert text.splitlines() == ["| name | n |", "|---|---:|", "| a\\|b | 1 |", "| c | 2.5 |"]
    with pytest.raises(ValueError, match="2 cells"):
        table_lines(["x"], [["a", "b"]])
    with pytest.raises(ValueError, match="align"):
        table_lines(["x", "y"], [], "l")


def test_no_module_builds_a_markdown_table_by_hand():
    pattern = re.compile(r"\"\|(\s*-{3}:?\s*\|)+\"|\"\|\" \+ \"---\|\"")
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted((ROOT / "desched").rglob("*.py")) if path.name != "tables.py"
        for n, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)
    ]
    assert offenders == []


def test_the_live_demo_tenant_table_takes_its_p99_from_numpy(tmp_path):
    from desched.cli.live import _tenant_table

    db = tmp_path / "s.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE tasks (tenant TEXT, state TEXT, submit_s REAL, start_s REAL)")
    waits = [float(w) for w in range(1, 38)]
    con.executemany("INSERT INTO tasks VALUES ('a', 'done', 0, ?)", [(w,) for w in waits])
    con.commit()
    con.close()
    [(tenant, n, done, mean, p99, worst)] = _tenant_table(db)
    assert (tenant, n, done, worst) == ("a", 37, 37, 37.0)
    assert p99 == pytest.approx(float(np.percentile(waits, 99)))
    assert mean == pytest.approx(float(np.mean(waits)))


def test_simulate_exits_without_teardown_after_writing_and_printing_everything(tmp_path):
    """``desched simulate`` ends its process without the interpreter's teardown
    (``exit_without_teardown``): its line still reaches a pipe, every file is complete, and
    an in-process ``main(argv)`` still raises ``SystemExit`` as usual."""
    from desched.cli import main

    trace = tmp_path / "t.parquet"
    write_trace(make_frame(*(T(tenant="ab"[i % 2], submit_s=i / 4, duration_s=1.0)
                             for i in range(40))), trace)
    result = desched("simulate", "--trace", trace, "--policy", "vtc", "--workers", "2",
                     "--out", tmp_path / "run")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"{tmp_path / 'run'}: 40 tasks, mean wait "), result.stdout
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["tasks"] == 40
    import polars as pl

    assert pl.read_parquet(tmp_path / "run" / "decision-log.parquet").height == 80
    with pytest.raises(SystemExit) as exit_:
        main(["simulate", "--trace", str(trace), "--policy", "vtc", "--workers", "2",
              "--out", str(tmp_path / "again")])
    assert exit_.value.code == 0
    assert (tmp_path / "again" / "summary.json").exists()
