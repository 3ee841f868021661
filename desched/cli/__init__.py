"""The ``desched`` command line. Subcommands load lazily so ``desched --help`` stays fast.

Every command turns a ``DeschedError``, a usage error (a missing or bad option) or an
``OSError`` (a path that cannot be read or written) into one line on stderr and exit status 2.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from desched.errors import DeschedError

# name -> "module:attribute" of a click command; one line per command.
COMMANDS: dict[str, str] = {
    "scenario": "desched.cli.sim:scenario",
    "import-swf": "desched.cli.sim:import_swf",
    "simulate": "desched.cli.sim:simulate",
    "compare": "desched.cli.sim:compare",
    "policies": "desched.cli.sim:policies",
    "ingest": "desched.cli.pipeline:ingest",
    "serve": "desched.cli.service:serve",
    "tenants": "desched.cli.service:tenants",
    "workers": "desched.cli.service:workers",
    "operators": "desched.cli.service:operators",
    "policy": "desched.cli.service:policy",
    "live-demo": "desched.cli.live:live_demo",
    "train": "desched.cli.models:train",
    "predict": "desched.cli.models:predict",
    "models": "desched.cli.models:models",
    "evaluate": "desched.cli.bench:evaluate",
    "tune": "desched.cli.bench:tune",
    "demo": "desched.cli.demo:demo",
    "judge": "desched.cli.judge:judge",
    "deploy": "desched.cli.deploy:deploy",
}


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module, attr = target.split(":")
        command: click.Command = getattr(importlib.import_module(module), attr)
        return command

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except DeschedError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)
        except click.UsageError as exc:  # a missing or bad option: one line, and where to look
            if exc.ctx is not None:
                where = exc.ctx.command_path
            else:  # raised while the subcommand parsed its options: point at its help
                where = " ".join(filter(None, (ctx.command_path, ctx.invoked_subcommand)))
            click.echo(f"error: {exc.format_message()} (see '{where} --help')", err=True)
            ctx.exit(2)
        except OSError as exc:  # a path that cannot be read or written: one line naming it
            from desched.cli.grammar import os_reason

            where = f"{exc.filename}: " if exc.filename and exc.strerror else ""
            click.echo(f"error: {where}{os_reason(exc)}", err=True)
            ctx.exit(2)


@click.group(
    cls=LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
)
@click.version_option(package_name="desched")
@click.option("-v", "--verbose", is_flag=True,
              help="Show the INFO logs of Prefect and Great Expectations (quiet by default).")
def cli(verbose: bool) -> None:
    """desched: schedule multi-tenant document enrichment, and measure how fairly.

    Every command prints its result on stdout and errors as one line on stderr.
    """
    from desched.cli.output import configure_logging

    configure_logging(verbose)


_EXIT_WITHOUT_TEARDOWN: set[str] = set()
"""Holds ``"asked"`` once a command has called ``exit_without_teardown``."""


def exit_without_teardown() -> None:
    """Let ``main`` end the process as soon as this command succeeds, without the
    interpreter's teardown: for a command whose outputs are all written and closed by
    then and that leaves nothing running (``desched simulate``, ``desched demo``). The teardown frees every
    array and unloads numpy, polars and llvmlite one object at a time, which the exit does
    at once: about 0.05 s of CPU after a 100k-task run, 0.1 s after a 1M-task one (a
    tenth of a short run's process). Standard streams and logging are flushed first; a
    failure (a non-zero status) or an in-process call of ``main`` with ``argv`` exits as
    usual."""
    _EXIT_WITHOUT_TEARDOWN.add("asked")


def main(argv: list[str] | None = None) -> None:
    _EXIT_WITHOUT_TEARDOWN.clear()
    try:
        cli.main(args=argv if argv is not None else sys.argv[1:], prog_name="desched")
    except SystemExit as exc:
        if argv is None and exc.code in (0, None) and _EXIT_WITHOUT_TEARDOWN:
            from desched.bench.pool import exit_now

            exit_now()
        raise
