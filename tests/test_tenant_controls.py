"""Tenant controls in the core (``desched.controls``): caps, weights, rate limits and
priority levels, checked by property over random workloads on the simulator."""

from __future__ import annotations

import itertools
import math

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.controls import (
    Controls,
    Gate,
    RateLimits,
    TenantControl,
    TokenBucket,
    controlled,
    shape_submits,
)
from desched.errors import DeschedError
from desched.policies import REGISTRY, make_policy
from desched.simulator import simulate
from desched.trace import TaskTable
from tests.builders import T, make_frame, workloads

POLICIES = sorted(REGISTRY)
TENANTS = "abcde"


@st.composite
def caps(draw: st.DrawFn) -> Controls:
    """Caps 1..3 on a random subset of tenants a..e."""
    capped = draw(st.sets(st.sampled_from(TENANTS), max_size=4))
    return Controls({k: TenantControl(cap=draw(st.integers(1, 3))) for k in sorted(capped)})


def priorities(n: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, 2), min_size=n, max_size=n)


def run(tasks: TaskTable, name: str, workers: int, controls: Controls,
        priority: list[int] | None = None, naive: bool = False):
    gate = Gate(tasks, controls, None if priority is None else priority.__getitem__)
    policy = make_policy(name, tasks, naive=naive)
    return simulate(tasks, policy, workers, gate=gate)


def running_at_starts(tasks: TaskTable, result) -> dict[tuple[int, float], int]:
    """For every start instant: how many tasks of that tenant run just after it."""
    out = {}
    for i in range(len(tasks)):
        k, t = tasks.tenant[i], result.start_s[i]
        out[k, t] = sum(
            1 for j in range(len(tasks))
            if tasks.tenant[j] == k and result.start_s[j] <= t < result.end_s[j]
        )
    return out


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=40, deadline=None)
@given(tasks=workloads(max_tasks=30), workers=st.integers(1, 5), controls=caps())
def test_caps_are_never_exceeded_and_every_task_runs(name, tasks, workers, controls):
    result = run(tasks, name, workers, controls)
    assert sorted(result.decisions.task) == list(range(len(tasks)))
    for (k, _t), n in running_at_starts(tasks, result).items():
        cap = controls.of(tasks.tenant_names[k]).cap
        assert cap is None or n <= cap


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=30, deadline=None)
@given(tasks=workloads(max_tasks=30), workers=st.integers(1, 5), controls=caps())
def test_a_worker_idles_only_when_every_waiting_tenant_is_at_its_cap(
    name, tasks, workers, controls
):
    """Caps are work-conserving: a task that waits past an instant where a worker was free
    belongs to a tenant that was at its cap then."""
    result = run(tasks, name, workers, controls)
    n = len(tasks)
    instants = sorted({*tasks.submit_s, *result.end_s})
    for t in instants:
        busy = sum(1 for j in range(n) if result.start_s[j] <= t < result.end_s[j])
        if busy >= workers:
            continue
        for i in range(n):
            if tasks.submit_s[i] <= t < result.start_s[i]:
                k = tasks.tenant[i]
                cap = controls.of(tasks.tenant_names[k]).cap
                running = sum(1 for j in range(n) if tasks.tenant[j] == k
                              and result.start_s[j] <= t < result.end_s[j])
                assert cap is not None and running >= cap


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=40, deadline=None)
@given(data=st.data(), workers=st.integers(1, 4), controls=caps())
def test_fast_and_naive_policies_agree_behind_the_gate(name, data, workers, controls):
    tasks = data.draw(workloads(max_tasks=30))
    priority = data.draw(priorities(len(tasks)))
    fast = run(tasks, name, workers, controls, priority).decisions
    naive = run(tasks, name, workers, controls, priority, naive=True).decisions
    assert list(zip(fast.t, fast.worker, fast.task, fast.score, *fast.parts)) == list(
        zip(naive.t, naive.worker, naive.task, naive.score, *naive.parts)
    )


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=40, deadline=None)
@given(data=st.data(), workers=st.integers(1, 4), controls=caps())
def test_priority_is_respected_within_a_tenant(name, data, workers, controls):
    """When a task is dispatched, no task of its tenant that is queued then (submitted, not
    yet dispatched) has a higher priority."""
    tasks = data.draw(workloads(max_tasks=30))
    priority = data.draw(priorities(len(tasks)))
    d = run(tasks, name, workers, controls, priority).decisions
    for n, (t, i) in enumerate(zip(d.t, d.task)):
        for j in d.task[n + 1:]:
            if tasks.tenant[j] == tasks.tenant[i] and tasks.submit_s[j] <= t:
                assert priority[j] <= priority[i]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), workers=st.integers(1, 4))
def test_priorities_do_not_change_which_tenant_round_robin_serves(data, workers):
    """Priority orders a tenant's own work only: with everything queued at once (so that
    no arrival falls between other decisions), the sequence of tenants served, and so every
    other tenant's share, is the one without priorities."""
    tasks = data.draw(workloads(max_tasks=30))
    tasks.submit_s[:] = [0.0] * len(tasks)
    priority = data.draw(priorities(len(tasks)))
    plain = simulate(tasks, make_policy("round-robin", tasks), workers).decisions
    gated = run(tasks, "round-robin", workers, Controls(), priority).decisions
    assert [tasks.tenant[i] for i in plain.task] == [tasks.tenant[i] for i in gated.task]


def test_default_controls_change_no_decision():
    """Weight 1 and no cap: the gate and the weights leave every decision as it was."""
    tasks = make_frame(*[T("abc"[i % 3], i / 3, 1 + i % 4, 1 + i % 5) for i in range(60)])
    for name in POLICIES:
        table = TaskTable.from_frame(tasks)
        plain = simulate(table, make_policy(name, table), 3).decisions
        controls = Controls({"a": TenantControl(weight=1.0), "b": TenantControl()})
        gated_table, _ = controlled(tasks, controls)
        gate = Gate(gated_table, controls, ([0] * 60).__getitem__)
        gated = simulate(gated_table, make_policy(name, gated_table), 3, gate=gate).decisions
        assert list(zip(plain.task, plain.score)) == list(zip(gated.task, gated.score)), name


def service_while_backlogged(name: str, weights: tuple[float, float], sizes_a, sizes_b,
                             workers: int, third: list[float]):
    """Tenants a and b submit everything at t=0 (c, if any, too); the service (dispatched
    seconds) of a and b after every decision while both still have tasks queued."""
    tasks = [T("a", 0.0, s, s) for s in sizes_a] + [T("b", 0.0, s, s) for s in sizes_b]
    tasks += [T("c", 0.0, s, s) for s in third]
    frame = make_frame(*tasks)
    controls = Controls({"a": TenantControl(weight=weights[0]),
                         "b": TenantControl(weight=weights[1])})
    table, gate = controlled(frame, controls)
    assert gate is None
    d = simulate(table, make_policy(name, table), workers).decisions
    left = {"a": len(sizes_a), "b": len(sizes_b)}
    served = {"a": 0.0, "b": 0.0}
    out = []
    for i in d.task:
        who = table.tenant_names[table.tenant[i]]
        if who in served:
            served[who] += table.duration_s[i]
            left[who] -= 1
        if min(left.values()) == 0:
            break
        out.append((served["a"], served["b"]))
    return out


_sizes = st.lists(st.integers(1, 8).map(float), min_size=1, max_size=25)


@pytest.mark.parametrize("name", ["vtc", "fair-sjf", "fair-boost"])
@settings(max_examples=150, deadline=None)
@given(
    w=st.tuples(st.sampled_from([0.5, 1.0, 2.0, 3.0]), st.sampled_from([0.5, 1.0, 2.0, 3.0])),
    sizes_a=_sizes, sizes_b=_sizes, third=st.lists(st.integers(1, 8).map(float), max_size=10),
    workers=st.integers(1, 4),
)
def test_weighted_shares_stay_within_vtcs_bound(name, w, sizes_a, sizes_b, third, workers):
    """While both are backlogged, service / weight of two tenants differs by at most the
    largest task divided by the smaller weight (Sheng et al., Theorem 4.4, weighted)."""
    bound = max(sizes_a + sizes_b) / min(w)
    for sa, sb in service_while_backlogged(name, w, sizes_a, sizes_b, workers, third):
        assert abs(sa / w[0] - sb / w[1]) <= bound + 1e-9


def test_weight_two_gets_twice_the_service_under_every_counting_policy():
    """A flood of equal tasks from both tenants: over the backlogged stretch, weight 2 gets
    twice the service of weight 1 under vtc and fair-sjf (up to one task), and strictly more
    under ifs-counter, whose counter is decayed and is one term of a score."""
    sizes = [1.0] * 400
    for name in ("vtc", "fair-sjf"):
        sa, sb = service_while_backlogged(name, (2.0, 1.0), sizes, sizes, 2, [])[-1]
        assert abs(sa - 2 * sb) <= 2.0, (name, sa, sb)
    sa, sb = service_while_backlogged("ifs-counter", (2.0, 1.0), sizes, sizes, 2, [])[-1]
    sa1, sb1 = service_while_backlogged("ifs-counter", (1.0, 1.0), sizes, sizes, 2, [])[-1]
    assert sa / sb > 1.3 * (sa1 / sb1)


@st.composite
def submits(draw: st.DrawFn):
    n = draw(st.integers(1, 60))
    times = sorted(draw(st.lists(st.integers(0, 200).map(lambda x: x / 4), min_size=n,
                                 max_size=n)))
    tenants = [draw(st.sampled_from("abc")) for _ in range(n)]
    return times, tenants


@settings(max_examples=200, deadline=None)
@given(s=submits(), rate=st.sampled_from([0.25, 1.0, 3.0]), burst=st.sampled_from([1.0, 2.0, 5.0]))
def test_rate_limits_are_never_exceeded(s, rate, burst):
    """Admitted submits of a limited tenant in any window [a_p, a_q] number at most
    burst + rate * (a_q - a_p); no task is admitted before its submission; order is kept;
    an unlimited tenant is untouched."""
    times, tenants = s
    controls = Controls({"a": TenantControl(rate=rate, burst=burst),
                         "b": TenantControl(rate=rate * 2)})
    admitted = shape_submits(times, tenants, controls)
    for name, size in (("a", burst), ("b", max(1.0, rate * 2))):
        mine = [(times[i], admitted[i]) for i in range(len(times)) if tenants[i] == name]
        a = [x for _, x in mine]
        assert all(x >= t for t, x in mine)
        assert a == sorted(a)
        for p, q in itertools.combinations(range(len(a)), 2):
            assert q - p + 1 <= size + rate * (2 if name == "b" else 1) * (a[q] - a[p]) + 1e-6
    assert all(admitted[i] == times[i] for i in range(len(times)) if tenants[i] == "c")


@settings(max_examples=200, deadline=None)
@given(s=submits(), rate=st.sampled_from([0.5, 2.0]), burst=st.sampled_from([1.0, 3.0]),
       batch=st.integers(1, 3))
def test_the_services_bucket_admits_no_more_than_its_rate(s, rate, burst, batch):
    """``RateLimits.take``: what it admits over any window fits the bucket; what it refuses
    comes with a positive wait after which the same request is admitted."""
    times, _ = s
    limits = RateLimits(Controls({"a": TenantControl(rate=rate, burst=burst)}))
    admitted: list[float] = []
    for t in times:
        wait = limits.take("a", t, batch)
        if batch > burst:
            assert math.isinf(wait)
            continue
        if wait == 0:
            admitted += [t] * batch
        else:
            assert wait > 0
            probe = TokenBucket(rate, burst, 0.0)
            probe.tokens, probe.at = limits.buckets["a"].tokens, limits.buckets["a"].at
            assert probe.take(t + wait + 1e-9, batch) == 0
    for p in range(len(admitted)):
        for q in range(p + batch, len(admitted), batch):
            assert q - p + 1 <= burst + rate * (admitted[q] - admitted[p]) + 1e-6


def test_waits_include_the_throttling_but_the_policy_sees_admitted_times():
    frame = make_frame(*[T("a", 0.0, 1.0) for _ in range(4)])
    table, gate = controlled(frame, Controls({"a": TenantControl(rate=1.0, burst=1.0)}))
    assert gate is None
    assert table.submit_s == [0.0, 1.0, 2.0, 3.0]


def test_tenants_files_in_three_formats(tmp_path):
    (tmp_path / "t.toml").write_text('[tenants.a]\nweight = 2\ncap = 3\n[tenants.b]\nrate = 5\n')
    (tmp_path / "t.json").write_text('[{"tenant": "a", "weight": 2, "cap": 3},'
                                     ' {"tenant": "b", "rate": 5}]')
    (tmp_path / "t.csv").write_text("tenant,weight,cap,rate\na,2,3,\nb,,,5\n")
    want = Controls({"a": TenantControl(weight=2.0, cap=3), "b": TenantControl(rate=5.0)})
    for name in ("t.toml", "t.json", "t.csv"):
        assert Controls.read(tmp_path / name) == want
    # a rate with its unit, as `desched tenants set --rate` takes it
    (tmp_path / "u.csv").write_text("tenant,rate\na,300/m\nb,5/s\n")
    assert Controls.read(tmp_path / "u.csv") == Controls(
        {"a": TenantControl(rate=5.0), "b": TenantControl(rate=5.0)})


@pytest.mark.parametrize(("text", "message"), [
    ("tenant,weight\na,0\n", "row 0 (tenant 'a'): weight must be"),
    ("tenant,cap\na,1.5\n", "row 0: column 'cap' has value '1.5'"),
    ("tenant,speed\na,1\n", "unknown column 'speed'"),
    ("tenant,burst\na,4\n", "burst needs a rate"),
    ("weight\n2\n", "column 'tenant'"),
    ("tenant,weight\na,1\na,2\n", "row 1: tenant 'a' has a row already"),
    ("tenant,rate\na,5/day\n", "column 'rate' has value '5/day' (a number per s, or R/s"),
])
def test_a_bad_tenants_file_is_one_line_naming_row_and_column(tmp_path, text, message):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(DeschedError, match="bad.csv: ") as err:
        Controls.read(path)
    assert message in str(err.value)


@pytest.mark.parametrize(("name", "text", "message"), [
    ("f.json", '[{"tenant": "a", "cap": 2.7}]', "row 0: column 'cap' has value 2.7"),
    ("f.toml", "[tenants.a]\ncap = 2.7\n", "row 0: column 'cap' has value 2.7"),
    ("t.json", '[{"tenant": "a", "cap": true}]', "row 0: column 'cap' has value True"),
    ("w.json", '[{"tenant": "a", "weight": true}]', "row 0: column 'weight' has value True"),
])
def test_json_and_toml_numbers_are_refused_as_csv_ones_are_not_truncated(
    tmp_path, name, text, message
):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(DeschedError, match=f"{name}: ") as err:
        Controls.read(path)
    assert message in str(err.value)
    (tmp_path / "whole.json").write_text('[{"tenant": "a", "cap": 3.0}]')
    assert Controls.read(tmp_path / "whole.json") == Controls({"a": TenantControl(cap=3)})


def test_a_csv_tenants_file_saved_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbftenant,cap\r\na,2\r\n")
    assert Controls.read(path) == Controls({"a": TenantControl(cap=2)})


def test_a_priority_column_that_is_not_integer_is_refused():
    frame = make_frame(T("a", 0, 1), T("a", 0, 1)).with_columns(
        pl.Series("priority", [1.5, 0.0]))
    with pytest.raises(DeschedError, match="column 'priority' has value 1.5 at row 0"):
        controlled(frame, None)


def test_a_cap_holds_a_flooding_tenant_to_its_share_of_workers():
    """Hand-worked: a floods 8 tasks at t=0, b sends 2 at t=0.5; 4 workers; a capped at 2
    runs at most 2 at once and b starts at once."""
    frame = make_frame(*[T("a", 0.0, 2.0) for _ in range(8)], T("b", 0.5, 1.0),
                       T("b", 0.5, 1.0))
    table, gate = controlled(frame, Controls({"a": TenantControl(cap=2)}))
    assert gate is not None
    result = simulate(table, make_policy("fifo", table), 4, gate=gate)
    assert list(result.start_s) == [0.0, 0.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, 0.5, 0.5]


@pytest.mark.parametrize("name", POLICIES)
@settings(max_examples=40, deadline=None)
@given(data=st.data(), controls=caps(), limit=st.sampled_from([None, 1, 3]))
def test_a_choice_under_a_fits_test_is_the_same_for_fast_and_naive_policies(
    name, data, controls, limit
):
    """The service's path: polls with a ``fits`` (free memory) over a queue where some
    tenants run tasks already; fast and naive policies behind gates agree on every choice,
    its refusal count and its score, poll after poll."""
    tasks = data.draw(workloads(max_tasks=25))
    priority = data.draw(priorities(len(tasks)))
    unfit = data.draw(st.sets(st.integers(0, len(tasks) - 1)))
    runs = data.draw(st.lists(st.integers(0, len(tasks) - 1), max_size=4, unique=True))
    sides = []
    for naive in (False, True):
        policy = make_policy(name, tasks, naive=naive)
        gate = Gate(tasks, controls, priority.__getitem__)
        for i in range(len(tasks)):
            if i not in runs:
                gate.queued(i)
                policy.push(i, 0.0)
            else:
                gate.started(i)
        choices = []
        while len(policy):
            i, skipped = gate.choose(policy, 1.0, lambda j: j not in unfit, limit)
            choices.append((i, skipped, policy.score if i is not None else None))
            if i is None:
                break
            gate.unqueued(i)
            gate.started(i)
        sides.append(choices)
    assert sides[0] == sides[1]


def test_simulate_notes_tenants_of_the_file_that_the_trace_lacks(tmp_path):
    from click.testing import CliRunner

    from desched.cli import cli
    from desched.trace import write_trace

    trace = write_trace(make_frame(T("a", 0.0, 1.0), T("b", 0.5, 1.0)), tmp_path / "t.parquet")
    (tmp_path / "t.csv").write_text("tenant,cap\na,1\nbb,2\nzz,1\n")
    res = CliRunner().invoke(cli, ["simulate", "--trace", str(trace), "--policy", "fifo",
                                   "--workers", "1", "--tenants", str(tmp_path / "t.csv"),
                                   "--out", str(tmp_path / "run")])
    assert res.exit_code == 0, res.output
    assert (f"note: {tmp_path / 't.csv'}: 2 tenant(s) not in the trace, whose controls apply "
            "to nothing: 'bb', 'zz'") in res.output
