"""The judge's runs predict as the live service does: at each arrival, from the history of
the tasks that had finished before it in that very run (desched.bench.online).

The reference is ``with_history`` (one sort and as-of joins in polars) over the run's own end
times, the seed history placed before them: no code shared with ``OnlineLabels``' deques."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import desched.bench.judge as jd
from desched.bench.online import LABEL_COLUMNS, OnlineLabels
from desched.bench.verdicts import case_table, run_labels
from desched.models.features import HISTORY, with_history
from desched.policies import make_policy
from desched.simulator import simulate
from tests.test_judge import write_swf

PREDICTIVE = ("boost-ledger", "sjf-predicted", "guarded-sjf", "hrrn-predicted")


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> jd.Case:
    folder = tmp_path_factory.mktemp("online")
    return jd.prepare_log(write_swf(folder / "syn.swf", 900, 3), cache_dir=folder / "cache")


@pytest.fixture(scope="module")
def tied(tmp_path_factory: pytest.TempPathFactory) -> jd.Case:
    """A case on whole seconds, not rescaled: completions land on arrival instants, and
    several on one instant (the strict "ended before" and the order within an instant)."""
    from desched.bench.judge_cases import online_frame, split_log
    from desched.models.training import TrainSettings, train
    from desched.swf import import_swf

    folder = tmp_path_factory.mktemp("tied")
    full, _ = import_swf(write_swf(folder / "tied.swf", 900, 5))
    full = full.sort("submit_s", maintain_order=True).with_columns(
        (pl.col("submit_s") // 120 * 120).alias("submit_s"),  # bursts on a 2-minute grid
        (pl.col("duration_s") // 60 * 60 + 60).alias("duration_s"))
    first, _ = split_log(full, 0.7)
    test, online = online_frame(train(first, TrainSettings(), source="tied"), full,
                                from_row=first.height)
    test = test.with_columns(pl.col("submit_s") - pl.col("submit_s").min())
    return jd.Case(name="tied", kind="log", source="tied", frame=test, workers=3,
                   mean_train_duration_s=1.0, online=online)


def reference_history(case: jd.Case, end_s: np.ndarray) -> np.ndarray:
    """``with_history`` of the test part on the run's clock, the seed before everything."""
    assert case.online is not None
    seed = case.online.seed
    k = len(seed)
    before = pl.DataFrame({
        "tenant": [s[0] for s in seed], "task_type": [s[1] for s in seed],
        "duration_s": [s[2] for s in seed],
        "submit_s": np.full(k, -4e12), "end_s": -2e12 + np.arange(k, dtype=np.float64),
    })
    run = pl.DataFrame({
        "tenant": case.frame["tenant"], "task_type": case.frame["task_type"],
        "duration_s": case.frame["duration_s"], "submit_s": case.frame["submit_s"],
        "end_s": end_s,
    })
    both = with_history(pl.concat([before, run], how="vertical_relaxed"))
    return both[k:].select(HISTORY).to_numpy()


@pytest.mark.parametrize("which", ["case", "tied"])
def test_the_seed_labels_in_one_call_are_the_labels_each_arrival_would_get_bit_for_bit(
        request: pytest.FixtureRequest, which: str) -> None:
    # online_frame's labels (nothing of the run has ended): one forest call per model over
    # every row, against arrive(i, -inf) task by task, the per-row reference
    case: jd.Case = request.getfixturevalue(which)
    assert case.online is not None and case.online.seed
    batch, loop = case_table(case), case_table(case)
    for table in (batch, loop):
        for c in LABEL_COLUMNS:
            getattr(table, c)[:] = [math.nan] * len(table)
    OnlineLabels(case.online, batch).seed_labels()
    labels = OnlineLabels(case.online, loop)
    for i in range(len(loop)):
        labels.arrive(i, -math.inf)
    seen = {(loop.tenant_names[loop.tenant[i]], case.online.task_type[i])
            for i in range(len(loop))}
    assert any(labels.history.values(*key) is not None for key in seen)  # history is read
    for c in LABEL_COLUMNS:
        got, want = np.array(getattr(batch, c)), np.array(getattr(loop, c))
        assert np.unique(want).size > 10 and not np.isnan(want).any()
        assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("which", ["case", "tied"])
@pytest.mark.parametrize("policy", PREDICTIVE)
def test_every_arrival_sees_the_history_of_what_had_finished_in_its_own_run(
        request: pytest.FixtureRequest, which: str, policy: str) -> None:
    case: jd.Case = request.getfixturevalue(which)
    tasks = case_table(case)
    run_policy = make_policy(policy, tasks)
    labels = run_labels(case, run_policy, tasks)
    assert isinstance(labels, OnlineLabels)
    labels.keep_rows = True
    result = simulate(tasks, run_policy, case.workers, labels=labels, engine="python")
    assert result.engine == "python"
    ours = np.array([labels.rows[i][labels.at:] for i in range(case.tasks)])
    ref = reference_history(case, np.frombuffer(result.end_s))
    assert np.allclose(ours, ref, rtol=1e-12, atol=0.0, equal_nan=True)
    assert np.isfinite(ref[:, 0]).sum() > case.tasks // 2  # history was there to see
    # the table the policy ranked on holds predictions made from those rows
    forest = labels.forests[0][1]
    for i in (0, case.tasks // 2, case.tasks - 1):
        forest.row[:] = labels.rows[i]
        assert tasks.predicted_s[i] == max(math.exp(forest.predict_row()), 1e-6)


def predictive_kernels() -> list[str]:
    """Every policy with a compiled kernel that ranks on predictions (not clairvoyant)."""
    from desched.bench.online import LABEL_COLUMNS
    from desched.kernels import KERNELS
    from desched.policies import REGISTRY

    return [name for name in KERNELS if set(REGISTRY[name].reads) & set(LABEL_COLUMNS)
            and not REGISTRY[name].clairvoyant()]


@pytest.mark.parametrize("which", ["case", "tied"])
@pytest.mark.parametrize("policy", predictive_kernels())
def test_a_kernel_run_predicts_and_decides_as_the_python_loop_bit_for_bit(
        request: pytest.FixtureRequest, which: str, policy: str) -> None:
    """The kernels' own history and forest calls (desched.kernels.source_online) against
    ``OnlineLabels`` in the Python loop (checked above against ``with_history``)."""
    case: jd.Case = request.getfixturevalue(which)
    runs = {}
    for engine in ("python", "kernel"):
        tasks = case_table(case)
        run_policy = make_policy(policy, tasks)
        result = simulate(tasks, run_policy, case.workers,
                          labels=run_labels(case, run_policy, tasks), engine=engine)
        runs[engine] = result, tasks
    (loop, loop_tasks), (kernel, kernel_tasks) = runs["python"], runs["kernel"]
    assert kernel.engine == f"kernel:{policy}"
    for column in ("predicted_s", "predicted_p50_s", "predicted_p90_s"):
        assert np.array_equal(getattr(kernel_tasks, column), getattr(loop_tasks, column),
                              equal_nan=True), column
    assert loop_tasks.predicted_s != case.frame["predicted_s"].to_list()  # the run predicted
    assert np.array_equal(np.frombuffer(kernel.start_s), np.frombuffer(loop.start_s))
    assert kernel.worker == loop.worker
    assert kernel.decisions.task == loop.decisions.task
    assert np.array_equal(np.frombuffer(kernel.decisions.score),
                          np.frombuffer(loop.decisions.score), equal_nan=True)


def test_the_memo_of_a_case_gives_each_run_the_predictions_a_forest_call_would(
        tied: jd.Case) -> None:
    """Runs of several policies one after another fill the case's memo (predictions by task
    and history values, desched.kernels.source_online); each run then predicts and decides as
    the Python loop and as a kernel run without the memo, and a run repeated finds every
    prediction there (no entry added)."""
    from desched.bench.online import MEMO_SLOTS, PLANS, kernel_plan

    assert tied.online is not None
    PLANS.clear()
    for policy in ("boost-ledger", "sjf-predicted", "fair-boost", "hrrn-predicted",
                   "boost-predicted", "guarded-sjf"):
        runs = {}
        for engine, memo in (("python", False), ("kernel", False), ("kernel", True)):
            tasks = case_table(tied)
            run_policy = make_policy(policy, tasks)
            labels = run_labels(tied, run_policy, tasks)
            labels.memo = memo
            result = simulate(tasks, run_policy, tied.workers, labels=labels, engine=engine)
            runs[engine, memo] = (np.frombuffer(result.start_s),
                                  [list(getattr(tasks, c)) for c in
                                   ("predicted_s", "predicted_p50_s", "predicted_p90_s")])
        loop = runs["python", False]
        for key in (("kernel", False), ("kernel", True)):
            assert np.array_equal(runs[key][0], loop[0]), (policy, key)
            for ours, ref in zip(runs[key][1], loop[1]):
                assert np.array_equal(ours, ref, equal_nan=True), (policy, key)
    (plan,) = PLANS.values()
    assert kernel_plan(tied.online, case_table(tied)) is plan
    n = tied.tasks
    _, _, at_count = plan.memo_offsets(tied.online.static.shape[1])
    made = plan.memo[at_count:at_count + n].copy()
    assert made.max() > 1  # runs saw different histories for some tasks
    assert made.min() >= 1
    tasks = case_table(tied)
    again = make_policy("guarded-sjf", tasks)  # the last run, repeated: every entry found
    simulate(tasks, again, tied.workers, labels=run_labels(tied, again, tasks))
    assert np.array_equal(plan.memo[at_count:at_count + n], made)
    assert MEMO_SLOTS >= 1


def test_the_memo_outlives_a_copy_of_the_case_as_the_judge_pool_ships_it(
        case: jd.Case) -> None:
    """A case pickled and read again (a pool call) finds this process's plan and memo; a
    table with other tenants gets its own."""
    import pickle

    from desched.bench.online import kernel_plan

    assert case.online is not None
    tasks = case_table(case)
    plan = kernel_plan(case.online, tasks)
    copy = pickle.loads(pickle.dumps(case))
    assert kernel_plan(copy.online, case_table(copy)) is plan
    other = case_table(case)
    other.tenant[0] = (other.tenant[0] + 1) % len(other.tenant_names)
    assert kernel_plan(case.online, other) is not plan


def test_predictive_kernels_cover_the_families() -> None:
    assert {"sjf-predicted", "hrrn-predicted", "guarded-sjf", "boost-predicted",
            "boost-ledger", "fair-boost"} <= set(predictive_kernels())


def test_a_run_predicts_differently_from_the_log_clock_and_from_the_seed_alone(
        case: jd.Case) -> None:
    tasks = case_table(case)
    policy = make_policy("sjf-predicted", tasks)
    simulate(tasks, policy, case.workers, labels=run_labels(case, policy, tasks))
    seed_alone = case.frame["predicted_s"].to_list()
    assert tasks.predicted_s != seed_alone  # the run's history moved its predictions


@pytest.mark.parametrize("engine", ["python", "kernel"])
def test_durations_of_tasks_that_had_not_finished_never_reach_a_prediction(
        case: jd.Case, engine: str) -> None:
    """Noise in the durations of tasks still unfinished at an arrival changes nothing of
    that arrival's prediction: the run is replayed with the last tasks' durations changed,
    and every task submitted before the first changed task ended predicts the same."""
    tasks = case_table(case)
    policy = make_policy("hrrn-predicted", tasks)
    simulate(tasks, policy, case.workers, labels=run_labels(case, policy, tasks), engine=engine)
    first = list(tasks.predicted_s)
    n = case.tasks
    cut = n - n // 4
    poisoned = case_table(case)
    rng = np.random.default_rng(0)
    for i in range(cut, n):
        poisoned.duration_s[i] = float(rng.uniform(1.0, 5000.0))
    # the first changed task cannot end before it is submitted: until then nothing differs
    horizon = min(poisoned.submit_s[cut:])
    policy2 = make_policy("hrrn-predicted", poisoned)
    simulate(poisoned, policy2, case.workers, labels=run_labels(case, policy2, poisoned),
             engine=engine)
    same = [i for i in range(n) if poisoned.submit_s[i] <= horizon]
    assert same and all(first[i] == poisoned.predicted_s[i] for i in same)
    assert any(first[i] != poisoned.predicted_s[i] for i in range(n))


def test_only_policies_that_rank_on_predictions_predict_during_the_run(case: jd.Case) -> None:
    from desched.bench.frontier import clairvoyant_case

    tasks = case_table(case)
    assert run_labels(case, make_policy("ifs-memoryless", tasks), tasks) is None
    assert run_labels(case, make_policy("sjf-oracle", tasks), tasks) is None
    twin = clairvoyant_case(case)
    assert twin.online is None  # fed the true durations, not a model's
    assert run_labels(twin, make_policy("sjf-predicted", tasks), tasks) is None


def test_a_cached_case_predicts_as_the_case_it_was_written_from(
        case: jd.Case, tmp_path: Path) -> None:
    log = Path(case.source)
    again = jd.prepare_log(log, cache_dir=Path(log).parent / "cache")  # read from the cache
    assert again.online is not None and case.online is not None
    assert np.array_equal(again.online.static, case.online.static, equal_nan=True)
    assert again.online.seed == case.online.seed
    fresh = jd.verdict_of(case, "boost-ledger")
    cached = jd.verdict_of(again, "boost-ledger")
    assert fresh.criteria["gain"].value == cached.criteria["gain"].value
    assert not math.isnan(fresh.criteria["gain"].value or math.nan)


@pytest.mark.parametrize("changed", range(4))
def test_a_memo_entry_is_found_only_for_the_same_four_history_values(changed: int) -> None:
    """``memo_slot`` (run by CPython on its own source): any one value different, a new
    entry; NaN matches NaN; with every slot made the oldest is replaced."""
    from desched.kernels import source_online as so

    slots, n = 2, 3
    ol = np.zeros(so.HEADER, dtype=np.int64)
    ol[so.H_SLOTS], ol[so.H_MKEY] = slots, 0
    ol[so.H_MVAL] = n * slots * 4
    ol[so.H_MFILL] = ol[so.H_MVAL] + n * slots * 3
    ost = np.zeros(int(ol[so.H_MFILL]) + n)
    history = np.array([5.0, 4.0, math.nan, 7.0])
    first = so.memo_slot(1, 0, ol, history.copy(), ost)
    assert first == 1 * slots and so.memo_slot(1, 0, ol, history.copy(), ost) == first
    assert np.isnan(ost[ol[so.H_MVAL] + 3 * first:ol[so.H_MVAL] + 3 * first + 3]).all()
    other = history.copy()
    other[changed] = 9.0
    second = so.memo_slot(1, 0, ol, other, ost)
    assert second == first + 1
    assert so.memo_slot(1, 0, ol, history.copy(), ost) == first  # both kept
    third = history.copy()
    third[changed] = 11.0
    assert so.memo_slot(1, 0, ol, third, ost) == first  # the oldest replaced
    assert so.memo_slot(1, 0, ol, other, ost) == second
    assert so.memo_slot(0, 0, ol, history.copy(), ost) == 0  # another task, its own entries
    ol[so.H_SLOTS] = 0
    assert so.memo_slot(1, 0, ol, history.copy(), ost) == -1


@pytest.mark.parametrize("change", ["tenants permuted", "last tasks cut"])
def test_a_table_other_than_the_case_frame_gets_its_own_plan_and_agrees(
        tied: jd.Case, change: str) -> None:
    """A run on a table with the case's tenant names but other tenants per task (a QA
    reproducer: the plan was once kept by the names alone), or on its first tasks only,
    predicts and starts as the Python loop, after a run on the case's own table."""
    def run(table: object, engine: str) -> tuple[list[float], np.ndarray]:
        tasks = table.copy()  # type: ignore[attr-defined]
        policy = make_policy("sjf-predicted", tasks)
        result = simulate(tasks, policy, tied.workers, labels=run_labels(tied, policy, tasks),
                          engine=engine)  # type: ignore[arg-type]
        return list(tasks.predicted_s), np.frombuffer(result.start_s)

    base = case_table(tied)
    run(base, "kernel")
    other = base.copy()
    if change == "tenants permuted":
        other.tenant = list(np.random.default_rng(0).permutation(other.tenant).tolist())
    else:
        for column in ("task_id", "tenant", "submit_s", "duration_s", "predicted_s",
                       "predicted_p50_s", "predicted_p90_s"):
            del getattr(other, column)[-10:]
    loop, kernel = run(other, "python"), run(other, "kernel")
    assert kernel[0] == loop[0]
    assert np.array_equal(kernel[1], loop[1])
    from desched.bench.online import kernel_plan

    assert tied.online is not None
    plan = kernel_plan(tied.online, other)
    assert plan is not kernel_plan(tied.online, base)
    pairs = {}
    for j, k in enumerate(other.tenant):  # one code per (tenant, task type) of this table
        assert pairs.setdefault((k, tied.online.task_type[j]), plan.pair[j]) == plan.pair[j]
    assert len(set(pairs.values())) == len(pairs)


def test_the_plans_kept_stay_within_their_count_and_bytes(case: jd.Case, tied: jd.Case,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The newest plan is always kept; older ones go past ``PLANS_KEPT`` plans or
    ``PLANS_BYTES`` of arrays (a log of a million test tasks would otherwise keep about
    290 MB a case in every process)."""
    from desched.bench import online

    assert case.online is not None and tied.online is not None
    online.PLANS.clear()
    first = online.kernel_plan(case.online, case_table(case))
    second = online.kernel_plan(tied.online, case_table(tied))
    assert list(online.PLANS.values()) == [first, second]
    monkeypatch.setattr(online, "PLANS_BYTES", second.memo.nbytes + second.pair.nbytes)
    assert online.kernel_plan(case.online, case_table(case)) is first  # found: nothing evicted
    third = online.kernel_plan(tied.online, case_table(tied).copy())
    assert third is second
    online.PLANS.clear()
    online.kernel_plan(case.online, case_table(case))
    online.kernel_plan(tied.online, case_table(tied))  # over the bytes: the older one goes
    assert len(online.PLANS) == 1 and next(iter(online.PLANS.values())).pair.size == tied.tasks
    monkeypatch.setattr(online, "PLANS_BYTES", 1)
    online.kernel_plan(case.online, case_table(case))  # alone over the bytes: kept anyway
    assert len(online.PLANS) == 1
    monkeypatch.setattr(online, "PLANS_BYTES", 1 << 40)
    monkeypatch.setattr(online, "PLANS_KEPT", 1)
    online.kernel_plan(tied.online, case_table(tied))
    assert len(online.PLANS) == 1


def test_the_whole_judge_gives_the_same_results_with_predictions_made_in_the_python_loop(
        case: jd.Case, tied: jd.Case, monkeypatch: pytest.MonkeyPatch) -> None:
    """``run_judge`` end to end (frontiers, every candidate, the rule), once as it runs and
    once with every run that predicts during the run forced into the Python loop."""
    import json

    import desched.simulator as sim

    def judged() -> str:
        fresh = [jd.Case(**{**c.__dict__, "outcomes": {}, "table": None, "tenants": None})
                 for c in (case, tied)]
        return json.dumps(jd.run_judge(fresh, deployable=True).model_dump(mode="json"), sort_keys=True)

    ours = judged()
    original = sim.simulate

    def loop_for_labels(tasks: object, policy: object, workers: int, **kw: object) -> object:
        if kw.get("labels") is not None:
            kw["engine"] = "python"
        return original(tasks, policy, workers, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(sim, "simulate", loop_for_labels)
    assert judged() == ours
