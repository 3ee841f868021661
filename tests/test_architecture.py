"""The architecture as checks: import contracts, no cycles, module size, one top-level name.

The contracts live in pyproject.toml ([tool.importlinter]); `lint-imports` checks them and
the first test here runs it, so `make test` and CI fail on a broken contract.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import grimp
import pytest

import desched

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "desched"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
CONTRACTS = {c["id"]: c for c in PYPROJECT["tool"]["importlinter"]["contracts"]}
MAX_LINES = 800

# desched's direct children that are not core: the layers above it (the CLI, the Prefect
# flows and tasks), the live service and the enrichment workers, each with its own contract.
NOT_CORE = {"cli", "flows", "tasks", "service", "enrich"}


def _children(package: Path) -> set[str]:
    """Direct submodules and subpackages of desched, by file name."""
    names = {p.stem for p in package.glob("*.py") if p.stem not in {"__init__", "__main__"}}
    names |= {p.parent.name for p in package.glob("*/__init__.py")}
    return names


def test_the_checked_package_is_this_tree() -> None:
    # The venv may hold desched installed from another checkout; the contracts must read this one.
    assert Path(desched.__file__).resolve().parent == PACKAGE


def test_import_contracts_are_kept() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # `lint-imports`, run by this interpreter (the venv's script may not be on PATH).
    lint = "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"
    done = subprocess.run(
        [sys.executable, "-c", lint, "--no-cache", "--no-logo", "--config", "pyproject.toml"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    for contract in CONTRACTS.values():
        assert f"{contract['name']} KEPT" in report, report


def test_every_core_module_is_under_the_core_contract() -> None:
    # A new top-level module is core unless it is one of the named outer layers: it must be
    # listed in the core contract, or it would escape the check.
    core = {m.removeprefix("desched.") for m in CONTRACTS["core"]["source_modules"]}
    children = _children(PACKAGE)
    assert children - NOT_CORE - core == set(), "add these to [tool.importlinter] core"
    assert core - children == set(), "the core contract names modules that are not there"
    assert NOT_CORE <= children


def test_the_core_forbids_prefect_and_the_outer_layers() -> None:
    forbidden = set(CONTRACTS["core"]["forbidden_modules"])
    assert {"prefect", "desched.flows", "desched.tasks", "desched.service"} <= forbidden
    assert "desched.enrich" in CONTRACTS["service"]["forbidden_modules"]
    assert CONTRACTS["acyclic"]["type"] == "acyclic_siblings"
    assert CONTRACTS["acyclic"]["ancestors"] == ["desched"]


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(edges[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_cycle_finder_finds_cycles() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}, "f": set()}
    assert _cycles(edges) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_between_any_two_modules() -> None:
    # Stricter than the acyclic_siblings contract: it also sees a cycle between a package's
    # __init__ and one of its own modules, and counts imports inside functions.
    graph = grimp.build_graph("desched", cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    assert len(edges) > 100
    assert _cycles(edges) == []


def test_no_module_exceeds_800_lines() -> None:
    sizes = {
        str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")
    }
    assert len(sizes) > 100
    too_long = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert too_long == {}


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to list the tracked files")
def test_the_wheel_claims_only_the_desched_name(tmp_path: Path) -> None:
    # Build the wheel from a copy of the tracked Python files and the package (the build
    # writes into its source tree) and read its top-level names: installing desched must
    # claim `desched` only, whatever other folder holds an __init__.py.
    tracked = subprocess.run(
        ["git", "ls-files", "pyproject.toml", "README.md", "desched", "*.py"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()
    src = tmp_path / "src"
    for name in tracked:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path / "dist"), str(src)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    (wheel,) = (tmp_path / "dist").glob("desched-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = {n.split("/")[0] for n in names}
        dist_info = {n for n in top_level if n.endswith(".dist-info")}
        assert top_level - dist_info == {"desched"}
        (info,) = dist_info
        declared = archive.read(f"{info}/RECORD").decode()
    assert "desched/flows/demo.py" in declared and "desched/tasks/demo.py" in declared


def _layout_entries() -> list[str]:
    """The paths the README's Layout section names: the first word of each unindented line
    of its tree."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    tree = section.split("```", 2)[1]
    return [line.split()[0] for line in tree.splitlines()[1:] if line and not line[0].isspace()]


def _tracked_top_level_folders() -> set[str]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.splitlines()
    return {name.split("/")[0] for name in listed if "/" in name}


def test_layout_names_only_what_is_there() -> None:
    entries = _layout_entries()
    assert len(entries) == len(set(entries)) > 10
    for entry in entries:
        if "*" in entry:
            assert list(ROOT.glob(entry)), entry
        elif entry.endswith("/"):
            assert (ROOT / entry).is_dir(), f"the README's Layout names {entry}, not a folder"
        else:
            assert (ROOT / entry).is_file(), f"the README's Layout names {entry}, not a file"


def test_layout_names_every_subpackage() -> None:
    entries = set(_layout_entries())
    subpackages = {
        f"{p.parent.relative_to(ROOT).as_posix()}/" for p in PACKAGE.glob("*/**/__init__.py")
    }
    assert "desched/policies/" in subpackages and "desched/bench/report/" in subpackages
    assert subpackages - entries == set(), "add these to the README's Layout section"


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to list the tracked files")
def test_layout_names_every_top_level_folder() -> None:
    entries = set(_layout_entries())
    folders = {f"{name}/" for name in _tracked_top_level_folders()}
    assert {"desched/", "tests/", "data/"} <= folders
    assert folders - entries == set(), "add these to the README's Layout section"
    assert {"prefect.yaml", "data/samples/"} <= entries
