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


def configure_logging(verbose: bool) -> None:
    """Quiet by default: Prefect, its temporary server and Great Expectations log warnings
    only; ``verbose`` lets their INFO lines through. Set before the libraries are imported
    (commands import them lazily); an explicit PREFECT_LOGGING_LEVEL wins when quiet."""
    level = "INFO" if verbose else "WARNING"
    if verbose:
        os.environ["PREFECT_LOGGING_LEVEL"] = level
    else:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", level)
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
