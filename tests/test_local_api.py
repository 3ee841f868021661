"""``desched.cli.local_api``: Prefect's ephemeral server started before Prefect is imported."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from desched.cli.local_api import LocalApi, configured_elsewhere, early_api
from desched.errors import DeschedError

FLOW_RUN = textwrap.dedent("""
    import json, sys
    from desched.cli.local_api import LocalApi, configured_elsewhere, early_api

    started = []
    real_start = LocalApi.start
    LocalApi.start = classmethod(lambda cls: started.append(real_start()) or started[-1])

    def load():
        from prefect import flow

        @flow(name="early-api-check", log_prints=True)
        def check() -> int:
            print("hello from the flow")
            return 7

        return check

    with early_api(load) as check:
        value = check()
    print(json.dumps({
        "url": started[0].url, "value": value, "exit_code": started[0].process.poll(),
        "server_module_imported": "prefect.server.api.server" in sys.modules,
    }))
""")


def test_a_flow_runs_on_the_early_server_which_this_process_never_imports(
    tmp_path: Path,
) -> None:
    home = tmp_path / "prefect-home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false",
               PREFECT_LOGGING_LEVEL="INFO")
    proc = subprocess.run([sys.executable, "-c", FLOW_RUN], env=env, capture_output=True,
                          text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["value"] == 7
    assert out["url"].startswith("http://127.0.0.1:") and out["url"].endswith("/api")
    assert out["exit_code"] is not None  # stopped when the block ended
    assert out["server_module_imported"] is False
    assert "Error logging to API" not in proc.stderr
    # the run, its state and its printed line are in the ephemeral server's database
    with sqlite3.connect(home / "prefect.db") as db:
        runs = db.execute("SELECT id, state_type FROM flow_run").fetchall()
        assert [state for _, state in runs] == ["COMPLETED"]
        messages = [m for (m,) in db.execute("SELECT message FROM log WHERE flow_run_id = ?",
                                             (runs[0][0],))]
    assert "hello from the flow" in messages


def test_no_server_is_started_where_an_api_is_configured_or_the_ephemeral_one_is_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: "http://127.0.0.1:9/api"}):
        assert configured_elsewhere() and LocalApi.start() is None  # e.g. a test harness
    # before Prefect is imported: the environment and the profiles file
    monkeypatch.delitem(sys.modules, "prefect.settings")
    monkeypatch.setenv("PREFECT_HOME", str(tmp_path))
    for name in ("PREFECT_PROFILES_PATH", "PREFECT_API_URL", "PREFECT_SERVER_ALLOW_EPHEMERAL_MODE"):
        monkeypatch.delenv(name, raising=False)
    assert not configured_elsewhere()
    monkeypatch.setenv("PREFECT_API_URL", "http://127.0.0.1:4200/api")
    assert configured_elsewhere() and LocalApi.start() is None
    monkeypatch.delenv("PREFECT_API_URL")
    monkeypatch.setenv("PREFECT_SERVER_ALLOW_EPHEMERAL_MODE", "false")
    assert configured_elsewhere()
    monkeypatch.delenv("PREFECT_SERVER_ALLOW_EPHEMERAL_MODE")
    (tmp_path / "profiles.toml").write_text(
        'active = "remote"\n[profiles.remote]\nPREFECT_API_URL = "http://10.0.0.5:4200/api"\n')
    assert configured_elsewhere()
    (tmp_path / "profiles.toml").write_text('active = "local"\n[profiles.local]\n')
    assert not configured_elsewhere()


def test_a_server_that_exits_or_stays_silent_is_an_error_naming_it() -> None:
    exited = LocalApi(subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"]), 9)
    exited.process.wait()
    with pytest.raises(DeschedError, match="exited with code 3 before answering on "
                                           r"http://127\.0\.0\.1:9/api"):
        exited.wait(5)
    silent = LocalApi(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]),
                      9)
    try:
        with pytest.raises(DeschedError, match="did not answer on .* within 0 s"):
            silent.wait(0.2)
    finally:
        silent.stop()
    assert silent.process.returncode is not None


def test_the_server_stops_when_the_flow_cannot_be_imported(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sleeper = LocalApi(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]),
                       9)
    monkeypatch.setattr(LocalApi, "start", classmethod(lambda cls: sleeper))

    def load() -> None:
        raise ImportError("no such flow")

    with pytest.raises(ImportError, match="no such flow"), early_api(load):
        pass
    assert sleeper.process.returncode is not None
