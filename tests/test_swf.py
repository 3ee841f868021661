"""SWF import: fields mapped as specified, every dropped job counted by its reason."""

from __future__ import annotations

import dataclasses
import gzip
from pathlib import Path

import polars as pl
import pytest

from desched.errors import DeschedError
from desched.swf import SwfReport, import_swf, is_swf, log_stem, read_trace_or_swf
from desched.trace import validate_trace
from tests.conftest import SAMPLES

TRACES = SAMPLES / "traces"

# Fields: job submit wait run procs cpu mem req_procs req_time req_mem status user group exe
# queue partition preceding think.
SMALL_SWF = """\
; Version: 2.2
; Computer: a hand-written test machine
;
  1  100  5  60   4  55.5  2048   4  120 -1  1   7  3  12  2  1 -1 -1
  2  130  0  -1   8  -1    -1     8  600 -1  5   7  3  12  2  1 -1 -1
  3  140  1   0   2  -1    -1     2   60 -1  0   8  3  -1  2  1 -1 -1

  4  150  2  30  16  -1    -1    -1   -1 -1  1   8 -1  -1  4  1 -1 -1
  5  160  2  45  -1  -1    -1    -1   60 -1 -1  -1 -1  -1 -1  1 -1 -1
  6  170  2  10   1  -1    -1     1   60 -1  1   9  3  12
  7  180  2  x1   1  -1    -1     1   60 -1  1   9  3  12  2  1 -1 -1
  4  190  2  20   1  -1    -1     1   60 -1  1   9  3  12  2  1 -1 -1
  8  200  2  15   3.5 -1   -1     1   60 -1  1   9  3  12  2  1 -1 -1
  9   -1  2  15   1  -1    -1     1   60 -1  1   9  3  12  2  1 -1 -1
; a trailing comment
"""


def write_swf(tmp_path: Path, text: str = SMALL_SWF, *, gz: bool = False) -> Path:
    path = tmp_path / ("small.swf.gz" if gz else "small.swf")
    data = text.encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


@pytest.fixture(params=[False, True], ids=["plain", "gzip"])
def small(tmp_path: Path, request: pytest.FixtureRequest) -> tuple[pl.DataFrame, SwfReport]:
    return import_swf(write_swf(tmp_path, gz=request.param))


def test_every_job_line_is_kept_or_dropped_for_a_counted_reason(small) -> None:
    _, report = small
    assert report.lines_read == 15
    assert report.header_lines == 4
    assert report.blank_lines == 1
    assert report.job_lines == 10
    assert report.jobs_kept == 3
    assert report.dropped == {
        "malformed": 3,
        "no submit time": 1,
        "no run time": 1,
        "zero run time": 1,
        "out of range": 0,
        "duplicate job": 1,
    }
    assert report.jobs_kept + report.dropped_total == report.job_lines


def test_the_summary_is_one_line_naming_the_file_and_every_reason(small) -> None:
    _, report = small
    line = report.summary()
    assert "\n" not in line and "small.swf" in line
    assert "kept 3, dropped 7" in line
    assert "malformed 3" in line and "zero run time 1" in line and "no run time 1" in line


def test_the_report_is_frozen(small) -> None:
    _, report = small
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.jobs_kept = 0  # type: ignore[misc]


def test_fields_map_to_trace_columns_as_specified(small) -> None:
    frame, _ = small
    assert validate_trace(frame).equals(frame)
    assert frame.to_dicts() == [
        {
            "task_id": "j1", "tenant": "u7", "task_type": "app12", "submit_s": 0.0,
            "duration_s": 60.0, "req_procs": 4, "req_time_s": 120.0, "procs": 4,
            "used_mem_kb": 2048.0, "group": "g3", "status": 1, "swf_wait_s": 5.0,
        },
        {
            "task_id": "j4", "tenant": "u8", "task_type": "q4", "submit_s": 50.0,
            "duration_s": 30.0, "req_procs": 16, "req_time_s": None, "procs": 16,
            "used_mem_kb": None, "group": None, "status": 1, "swf_wait_s": 2.0,
        },
        {
            "task_id": "j5", "tenant": "unknown", "task_type": "unknown", "submit_s": 60.0,
            "duration_s": 45.0, "req_procs": None, "req_time_s": 60.0, "procs": None,
            "used_mem_kb": None, "group": None, "status": None, "swf_wait_s": 2.0,
        },
    ]  # fmt: skip


def test_submit_times_start_at_zero_from_the_first_kept_job(tmp_path: Path) -> None:
    text = "\n".join(SMALL_SWF.splitlines()[4:])  # job 1 gone: job 4 at 150 is the first kept
    frame, report = import_swf(write_swf(tmp_path, text))
    assert report.jobs_kept == 2
    assert frame["submit_s"].to_list() == [0.0, 10.0]


def test_rows_come_in_submit_order(tmp_path: Path) -> None:
    text = (
        "1 200 0 10 1 -1 -1 1 60 -1 1 1 1 1 1 1 -1 -1\n"
        "2 100 0 10 1 -1 -1 1 60 -1 1 1 1 1 1 1 -1 -1\n"
        "3 200 0 10 1 -1 -1 1 60 -1 1 2 1 1 1 1 -1 -1\n"
    )
    frame, _ = import_swf(write_swf(tmp_path, text))
    assert frame["task_id"].to_list() == ["j2", "j1", "j3"]


def test_a_missing_file_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(DeschedError, match="nope.swf"):
        import_swf(tmp_path / "nope.swf")


def test_a_corrupt_gzip_file_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "broken.swf.gz"
    path.write_bytes(gzip.compress(SMALL_SWF.encode())[:40])
    with pytest.raises(DeschedError, match="broken.swf.gz"):
        import_swf(path)


def test_a_file_without_a_usable_job_is_refused_with_its_counts(tmp_path: Path) -> None:
    path = write_swf(tmp_path, "; only a header\n1 0 0 0 1 -1 -1 1 1 -1 1 1 1 1 1 1 -1 -1\n")
    with pytest.raises(DeschedError, match="small.swf.*zero run time 1"):
        import_swf(path)


def jobs_in(path: Path) -> int:
    with gzip.open(path, "rt", encoding="latin-1") as lines:
        return sum(1 for line in lines if line.strip() and not line.lstrip().startswith(";"))


@pytest.mark.parametrize(
    "name, at_least",
    [("LANL-CM5-1994-4.1-cln.swf.gz", 40_000), ("LLNL-Atlas-2006-2.1-cln.swf.gz", 30_000)],
)
def test_the_real_logs_import_with_every_job_accounted_for(name: str, at_least: int) -> None:
    path = TRACES / name
    if not path.exists():
        pytest.skip(f"{path} is not present")
    frame, report = import_swf(path)
    assert report.jobs_kept + report.dropped_total == jobs_in(path)
    assert report.jobs_kept == frame.height > at_least
    assert report.dropped_malformed == 0
    assert frame["submit_s"].min() == 0.0
    assert frame["task_id"].n_unique() == frame.height
    assert frame["tenant"].n_unique() > 100


def test_every_dropped_job_is_quarantined_with_its_line_reason_and_text(small) -> None:
    _, report = small
    rejected = report.rejected
    assert rejected.columns == ["line", "reason", "text"]
    assert rejected.select("line", "reason").rows() == [
        (5, "no run time"),
        (6, "zero run time"),
        (10, "malformed"),
        (11, "malformed"),
        (12, "duplicate job"),
        (13, "malformed"),
        (14, "no submit time"),
    ]
    assert rejected["text"][0] == SMALL_SWF.splitlines()[4]  # line 5: job 2, run time -1
    counts = dict(rejected["reason"].value_counts().iter_rows())
    assert counts == {reason: n for reason, n in report.dropped.items() if n}


def test_import_swf_writes_the_quarantine_when_asked(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from desched.cli import cli

    rejected = tmp_path / "q" / "rejected.parquet"
    res = CliRunner().invoke(
        cli,
        ["import-swf", str(write_swf(tmp_path)), "--out", str(tmp_path / "t.parquet"),
         "--rejected", str(rejected)],
        catch_exceptions=False,
    )
    assert res.exit_code == 0, res.output
    assert "7 dropped jobs" in res.output
    frame = pl.read_parquet(rejected)
    assert frame.height == 7
    assert frame.filter(pl.col("reason") == "duplicate job")["text"].str.contains("190").all()


def test_a_job_past_the_largest_time_is_dropped_and_counted_not_the_whole_log(
    tmp_path: Path,
) -> None:
    line = "  {job} {submit} 0 {run} 1 -1 -1 1 60 -1 1 7 3 12 2 1 -1 -1\n"
    text = "".join((line.format(job=1, submit=100, run=60),
                    line.format(job=2, submit="2e12", run=60),
                    line.format(job=3, submit=130, run="1e13"),
                    line.format(job=4, submit=140, run=30)))
    frame, report = import_swf(write_swf(tmp_path, text))
    assert frame["task_id"].to_list() == ["j1", "j4"]
    assert report.dropped["out of range"] == 2
    assert report.rejected.select("line", "reason").rows() == [(2, "out of range"),
                                                                (3, "out of range")]
    assert "out of range 2" in report.summary()


def test_an_id_too_large_to_hold_exactly_is_a_malformed_line_not_an_error(tmp_path: Path) -> None:
    # A user id of 1e20 failed the whole import with polars' "conversion from f64 to i64
    # failed"; two ids past 2^53 could round to one (a QA pass).
    line = "  {job} {submit} 0 60 1 -1 -1 1 60 -1 1 {user} 3 12 2 1 -1 -1\n"
    text = "".join((line.format(job=1, submit=100, user=7),
                    line.format(job=2, submit=110, user="99999999999999999999"),
                    line.format(job=3, submit=120, user=2**53 + 1),
                    line.format(job="18446744073709551617", submit=125, user=7),
                    line.format(job=4, submit=130, user=2**53 - 1)))
    frame, report = import_swf(write_swf(tmp_path, text))
    assert frame["task_id"].to_list() == ["j1", "j4"]
    assert report.rejected.select("line", "reason").rows() == [
        (2, "malformed"), (3, "malformed"), (4, "malformed")]


def test_lines_end_only_at_line_breaks_not_at_other_separators(tmp_path: Path) -> None:
    # A Windows-1252 "..." (byte 0x85) in a comment, read as latin-1, is U+0085, at which
    # str.splitlines breaks a line, as at a form feed: a comment's tail became a malformed
    # job and every later line number moved by one (a QA pass). \r\n and \r still end lines.
    path = tmp_path / "sep.swf"
    path.write_bytes(b"; Installation: site\x85 local\n; Note:\x0c page two\r\n"
                     + SMALL_SWF.split("\n", 3)[3].encode().replace(b"\n", b"\r", 2))
    _, report = import_swf(path)
    _, plain = import_swf(write_swf(tmp_path))
    assert report.job_lines == plain.job_lines == 10
    assert report.header_lines == plain.header_lines - 1 == 3  # two of the file's, the last
    assert report.lines_read == plain.lines_read - 1
    assert report.dropped == plain.dropped
    assert report.rejected["line"].to_list() == [n - 1 for n in plain.rejected["line"].to_list()]


def test_a_utf8_byte_order_mark_is_not_a_malformed_job(tmp_path: Path) -> None:
    path = tmp_path / "bom.swf"
    path.write_bytes(b"\xef\xbb\xbf" + SMALL_SWF.encode())
    _, report = import_swf(path)
    assert report.dropped["malformed"] == 3 and report.jobs_kept == 3


def test_an_swf_log_is_known_by_its_suffix_in_any_case(tmp_path: Path) -> None:
    upper = tmp_path / "LOG.SWF"
    upper.write_bytes(SMALL_SWF.encode())
    assert is_swf(upper) and is_swf("a.Swf.GZ") and not is_swf("a.parquet")
    assert read_trace_or_swf(upper).height == 3
    assert log_stem(upper) == "LOG" and log_stem("x/LANL-CM5.swf.gz") == "LANL-CM5"
    assert log_stem("x/run.parquet") == "run.parquet"


def test_a_dropped_jobs_note_is_said_once_between_processes_sharing_notes(
    tmp_path: Path,
) -> None:
    """A command and its pool's processes (``share_notes``: the environment names the file
    of notes said) say an SWF import's note once between them; a process of its own says it
    again; with ``share_notes`` the file is made and named for the children."""
    import os
    import subprocess
    import sys

    from desched.swf import NOTES_SEEN_ENV

    log = write_swf(tmp_path)
    read = ("import sys; from desched.swf import read_trace_or_swf; "
            f"read_trace_or_swf({str(log)!r})")

    def said(env: dict[str, str]) -> int:
        run = subprocess.run([sys.executable, "-c", read], env=env, capture_output=True,
                             text=True, check=True)
        return run.stderr.count("note: ")

    alone = {k: v for k, v in os.environ.items() if k != NOTES_SEEN_ENV}
    assert [said(alone), said(alone)] == [1, 1]  # each process on its own
    (tmp_path / "seen").touch()  # as share_notes makes it
    shared = {**alone, NOTES_SEEN_ENV: str(tmp_path / "seen")}
    assert [said(shared), said(shared), said(shared)] == [1, 0, 0]
    (tmp_path / "other").touch()
    other = {**alone, NOTES_SEEN_ENV: str(tmp_path / "other")}
    assert said(other) == 1
    # a file its maker already removed: each process says it, and none makes it again
    gone = {**alone, NOTES_SEEN_ENV: str(tmp_path / "gone")}
    assert [said(gone), said(gone)] == [1, 1] and not (tmp_path / "gone").exists()
    # share_notes names a fresh file for the processes this one starts from now on
    make = ("import os; from desched.swf import share_notes, NOTES_SEEN_ENV; share_notes(); "
            "p = os.environ[NOTES_SEEN_ENV]; print(p, os.path.isfile(p), flush=True)")
    for end in ("", "; from desched.bench.pool import exit_now; exit_now()"):
        made = subprocess.run([sys.executable, "-c", make + end], env=alone,
                              capture_output=True, text=True, check=True).stdout.split()
        # removed at that process's exit, also one that skips the exit hooks (exit_now)
        assert made[1] == "True" and not Path(made[0]).exists(), end


def test_a_log_compressed_other_than_with_gzip_is_named_so(tmp_path: Path) -> None:
    """bzip2, xz or zip logs (an archive's other downloads) are refused naming the
    compression, by content (whatever the name) and by name (before reading a Parquet)."""
    import bz2
    import lzma

    text = b"1 0 -1 10 1 -1 -1 1 10 -1 1 1 1 -1 1 -1 -1 -1\n"
    cases = {"a.swf.bz2": (bz2.compress(text), "bzip2"), "b.swf.xz": (lzma.compress(text), "xz"),
             "c.swf.gz": (bz2.compress(text), "bzip2"), "d.swf": (lzma.compress(text), "xz")}
    for name, (data, kind) in cases.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(DeschedError, match=f"compressed with {kind}; desched reads SWF"):
            read_trace_or_swf(path)
