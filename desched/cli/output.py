"""How commands talk: results on stdout, library logs only with ``desched -v``, and tables
that render as tables on a terminal and stay plain markdown when piped."""

from __future__ import annotations

import logging
import os
import sys

import click

ALWAYS_QUIET: dict[str, int] = {
    "great_expectations._docs_decorators": logging.WARNING,  # hundreds of lines per import
    "httpx": logging.WARNING,  # every request of the Prefect client
    "docket": logging.CRITICAL,  # the temporary server's telemetry heartbeat, with traceback
}
"""Loggers that are noise even with -v."""


RUN_LOGGERS = ("PREFECT_LOGGING_LOGGERS_PREFECT_FLOW_RUNS_LEVEL",
               "PREFECT_LOGGING_LOGGERS_PREFECT_TASK_RUNS_LEVEL")
"""Prefect's logging.yml overrides of the flow and task run loggers' levels."""
CONSOLE_LEVEL = "PREFECT_LOGGING_HANDLERS_CONSOLE_LEVEL"
"""Prefect's logging.yml override of its console handler's level."""


def configure_logging(verbose: bool) -> None:
    """Quiet by default: on the terminal Prefect, its temporary server and Great
    Expectations show warnings only, while the flow and task run logs keep their INFO lines
    for the Prefect server (the UI shows a CLI run's steps); ``verbose`` lets every INFO line
    through to the terminal too. Set before the libraries are imported (commands import them
    lazily); explicit PREFECT_LOGGING_* settings win when quiet."""
    level = "INFO" if verbose else "WARNING"
    for name in RUN_LOGGERS:
        os.environ.setdefault(name, "INFO")
    if verbose:
        os.environ["PREFECT_LOGGING_LEVEL"] = level
        os.environ[CONSOLE_LEVEL] = "NOTSET"
    else:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", level)
        os.environ.setdefault(CONSOLE_LEVEL, level)
        os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", level)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # a busy machine needs more than Prefect's default 20 s to start the temporary server
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    logging.getLogger("great_expectations").setLevel(logging.INFO if verbose else logging.WARNING)
    for name, quiet in ALWAYS_QUIET.items():
        logging.getLogger(name).setLevel(quiet)


def on_terminal() -> bool:
    """True when stdout is a terminal (not a pipe or file) and colour is not refused."""
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def echo_markdown(text: str) -> None:
    """Print markdown (tables among it): rendered by rich on a terminal, as is when piped."""
    if not on_terminal():
        click.echo(text)
        return
    from rich.console import Console
    from rich.markdown import Markdown

    Console().print(Markdown(text))
