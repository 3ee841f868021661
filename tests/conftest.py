"""Shared fixtures. Prefect state lives under the project's ignored .prefect/ folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data" / "samples"

os.environ.setdefault("PREFECT_HOME", str(ROOT / ".prefect" / "tests"))
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
# Prefect creates its home folder without parents: on a fresh clone .prefect/ is not there yet.
Path(os.environ["PREFECT_HOME"]).mkdir(parents=True, exist_ok=True)


@pytest.fixture(scope="session")
def prefect_harness() -> Iterator[None]:
    """One Prefect test server for the whole session (about 15 s to start, once)."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=90):
        yield
