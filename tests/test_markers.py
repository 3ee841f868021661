"""The slow / e2e markers of tests/conftest.py name tests that exist, and mark what they say."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

from tests.conftest import E2E_MODULES, NOT_E2E, SLOW, is_e2e, is_slow

TESTS = Path(__file__).resolve().parent


def _test_functions(module: str) -> set[str]:
    tree = ast.parse((TESTS / module).read_text())
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
    }


def test_every_named_module_and_test_exists() -> None:
    # A renamed test would silently fall out of its list: every name must still be there.
    for module in E2E_MODULES | set(SLOW) | set(NOT_E2E):
        assert (TESTS / module).is_file(), module
    for table in (SLOW, NOT_E2E):
        for module, names in table.items():
            missing = set(names) - {"*"} - _test_functions(module)
            assert missing == set(), f"{module} has no {sorted(missing)}"
    for module, names in NOT_E2E.items():
        assert module in E2E_MODULES and "*" not in names


def test_the_markers_are_registered() -> None:
    pytest_options = tomllib.loads((TESTS.parent / "pyproject.toml").read_text())["tool"][
        "pytest"]["ini_options"]
    registered = {line.split(":")[0] for line in pytest_options["markers"]}
    assert {"slow", "e2e"} <= registered
    assert "--strict-markers" in pytest_options["addopts"]


def test_e2e_and_slow_are_decided_as_documented() -> None:
    # A Prefect flow run is e2e wherever it is; every e2e test is slow.
    assert is_e2e("test_anything.py", "test_x", ["tmp_path", "prefect_harness"])
    assert is_slow("test_anything.py", "test_x", ["prefect_harness"])
    assert not is_e2e("test_anything.py", "test_x", ["tmp_path"])
    assert not is_slow("test_anything.py", "test_x", ["tmp_path"])
    assert is_e2e("test_service.py", "test_x", []) and is_slow("test_service.py", "test_x", [])
    name = NOT_E2E["test_service.py"][0]
    assert not is_e2e("test_service.py", name, []) and not is_slow("test_service.py", name, [])
    assert is_slow("test_ingest.py", "test_anything_there", []) and not is_e2e(
        "test_ingest.py", "test_anything_there", [])
    assert not is_slow("test_golden_decisions.py", "test_every_policy_decides_exactly_as_recorded",
                       [])
