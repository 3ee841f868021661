"""scripts/install_env.py: pip's package sources reach uv unchanged, and anything uv would not
be given sends the install back to pip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scripts import install_env

ROOT = Path(__file__).resolve().parents[1]


def test_pip_sources_become_uv_options() -> None:
    settings = {
        "cert": "/etc/ssl/certs/ca-certificates.crt",
        "constraint": "/etc/xdg/pip/constraints.txt",
        "extra-index-url": "file:///opt/pypi/simple file:///opt/pypi-more/simple",
        "find-links": "/opt/wheels",
        "default-timeout": "180",
    }
    assert install_env.uv_arguments(settings) == [
        "--index-strategy", "unsafe-best-match",
        "--constraint", "/etc/xdg/pip/constraints.txt",
        "--extra-index-url", "file:///opt/pypi/simple",
        "--extra-index-url", "file:///opt/pypi-more/simple",
        "--find-links", "/opt/wheels",
    ]


@pytest.mark.parametrize("key", ["proxy", "trusted-host", "no-index", "pre", "no-binary"])
def test_a_setting_uv_is_not_given_falls_back_to_pip(key: str) -> None:
    assert install_env.uv_arguments({"find-links": "/opt/wheels", key: "x"}) is None


def test_pip_settings_read_with_the_environment_over_the_files(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "pip.conf"
    config.write_text("[global]\nfind-links = /from/file\nextra-index-url = file:///a b\n"
                      "[install]\nconstraint = /c.txt\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.setenv("PIP_FIND_LINKS", "/from/env")
    settings = install_env.pip_settings(sys.executable)
    assert settings is not None
    assert settings["find-links"] == "/from/env"
    assert settings["extra-index-url"] == "file:///a b"
    assert settings["constraint"] == "/c.txt"


def test_help_and_bad_arguments() -> None:
    script = str(ROOT / "scripts" / "install_env.py")
    shown = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True,
                           check=False)
    assert shown.returncode == 0 and "uv" in shown.stdout
    bad = subprocess.run([sys.executable, script, "only-one"], capture_output=True, text=True,
                         check=False)
    assert bad.returncode == 2
