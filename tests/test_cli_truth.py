"""A command line that tells the truth about time and data: SWF logs read where traces are,
a used run folder refused without --force, empty listings that say so, progress with an
estimate of time left only on a terminal, a wrong Dask address refused at once; and the
typed, single-sourced names the other layers read (today's scorer, the test tools' extra)."""

from __future__ import annotations

import math
import re
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from desched.cli import cli
from desched.today import TODAY_SCORER

ROOT = Path(__file__).resolve().parents[1]


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def write_swf(path: Path, jobs: int = 60) -> Path:
    """A small SWF log: three users, one job a minute."""
    lines = ["; a small log for tests"]
    for j in range(1, jobs + 1):
        user = 1 + j % 3
        run = 30 + 10 * user
        fields = [j, 60 * j, 0, run, 1, -1, -1, 1, 2 * run, -1, 1, user, 1, user, 1, -1, -1, -1]
        lines.append(" ".join(str(f) for f in fields))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_simulate_reads_an_swf_log_directly_as_judge_and_train_do(tmp_path: Path) -> None:
    log = write_swf(tmp_path / "small.swf")
    code, out, err = invoke("simulate", "--trace", str(log), "--policy", "fifo",
                            "--workers", "2", "--out", str(tmp_path / "run"))
    assert code == 0, err
    assert out.startswith(f"{tmp_path / 'run'}: 60 tasks")
    assert (tmp_path / "run" / "summary.json").is_file()


def test_a_log_read_on_the_fly_says_what_its_import_dropped_on_stderr(tmp_path: Path) -> None:
    log = write_swf(tmp_path / "small.swf")
    log.write_text(log.read_text() + "this line is no job\n61 3660 0 0 1 -1 -1 1 2 -1 1 1 1 1 1 -1 -1 -1\n")
    code, out, err = invoke("simulate", "--trace", str(log), "--policy", "fifo",
                            "--workers", "2", "--out", str(tmp_path / "run"))
    assert code == 0 and out.startswith(f"{tmp_path / 'run'}: 60 tasks")
    assert err.startswith(f"note: {log}: ") and "kept 60, dropped 2 (malformed 1" in err


def test_paths_that_cannot_be_written_are_refused_in_one_line_before_the_work(
    tmp_path: Path,
) -> None:
    log = write_swf(tmp_path / "small.swf")
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for args, says in (
        (["simulate", "--trace", str(log), "--policy", "fifo", "--workers", "1",
          "--out", str(blocker / "run")], f"error: --out {blocker / 'run'}: cannot write here"),
        (["judge", "--logs", str(log), "--out", str(blocker / "j")],
         f"error: --out {blocker / 'j'}: cannot write here"),
        (["scenario", "steady", "--tasks", "20", "--out", str(blocker / "s.parquet")],
         "error: "),
        (["import-swf", str(log), "--out", str(log)],
         f"error: --out {log}: is the input file; write to another file"),
        (["import-swf", str(log), "--out", str(tmp_path / "t.parquet"), "--rejected", str(log)],
         f"error: --rejected {log}: is the input file"),
    ):
        code, out, err = invoke(*args)
        assert code == 2 and out == "" and err.startswith(says) and err.count("\n") == 1, err
        assert "Traceback" not in err
    assert log.read_text().startswith("; a small log")  # the log itself untouched


def test_a_run_summary_is_strict_json_with_null_for_an_undefined_figure(tmp_path: Path) -> None:
    import json

    from desched.runs import read_summary

    log = write_swf(tmp_path / "small.swf")
    assert invoke("simulate", "--trace", str(log), "--policy", "fifo", "--workers", "2",
                  "--window-s", "10", "--out", str(tmp_path / "run"))[0] == 0
    text = (tmp_path / "run" / "summary.json").read_text()
    assert "null" in text  # 10 s windows without a completion: Jain's index undefined

    def refuse(name: str) -> float:
        raise AssertionError(f"summary.json holds {name}")

    raw = json.loads(text, parse_constant=refuse)
    assert raw["tasks"] == 60
    summary = read_summary(tmp_path / "run")  # null read back where a float is expected
    assert summary.tasks == 60
    assert any(math.isnan(w.jain_slowdown) for w in summary.windows)


def test_compare_reads_an_swf_log_directly(tmp_path: Path) -> None:
    log = write_swf(tmp_path / "small.swf")
    code, out, err = invoke("compare", "--trace", str(log), "--policies", "fifo,vtc",
                            "--workers", "2", "--out", str(tmp_path / "cmp"))
    assert code == 0, err
    assert "| fifo" in out and "| vtc" in out


def test_two_specs_that_spell_one_folder_name_get_a_folder_each(tmp_path: Path) -> None:
    # 'weights=A/B' and 'weights=A_B' both became ..._A_B: the second run replaced the first
    import json

    for folder, w_wait in (("A/B", 0.9), ("A_B", 0.2)):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "card.json").write_text(json.dumps(
            {"policy": "ifs-memoryless", "weights": {"w_wait": w_wait, "w_backlog": 0.1}}))
    specs = [f"ifs-memoryless?weights={tmp_path / 'A/B'}",
             f"ifs-memoryless?weights={tmp_path / 'A_B'}"]
    code, _, err = invoke("compare", "--trace", str(write_swf(tmp_path / "s.swf")),
                            "--policies", ",".join(specs), "--workers", "2",
                            "--out", str(tmp_path / "cmp"))
    assert code == 0, err
    dirs = json.loads((tmp_path / "cmp" / "compare.json").read_text())["run_dirs"]
    assert len(set(dirs.values())) == 2, dirs
    params = {json.loads((tmp_path / "cmp" / d / "summary.json").read_text())["params"][
        "w_wait"] for d in dirs.values()}
    assert params == {0.9, 0.2}


def test_compare_says_when_a_policy_is_named_twice_and_runs_it_once(tmp_path: Path) -> None:
    code, out, err = invoke("compare", "--trace", str(write_swf(tmp_path / "s.swf")),
                            "--policies", "fifo,vtc", "--policies", "fifo", "--workers", "2",
                            "--out", str(tmp_path / "cmp"))
    assert code == 0, err
    assert "note: --policies names fifo more than once; each runs once" in err
    assert len([line for line in out.splitlines() if line.startswith("| fifo |")]) == 1
    assert sorted(p.name for p in (tmp_path / "cmp").iterdir() if p.is_dir()) == ["fifo", "vtc"]


def test_simulate_refuses_a_run_folder_that_holds_files_unless_forced(tmp_path: Path) -> None:
    log = write_swf(tmp_path / "small.swf")
    out_dir = tmp_path / "run"
    out_dir.mkdir()
    (out_dir / "summary.json").write_text("{}")
    args = ["simulate", "--trace", str(log), "--policy", "fifo", "--workers", "2",
            "--out", str(out_dir)]
    code, out, err = invoke(*args)
    assert code == 2 and out == ""
    assert err.strip() == (f"error: --out {out_dir}: folder is not empty (give --force to "
                           "write over it, or another folder)")
    assert (out_dir / "summary.json").read_text() == "{}"
    code, out, err = invoke(*args, "--force")
    assert code == 0, err
    assert (out_dir / "summary.json").read_text() != "{}"


def test_force_never_writes_over_the_trace_a_run_reads(tmp_path: Path) -> None:
    import polars as pl

    first = tmp_path / "first"
    assert invoke("simulate", "--trace", str(write_swf(tmp_path / "s.swf")), "--policy", "fifo",
                  "--workers", "2", "--out", str(first))[0] == 0
    trace = first / "tasks.parquet"  # a run's tasks, simulated again in place
    before = trace.read_bytes()
    (tmp_path / "cx" / "fifo").mkdir(parents=True)
    in_compare = tmp_path / "cx" / "fifo" / "tasks.parquet"  # where compare's fifo run goes
    in_compare.write_bytes(before)
    for args in (
        ["simulate", "--trace", str(trace), "--policy", "vtc", "--workers", "2",
         "--out", str(first), "--force"],
        ["simulate", "--trace", str(tmp_path / "." / "first" / "tasks.parquet"), "--policy",
         "vtc", "--workers", "2", "--out", str(first), "--force"],
        ["compare", "--trace", str(in_compare), "--policies", "vtc,fifo", "--workers", "2",
         "--out", str(tmp_path / "cx"), "--force"],
    ):
        code, out, err = invoke(*args)
        assert code == 2 and out == "" and err.count("\n") == 1, err
        assert err.startswith(f"error: --trace {args[2]}: the command would write over it"), err
    assert trace.read_bytes() == before and in_compare.read_bytes() == before
    assert not (tmp_path / "cx" / "vtc").exists()  # refused before any run
    (tmp_path / "keep").mkdir()
    kept = tmp_path / "keep" / "trace.parquet"  # a trace beside a run's files is not one of them
    kept.write_bytes(before)
    code, _, err = invoke("simulate", "--trace", str(kept), "--policy", "vtc", "--workers", "2",
                          "--out", str(kept.parent), "--force")
    assert code == 0, err
    assert kept.read_bytes() == before
    assert pl.read_parquet(kept.parent / "tasks.parquet").height == 60


def test_compare_refuses_a_used_folder_before_running_anything(tmp_path: Path) -> None:
    out_dir = tmp_path / "cmp"
    out_dir.mkdir()
    (out_dir / "compare.json").write_text("{}")
    code, _, err = invoke("compare", "--trace", str(write_swf(tmp_path / "s.swf")),
                          "--policies", "fifo", "--workers", "2", "--out", str(out_dir))
    assert code == 2 and "folder is not empty" in err and str(out_dir) in err
    assert sorted(p.name for p in out_dir.iterdir()) == ["compare.json"]


def test_the_demo_refuses_a_run_folder_that_holds_a_run_unless_forced(tmp_path: Path) -> None:
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "report.md").write_text("an earlier run")
    code, out, err = invoke("demo", "--quick", "--out", str(tmp_path), "--run", "r1")
    assert code == 2 and out == ""
    assert err.startswith(f"error: --run {tmp_path / 'r1'}: folder is not empty")
    assert (tmp_path / "r1" / "report.md").read_text() == "an earlier run"


@pytest.mark.parametrize(("args", "says"), [
    (["tenants", "list"], "no tenants in"),
    (["workers", "list"], "no workers in"),
    (["tenants", "controls"], "no tenant controls in"),
])
def test_an_empty_listing_says_so_on_stderr_and_leaves_stdout_empty(
    tmp_path: Path, args: list[str], says: str,
) -> None:
    from desched.service.store import Store

    store = tmp_path / "state.db"
    made = Store(str(store))
    made.migrate()
    made.close()
    code, out, err = invoke(*args, "--store", str(store))
    assert code == 0 and out == ""
    assert err.startswith(f"{says} {store} (add one: desched ")


@pytest.mark.parametrize("args", [
    ["tenants", "list"], ["workers", "list"], ["operators", "list"], ["tenants", "controls"],
    ["tenants", "revoke", "acme"],
])
def test_a_listing_or_revocation_refuses_a_store_that_is_not_there_and_creates_none(
    tmp_path: Path, args: list[str],
) -> None:
    missing, empty = tmp_path / "typo" / "state.db", tmp_path / "empty.db"
    empty.write_bytes(b"")
    for store, why in ((missing, "does not exist"), (empty, "is an empty file")):
        code, out, err = invoke(*args, "--store", str(store))
        assert code == 2 and out == ""
        assert err == f"error: --store {store}: {why}, not a desched store (give the store " \
                      "`desched serve` runs on)\n"
    assert not missing.parent.exists() and empty.read_bytes() == b""


def test_a_store_that_is_not_a_database_is_refused_in_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("not a database, but long enough to look like a file of one " * 20)
    for args in (["tenants", "list"], ["tenants", "add", "acme"], ["policy", "set", "fifo"]):
        code, out, err = invoke(*args, "--store", str(junk))
        assert code == 2 and out == ""
        assert err.startswith(f"error: --store {junk}: not a desched store (")
        assert err.count("\n") == 1


def test_a_listing_with_rows_prints_them_and_no_empty_notice(tmp_path: Path) -> None:
    store = tmp_path / "state.db"
    assert invoke("tenants", "add", "acme", "--store", str(store))[0] == 0
    code, out, err = invoke("tenants", "list", "--store", str(store))
    assert code == 0 and out.startswith("acme\t") and "no tenants" not in err


def test_progress_bars_stay_quiet_when_stderr_is_not_a_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str],
) -> None:
    from desched.cli.progress import MessageBar, bar

    with bar(10, "work") as shown:
        shown.update(10)
    assert capsys.readouterr().err == ""
    lines = MessageBar(2, "judge")
    lines("lanl: training on 100 tasks")
    lines.close()
    assert re.fullmatch(r"\[\s+\d+ s\] lanl: training on 100 tasks\n", capsys.readouterr().err)
    counts = MessageBar(250, "simulate", per_message=True, lines=20)
    for k in range(1, 251):
        counts(f"{k}/250 simulated")
    counts.close()
    written = [line.split("] ")[1] for line in capsys.readouterr().err.splitlines()]
    assert written == [f"{k}/250 simulated" for k in (*range(13, 250, 13), 250)]  # 20 lines


def test_progress_on_a_terminal_shows_a_bar_with_the_time_left(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    from desched.cli import progress

    monkeypatch.setattr(progress, "stderr_is_terminal", lambda: True)
    shown = progress.MessageBar(4, "simulate", per_message=True)
    for k in range(4):
        shown(f"lanl: policy {k}")
    shown.bar.refresh()
    shown.close()
    err = capsys.readouterr().err
    assert "simulate" in err and "4/4" in err
    assert re.search(r"\d\d:\d\d<\d\d:\d\d", err)  # elapsed<time left


def test_the_demo_estimates_the_time_left_from_its_pace_on_the_steps_done() -> None:
    from desched.bench.demo import STEP_SHARES, time_left_s

    shares = {"a": 1.0, "b": 3.0, "c": 6.0}
    assert time_left_s(5.0, [], shares) is None
    assert time_left_s(5.0, ["a"], shares) == pytest.approx(45.0)  # 9 shares at 5 s a share
    assert time_left_s(20.0, ["a", "b"], shares) == pytest.approx(30.0)
    assert time_left_s(50.0, ["a", "b", "c"], shares) == 0.0
    for mode in ("quick", "full"):
        from desched.flows.demo import STEPS

        assert set(STEP_SHARES[mode]) == set(STEPS)  # type: ignore[index]


def test_a_dask_address_that_nothing_answers_on_is_refused_at_once_in_one_line() -> None:
    from desched.errors import DeschedError
    from desched.flows.evaluate import check_scheduler

    with pytest.raises(DeschedError) as caught:
        check_scheduler("tcp://127.0.0.1:1", timeout_s=2.0)
    assert str(caught.value).startswith("address 'tcp://127.0.0.1:1': no Dask scheduler")
    assert "\n" not in str(caught.value)
    with pytest.raises(DeschedError, match="expected tcp://HOST:PORT"):
        check_scheduler("scheduler")


def test_todays_scorer_is_named_once_and_registered_under_that_name() -> None:
    from desched.policies import REGISTRY, WITHOUT_PREDICTION
    from desched.policies.ifs_memoryless import IfsMemoryless

    assert REGISTRY[TODAY_SCORER] is IfsMemoryless and WITHOUT_PREDICTION == TODAY_SCORER
    # a default or a constant written as the string (not in a ``code`` example of a
    # docstring), rather than read from TODAY_SCORER
    assigned = re.compile(r"""(?<!`)(=|\(|default=)\s*["']ifs-memoryless["']""")
    written = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "desched").rglob("*.py")
                     if assigned.search(p.read_text()))
    assert written == ["desched/today.py"], written


def test_test_tools_are_in_the_dev_extra_only() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    tools = ("schemathesis", "pytest", "hypothesis")
    for name, deps in extras.items():
        named = {re.split(r"[<>=\[ ]", d, maxsplit=1)[0] for d in deps}
        if name == "dev":
            assert set(tools) <= named
        else:
            assert not named & set(tools), (name, named & set(tools))


@pytest.mark.parametrize(("args", "help_of"), [
    (["simulate", "--trace"], "desched simulate"),  # a value missing: the parser's own error
    (["simulate", "--policy", "fifo"], "desched simulate"),  # a required option missing
    (["tenants", "add"], "desched tenants add"),
    (["nosuch"], "desched"),
])
def test_a_usage_error_points_at_the_help_of_the_command_that_was_typed(
    args: list[str], help_of: str,
) -> None:
    result = CliRunner().invoke(cli, args, prog_name="desched")
    assert result.exit_code == 2 and result.stdout == ""
    err = result.stderr
    assert err.endswith(f" (see '{help_of} --help')\n") and err.count("\n") == 1, err


def test_scenario_never_writes_a_trace_over_a_log_or_another_file(tmp_path: Path) -> None:
    # `scenario steady --out small.swf` had replaced an SWF log with Parquet (a QA pass)
    log = write_swf(tmp_path / "small.swf")
    notes = tmp_path / "notes.parquet"
    notes.write_text("not a trace")
    for out in (log, notes, tmp_path / "new.swf.gz"):
        code, _, err = invoke("scenario", "steady", "--tasks", "50", "--out", str(out))
        assert code == 2 and "not a Parquet trace, or an SWF log's name" in err, err
        # nor does import-swf (the same check; predict's is in tests/test_training.py)
        code, _, err = invoke("import-swf", str(log), "--out", str(out))
        assert code == 2 and ("not a Parquet trace" in err or "is the input file" in err), err
    assert log.read_text().startswith("; a small log") and notes.read_text() == "not a trace"
    trace = tmp_path / "t.parquet"
    for _ in range(2):  # a trace is replaced by the next one
        assert invoke("scenario", "steady", "--tasks", "50", "--out", str(trace))[0] == 0


def test_tune_and_judge_replace_their_own_outputs_but_need_force_beside_anything_else(
    tmp_path: Path,
) -> None:
    # both wrote into any folder: a tune aimed at a run folder mixed a card into it (QA)
    used = tmp_path / "used"
    used.mkdir()
    (used / "table.parquet").write_text("someone else's")
    log = write_swf(tmp_path / "s.swf", 200)
    for args in (["tune", "--trace", "steady?tasks=300", "--workers", "2", "--trials", "2"],
                 ["judge", "--logs", str(log), "--scenarios", "none", "--jobs", "1"]):
        code, out, err = invoke(*args, "--out", str(used))
        assert code == 2 and out == "", err
        assert err.strip() == (f"error: --out {used}: holds 'table.parquet', which this "
                               "command does not write (give --force to write beside it, or "
                               "another folder)")
        assert sorted(p.name for p in used.iterdir()) == ["table.parquet"]
    card = tmp_path / "card"
    for _ in range(2):  # a second run replaces the first card
        code, _, err = invoke("tune", "--trace", "steady?tasks=300", "--workers", "2",
                              "--trials", "2", "--out", str(card))
        assert code == 0, err
    assert (card / "card.json").is_file()
    code, _, err = invoke("tune", "--trace", "steady?tasks=300", "--workers", "2", "--trials",
                          "2", "--out", str(used), "--force")
    assert code == 0, err
    assert {"card.json", "table.parquet"} <= {p.name for p in used.iterdir()}


@pytest.mark.parametrize("value", ["nan", "-5", "0", "inf"])
def test_live_demo_refuses_a_drain_limit_that_is_no_number_of_seconds(value: str) -> None:
    # nan passed click's range (no comparison with it is true) and left the drain without a
    # deadline; a negative one stopped the stack it had just started (a QA pass)
    code, out, err = invoke("live-demo", "--timeout-s", value)
    assert code == 2 and out == "" and "Invalid value for '--timeout-s'" in err, err


def test_a_write_that_creates_the_store_says_so(tmp_path: Path) -> None:
    """A mistyped --store on a write (tenants set, policy set, tenants add) creates a store
    the running service never reads: the command says that it created one, once."""
    for k, args in enumerate((["tenants", "set", "acme", "--weight", "2"],
                              ["policy", "set", "fifo"], ["tenants", "add", "acme"])):
        store = tmp_path / f"typo{k}.db"
        code, _, err = invoke(*args, "--store", str(store))
        assert code == 0
        assert f"note: --store {store} did not exist: created a new store" in err
        code, _, err = invoke(*args, "--store", str(store))
        assert "did not exist" not in err


def test_a_locked_store_is_named_locked_not_foreign(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sqlite3

    from desched.service.store import Store

    store = tmp_path / "state.db"
    assert invoke("tenants", "add", "acme", "--store", str(store))[0] == 0

    def locked(self: Store) -> None:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(Store, "migrate", locked)
    code, out, err = invoke("tenants", "list", "--store", str(store))
    assert code == 2 and out == ""
    assert err == (f"error: --store {store}: locked by another process (database is locked); "
                   "try again\n")


def test_evaluate_says_when_a_seed_is_named_twice_and_runs_it_once(tmp_path: Path) -> None:
    trace = write_swf(tmp_path / "s.swf", jobs=120)
    code, _, err = invoke("evaluate", "--traces", str(trace), "--policies", "fifo",
                          "--seeds", "1,1;0-1", "--workers", "2", "--out", str(tmp_path / "ev"))
    assert code == 0, err
    assert "note: --seeds '1,1;0-1' names seed 1 more than once; each runs once" in err
    import json

    cells = json.loads((tmp_path / "ev" / "evaluation.json").read_text())["cells"]
    assert sorted(c["seed"] for c in cells) == [0, 1]
