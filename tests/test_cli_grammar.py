"""One grammar across the CLI: one policy-spec syntax, one option name per concept, defaults
shown, missing folders refused in one line, and the README's commands use that grammar."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from desched.cli import COMMANDS, cli

ROOT = Path(__file__).resolve().parents[1]


def every_command() -> list[tuple[str, click.Command]]:
    """``(path, command)`` of every command and subcommand of ``desched``."""
    out: list[tuple[str, click.Command]] = []
    ctx = click.Context(cli)
    for name in COMMANDS:
        command = cli.get_command(ctx, name)
        assert command is not None
        out.append((name, command))
        if isinstance(command, click.Group):
            out += [(f"{name} {sub}", command.commands[sub]) for sub in command.commands]
    return out


def options_of(command: click.Command) -> set[str]:
    return {o for p in command.params if isinstance(p, click.Option) for o in p.opts}


def run(*args: object) -> click.testing.Result:
    return CliRunner().invoke(cli, [str(a) for a in args], prog_name="desched")


def test_no_command_takes_policy_parameters_outside_the_policy_spec():
    for path, command in every_command():
        assert "--param" not in options_of(command), path


def test_one_option_name_per_concept_across_commands():
    for path, command in every_command():
        opts = options_of(command)
        assert "--log-dir" not in opts, path
        if "--db" in opts:  # only as the older name of the service's state store
            [store] = [p for p in command.params if "--db" in getattr(p, "opts", ())]
            assert store.opts[0] == "--store", path
        assert "--warehouse" not in opts or "--store" not in opts, path
    ingest, train, serve = (cli.get_command(click.Context(cli), n)
                            for n in ("ingest", "train", "serve"))
    assert {"--logs", "--warehouse"} <= options_of(ingest)
    assert "--warehouse" in options_of(train)
    assert {"--logs", "--store"} <= options_of(serve)


@pytest.mark.parametrize("path", [p for p, _ in every_command()])
def test_every_help_shows_the_default_of_every_option_that_has_one(path):
    result = run(*path.split(), "--help")
    assert result.exit_code == 0, result.output
    command = dict(every_command())[path]
    parent = click.Context(cli, **cli.context_settings)
    ctx = click.Context(command, info_name=path, parent=parent)
    for param in command.params:
        if not isinstance(param, click.Option) or param.is_flag or param.required:
            continue
        if param.get_default(ctx, call=False) in (None, (), getattr(click.core, "UNSET", None)):
            continue  # no default to show
        record = param.get_help_record(ctx)
        assert record is not None and "default:" in record[1], (path, param.name)
        # and the help a user sees says so too
        assert param.opts[-1] in result.output


def test_scenario_list_works_alone_and_a_scenario_without_out_is_one_line():
    listed = run("scenario", "list")
    assert listed.exit_code == 0, listed.output
    assert "steady" in listed.output and "flood" in listed.output
    missing = run("scenario", "steady")
    assert missing.exit_code == 2
    assert missing.output.strip() == "error: scenario steady: give --out FILE.parquet, the " \
                                     "trace to write"
    unknown = run("scenario", "stedy", "--out", "x.parquet")
    assert unknown.exit_code == 2 and "unknown scenario 'stedy'" in unknown.output


@pytest.mark.parametrize("command", [["models"], ["predict", "--out", "p.parquet"]])
def test_a_registry_that_does_not_exist_is_an_error(tmp_path, command):
    trace = tmp_path / "t.parquet"
    import polars as pl

    pl.DataFrame([{"task_id": "a", "tenant": "x", "task_type": "extract", "submit_s": 0.0,
                   "duration_s": 1.0}]).write_parquet(trace)
    extra = ["--trace", str(trace)] if command[0] == "predict" else []
    result = run(*command, *extra, "--registry", tmp_path / "typo")
    assert result.exit_code == 2, result.output
    assert result.output.strip() == f"error: --registry {tmp_path / 'typo'}: does not exist"


def test_serve_and_policy_set_take_the_policy_spec_and_refuse_a_bad_one(tmp_path):
    bad = run("serve", "--policy", "ifs-memoryless?w_nope=1", "--store", tmp_path / "s.db")
    assert bad.exit_code == 2
    assert "--policy 'ifs-memoryless?w_nope=1'" in bad.output and "w_nope" in bad.output
    ok = run("policy", "set", "ifs-memoryless?w_wait=0.8", "--store", tmp_path / "s.db")
    assert ok.exit_code == 0, ok.output
    assert "live policy: ifs-memoryless" in ok.output and "'w_wait': 0.8" in ok.output
    assert "or refuses it and says why in /healthz policy_error" in ok.output
    assert "ranks on predicted durations" not in ok.output
    old_name = run("policy", "set", "fifo", "--db", tmp_path / "s.db")
    assert old_name.exit_code == 0, old_name.output
    needs_model = run("policy", "set", "sjf-predicted", "--store", tmp_path / "s.db")
    assert needs_model.exit_code == 0, needs_model.output
    assert "a service without a duration model loaded refuses it" in needs_model.output


def test_a_policy_spec_without_a_value_names_the_syntax(tmp_path):
    result = run("simulate", "--trace", tmp_path / "none.parquet", "--policy", "ifs-memoryless?w",
                 "--workers", 1, "--out", tmp_path / "r")
    assert result.exit_code == 2
    assert "expected NAME?KEY=VALUE&KEY=VALUE" in result.output


def readme_commands() -> list[list[str]]:
    """Every `desched ...` command quoted in README.md and docs/*.md, split as a shell would."""
    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = []
    for path in texts:
        for match in re.finditer(r"`(desched [^`]+)`", path.read_text()):
            line = match.group(1).replace("\\|", "|")
            if "|" in line or "…" in line or "[" in line:
                continue  # a table's shorthand (`add|revoke`, `[--seed ...]`), not a command
            try:
                found.append(shlex.split(line)[1:])
            except ValueError:
                continue
    return found


def test_every_option_the_readme_and_docs_use_exists_on_its_command():
    commands = dict(every_command())
    checked = 0
    for argv in readme_commands():
        words = [w for w in argv if not w.startswith("-")]
        path = next((f"{words[0]} {words[1]}" for _ in [0] if len(words) > 1
                     and f"{words[0]} {words[1]}" in commands), words[0] if words else "")
        command = commands.get(path)
        if command is None:
            continue
        allowed = options_of(command) | {"-h", "--help"}
        for word in argv:
            if word.startswith("--"):
                assert word.split("=")[0] in allowed, (path, word, argv)
        checked += 1
    assert checked >= 5


@pytest.mark.parametrize(("args", "words"), [
    (["simulate", "--trace", "t.parquet", "--policy", "fifo", "--workers", "0", "--out", "r"],
     ["'--workers'", "0", "desched simulate --help"]),
    (["simulate", "--trace", "t.parquet", "--policy", "fifo"], ["Missing option '--workers'"]),
    (["simulate", "--trace", "t.parquet", "--policy", "fifo", "--workers", "1", "--out", "r",
      "--window-s", "-5"], ["'--window-s'", "-5"]),
    (["simulate", "--trace", "t.parquet", "--policy", "fifo", "--workers", "1", "--out", "r",
      "--window-s", "nan"], ["'--window-s'", "nan is not a finite number of seconds"]),
    (["frobnicate"], ["No such command 'frobnicate'", "desched --help"]),
    (["tenants", "add"], ["Missing argument 'NAME'", "desched tenants add --help"]),
    (["tune", "--trace", "x", "--workers", "1", "--out", "w", "--learner", "bogus"],
     ["'--learner'", "'bogus'"]),
])
def test_a_usage_error_is_one_line_naming_the_option_and_where_to_look(args, words):
    result = run(*args)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for word in words:
        assert word in lines[0], (word, lines[0])
