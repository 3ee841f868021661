"""Prefect's ephemeral API, started before Prefect is imported (``desched demo``).

A flow run with no ``PREFECT_API_URL`` makes Prefect import its whole server module in this
process (about 3.4 s here) and then start the server in a subprocess, which imports it again
and opens the database; only then does the flow begin. ``LocalApi.start`` launches that same
subprocess (Prefect's own command: uvicorn over ``prefect.server.api.server:create_app``,
the UI off, ephemeral mode, on a free loopback port) before this process imports Prefect or
the flows, so the two start-ups overlap; ``LocalApi.serving`` waits for its ``/api/health``
and points Prefect at it for the flow run (``temporary_settings``), which then never imports
the server module here. The database, the runs and the artifacts are the ephemeral server's:
the SQLite file under ``PREFECT_HOME``.

Nothing changes where Prefect is told to use another API (``PREFECT_API_URL`` in the
environment, in a profile or in settings already live in this process, e.g. a test harness)
or the ephemeral server is off: no server is started, or the one started is stopped unused,
and Prefect resolves its API as always. The subprocess is stopped when the block ends,
after the flow's logs and events are sent.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from desched.errors import DeschedError

OFF = {"0", "false", "no", "off"}
T = TypeVar("T")


def _free_port() -> int:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class LocalApi:
    """One ephemeral Prefect server in a subprocess on ``127.0.0.1:port``."""

    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process = process
        self.port = port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    @classmethod
    def start(cls) -> LocalApi | None:
        """Launch the server unless Prefect is, or may be, told to use another API
        (``configured_elsewhere``); imports nothing of Prefect."""
        if configured_elsewhere():
            return None
        spec = importlib.util.find_spec("prefect")
        if spec is None or not spec.submodule_search_locations:
            return None
        app_dir = Path(next(iter(spec.submodule_search_locations))).parent
        port = _free_port()
        env = {**os.environ, "PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1",
               "PREFECT__SERVER_FINAL": "1"}
        process = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--app-dir", str(app_dir), "--factory",
             "prefect.server.api.server:create_app", "--host", "127.0.0.1", "--port",
             str(port), "--log-level", "error", "--lifespan", "on"],
            env=env, stdin=subprocess.DEVNULL)
        return cls(process, port)

    def wait(self, timeout_s: float) -> None:
        """Until ``/api/health`` answers 200; a server that exits or stays silent for
        ``timeout_s`` is an error naming what happened."""
        deadline = time.monotonic() + timeout_s
        while True:
            code = self.process.poll()
            if code is not None:
                raise DeschedError(f"Prefect's local server exited with code {code} before "
                                   f"answering on {self.url}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise DeschedError(f"Prefect's local server did not answer on {self.url} "
                                   f"within {timeout_s:.0f} s "
                                   "(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS)")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    @contextlib.contextmanager
    def serving(self) -> Iterator[str | None]:
        """Wait for the server, point Prefect at it for the block, stop it afterwards. If
        Prefect's own settings name an API after all (a profile or a settings file that
        ``configured_elsewhere`` does not read), the server is stopped at once and the block
        runs on that API (yields None)."""
        from prefect.settings import (
            PREFECT_API_URL,
            PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS,
            get_current_settings,
            temporary_settings,
        )

        try:
            if get_current_settings().api.url:
                self.stop()
                yield None
                return
            self.wait(float(PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()))
            with temporary_settings(updates={PREFECT_API_URL: self.url}):
                try:
                    yield self.url
                finally:
                    _drain_prefect()
        finally:
            self.stop()


def configured_elsewhere() -> bool:
    """True where Prefect is, or may be, set to use an API other than its ephemeral server:
    Prefect's live settings where it is already imported (a test harness, ``temporary_settings``),
    else the environment (``PREFECT_API_URL``, the ephemeral server turned off) and the
    profiles file naming either setting."""
    if "prefect.settings" in sys.modules:
        from prefect.settings import get_current_settings

        settings = get_current_settings()
        return bool(settings.api.url) or not settings.server.ephemeral.enabled
    if os.environ.get("PREFECT_API_URL"):
        return True
    if os.environ.get("PREFECT_SERVER_ALLOW_EPHEMERAL_MODE", "").lower() in OFF:
        return True
    home = Path(os.environ.get("PREFECT_HOME", Path.home() / ".prefect")).expanduser()
    profiles = Path(os.environ.get("PREFECT_PROFILES_PATH", home / "profiles.toml"))
    try:
        text = profiles.expanduser().read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return "PREFECT_API_URL" in text or "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE" in text


def _drain_prefect() -> None:
    """Send the flow's queued logs and events while the server still answers (as Prefect's
    test harness does before it stops its server)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker in (APILogWorker, EventsWorker):
        worker.drain_all(timeout=10)


@contextlib.contextmanager
def early_api(load: Callable[[], T]) -> Iterator[T]:
    """Start the server (``LocalApi.start``), run ``load`` (the imports of the flow) while it
    starts, then run the block against it; as Prefect resolves its API where none was
    started. The server stops when the block ends or ``load`` fails."""
    early = LocalApi.start()
    try:
        loaded = load()
    except BaseException:
        if early is not None:
            early.stop()
        raise
    if early is None:
        yield loaded
        return
    with early.serving():
        yield loaded
