"""The one documented path for adding a policy (CONTRIBUTING.md) stays true: the README's
policy table is the registry's, the files the guide names exist, and naive twins share no
rule code with their fast policies."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from desched.policies import README_BEGIN, README_END, REGISTRY, make_policy, registry_markdown
from desched.policies.base import NaivePolicy, Policy, PolicyParams
from desched.simulator import simulate
from desched.trace import TaskTable
from tests.builders import T, make_tasks

ROOT = Path(__file__).resolve().parents[1]
POLICIES = sorted(REGISTRY)


def test_the_readme_policy_table_is_the_one_generated_from_the_registry():
    readme = (ROOT / "README.md").read_text()
    assert README_BEGIN in readme and README_END in readme
    copy = readme.split(README_BEGIN, 1)[1].split(README_END, 1)[0].strip("\n") + "\n"
    assert copy == registry_markdown(), (
        "README.md's policy table differs from the registry: paste the output of "
        "`desched policies --markdown` between its markers")


def test_the_generated_table_has_one_row_per_registered_policy_in_registry_order():
    rows = [line for line in registry_markdown().splitlines() if line.startswith("| `")]
    assert [re.match(r"\| `([^`]+)`", r).group(1) for r in rows] == list(REGISTRY)  # type: ignore[union-attr]


def test_every_file_the_contributing_guide_names_exists():
    guide = (ROOT / "CONTRIBUTING.md").read_text()
    named = set(re.findall(r"`((?:desched|tests|benchmarks)/[\w/]+\.(?:py|json))`", guide))
    assert {"desched/policies/__init__.py", "tests/test_golden_decisions.py",
            "tests/test_policy_contract.py"} <= named
    missing = sorted(p for p in named if not (ROOT / p).is_file())
    assert not missing


_CONTRACT = {Policy, NaivePolicy, PolicyParams, TaskTable}


@pytest.mark.parametrize("name", POLICIES)
def test_a_naive_twin_inherits_nothing_from_its_fast_policy_but_the_contract(name):
    fast, naive = REGISTRY[name], REGISTRY[name].naive
    shared = (set(inspect.getmro(fast)) & set(inspect.getmro(naive))) - _CONTRACT
    shared = {c for c in shared if c.__module__ not in ("abc", "builtins")}
    assert not shared, f"{name}: fast and naive share {sorted(c.__name__ for c in shared)}"


def _helper_types(policy: Policy) -> set[type]:
    """Types of the objects a policy holds that come from desched (its helpers), but not the
    contract's own (the task table, its parameters)."""
    found = set()
    for value in vars(policy).values():
        t = type(value)
        if t.__module__.startswith("desched.") and not issubclass(t, (TaskTable, PolicyParams)):
            found.add(t)
    return found


@pytest.mark.parametrize("name", POLICIES)
def test_a_naive_twin_holds_no_helper_object_of_the_kind_its_fast_policy_uses(name):
    tasks = make_tasks(*[T("ab"[i % 2], i * 0.5, 1 + i % 3, 1 + i % 4) for i in range(12)])
    policies = [make_policy(name, tasks, naive=naive) for naive in (False, True)]
    for policy in policies:
        simulate(tasks, policy, 2)
    fast, naive = (_helper_types(p) for p in policies)
    assert not fast & naive, f"{name}: both twins hold {sorted(t.__name__ for t in fast & naive)}"
