"""The bench's independent runs on processes (``desched.bench.pool``) give the serial run's
results bit for bit: evaluation cells, the demo's simulations, the judge's cases and verdicts.
Results are compared as JSON text (floats written in full, NaN included) or as files."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from desched.bench import demo, pooled_judge
from desched.bench import judge as jd
from desched.bench.evaluate import cells_of, run_cell
from desched.bench.pool import BACKGROUND_NICE, SERIAL, Pool
from tests.test_judge import write_swf


@pytest.fixture(scope="module")
def two() -> Iterator[Pool]:
    """Two spawned processes, started once for the module."""
    with Pool(jobs=2) as pool:
        yield pool


def text(records: list[Any]) -> str:
    """The records as JSON, without ``decisions_per_s`` (the wall-clock speed of a run, not
    one of its results)."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "decisions_per_s"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return json.dumps(strip([r.model_dump(mode="json") for r in records]), sort_keys=True)


def test_a_pool_runs_calls_in_order_and_only_leaves_this_process_when_told() -> None:
    ended: list[int] = []
    assert SERIAL(divmod, [(7, 2), (9, 4)], done=ended.append) == [(3, 1), (2, 1)]
    assert ended == [0, 1]
    assert not SERIAL.parallel and SERIAL.describe() == "serial"
    assert Pool(jobs=3).describe() == "3 processes"
    assert Pool(jobs=1, address="tcp://x:8786").describe() == "dask at tcp://x:8786"
    assert Pool().jobs >= 1  # one per core by default


class RecordingExecutor(ThreadPoolExecutor):
    """One thread that notes the arguments of each call in the order it is handed them."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.handed: list[tuple[Any, ...]] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        self.handed.append(args)
        return super().submit(fn, *args, **kwargs)


def test_costs_hand_the_costliest_calls_out_first_and_keep_the_results_in_order() -> None:
    pool = Pool(jobs=2)
    executor = RecordingExecutor()
    pool._executor = executor  # the executor the pool would start, here one that records
    with pool:
        ended: list[int] = []
        args = [(i, 10) for i in range(5)]
        assert pool(divmod, args, done=ended.append,
                    costs=[1, 9, 3, 9, 5]) == [divmod(i, 10) for i in range(5)]
        assert [a[0] for a in executor.handed] == [1, 3, 4, 2, 0]  # ties in their order
        assert sorted(ended) == [0, 1, 2, 3, 4]
        with pytest.raises(ValueError, match="2 costs for 3 calls"):
            pool(divmod, args[:3], costs=[1, 2])
    assert SERIAL(divmod, args[:2], costs=[1, 2]) == [(0, 0), (0, 1)]


def test_evaluation_cells_on_two_processes_equal_the_cells_run_here(two: Pool) -> None:
    cells = cells_of(["flood?tasks=300&tenants=5"], ["ifs-memoryless", "vtc", "sjf-oracle"],
                     [0, 1])
    args = [(t, p, s, 3) for t, p, s in cells]
    here = SERIAL(run_cell, args)
    ended: list[int] = []
    there = two(run_cell, args, done=ended.append)
    assert len(here) == 6
    assert text(there) == text(here)
    assert sorted(ended) == list(range(6))  # each call reported once as it ended


def test_the_demo_simulations_on_two_processes_equal_those_run_here(
    two: Pool, tmp_path: Path
) -> None:
    settings = demo.DemoSettings.of("quick")
    workloads = [demo.prepare_workload(
        demo.WorkloadSpec(name=name, kind="scenario", source=name, tasks=300, workers=3),
        settings, str(tmp_path)) for name in ("steady", "flood")]
    runs = {}
    for label, pool in (("here", SERIAL), ("there", two)):
        runs[label] = demo.simulate_q1_all(workloads, str(tmp_path / label / "logs"),
                                           str(tmp_path / label / "runs"), settings.baseline,
                                           pool)
    for name in ("steady", "flood"):
        here, there = runs["here"][name], runs["there"][name]
        assert text(list(there.summaries.values())) == text(list(here.summaries.values()))
        for policy, folder in here.dirs.items():
            for table in ("tasks.parquet", "decisions.parquet"):
                mine = pl.read_parquet(Path(there.dirs[policy]) / table)
                assert mine.equals(pl.read_parquet(Path(folder) / table)), (name, table)

    parts = {w.name: (w.trace, w.workers,
                      {"fifo": ("fifo", {}), "vtc": ("vtc", {}),
                       "ifs-memoryless": ("ifs-memoryless", {"w_wait": 0.7})})
             for w in workloads}
    here_sims = demo.simulate_heldout_all(parts, SERIAL)
    there_sims = demo.simulate_heldout_all(parts, two)
    assert text(list(there_sims.values())) == text(list(here_sims.values()))


def test_the_judge_on_two_processes_gives_the_serial_cases_verdicts_and_recommendation(
    two: Pool, tmp_path: Path
) -> None:
    from desched.models.training import TrainSettings

    settings = TrainSettings(max_rounds=40, num_threads=1)
    logs = [write_swf(tmp_path / f"syn{k}.swf", 500, k) for k in (1, 2)]
    here = [jd.prepare_log(p, cache_dir=None, settings=settings) for p in logs]
    here.append(jd.prepare_scenario("steady", cache_dir=None, tasks=400, settings=settings))
    there = pooled_judge.prepare_cases([(p, None) for p in logs], [("steady", 400)],
                                       cache_dir=None, settings=settings, pool=two)
    for a, b in zip(here, there, strict=True):
        assert b.frame.equals(a.frame) and b.info() == a.info()

    policies = ["sjf-predicted", "hrrn-predicted"]
    ran = pooled_judge.prefill_outcomes(there, policies, pool=two)
    assert ran == 2 * 4 + 3  # today, the bound and two candidates per log; no bound on steady
    assert pooled_judge.prefill_outcomes(there, policies, pool=two) == 0  # all cached
    serial = jd.run_judge(here, policies)
    pooled = jd.run_judge(there, policies)
    assert pooled.model_dump_json() == serial.model_dump_json()
    assert serial.recommendation is not None


def test_a_pool_on_a_dask_cluster_gives_the_serial_results() -> None:
    pytest.importorskip("distributed")
    from distributed import LocalCluster

    cells = cells_of(["steady?tasks=200&tenants=4"], ["fifo", "ifs-counter"], [3])
    args = [(t, p, s, 2) for t, p, s in cells]
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                      dashboard_address=None) as cluster, \
            Pool(address=cluster.scheduler_address) as pool:
        assert pool.parallel
        ended: list[int] = []
        assert text(pool(run_cell, args, done=ended.append)) == text(SERIAL(run_cell, args))
        assert sorted(ended) == list(range(len(args)))


def test_a_submitted_call_runs_beside_the_mapped_ones_and_gives_the_serial_result(
    two: Pool,
) -> None:
    args = ("flood?tasks=200&tenants=4", "vtc", 2, 2)
    job = two.submit(run_cell, *args)
    assert text(two(run_cell, [args])) == text([SERIAL.submit(run_cell, *args).result()])
    assert text([job.result()]) == text([run_cell(*args)])


@pytest.mark.skipif(not hasattr(os, "nice"), reason="no process priorities here")
def test_a_submitted_call_yields_the_cores_to_the_mapped_calls_and_the_caller(two: Pool) -> None:
    # os.nice(0) reports the niceness of the process that runs it: a submitted call's is
    # BACKGROUND_NICE above the caller's (at most 19), the mapped calls' is the caller's.
    here = os.nice(0)
    assert two.submit(os.nice, 0).result() == min(19, here + BACKGROUND_NICE)
    assert two(os.nice, [(0,), (0,)]) == [here, here]


def test_a_prefilled_run_takes_the_parameters_of_the_call_that_first_asks_for_it() -> None:
    from tests.test_holdout import tiny_case

    # one resolved spec, "guarded-sjf?a=5.0&beta=1.0", with strings or with numbers
    spec, point = "guarded-sjf?beta=1.0&a=5.0", {"a": 5.0, "beta": 1.0}
    fresh, filled = tiny_case("dev1"), tiny_case("dev1")
    assert pooled_judge.prefill([(filled, spec, {})]) == 1
    assert pooled_judge.prefill([(filled, "guarded-sjf", point)]) == 0  # the same run
    mine = jd.evaluate(filled, "guarded-sjf", point)
    assert mine.params == point  # the tuner's numbers, not the spec's strings
    assert mine.model_dump_json() == jd.evaluate(fresh, "guarded-sjf", point).model_dump_json()
    assert jd.evaluate(filled, spec).params == point  # the first call's, as without the prefill


@pytest.mark.parametrize("verdict", ["dev", "held-back"])
def test_the_judge_tuned_leave_one_log_out_on_prefilled_runs_gives_the_serial_result(
    verdict: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import desched.simulator
    from desched.bench.lolo import LoloTuner
    from tests.test_holdout import tiny_case

    def workloads() -> tuple[list[jd.Case], list[jd.Case] | None]:
        scenario = dataclasses.replace(tiny_case("steady"), kind="scenario", load=None)
        logs = [tiny_case("dev1"), tiny_case("dev2")]
        if verdict == "dev":
            return [*logs, scenario], None
        return [tiny_case("held1"), scenario], [*logs, scenario]

    policies = ["guarded-sjf", "hrrn-predicted"]
    results = []
    for prefilled in (False, True):
        cases, training = workloads()
        tuner = LoloTuner([c for c in (training or cases) if c.kind == "scenario"])
        if prefilled:
            runs = pooled_judge.judge_runs(cases, policies, tune=tuner, training_logs=training,
                                           deployable=True)
            todo = len(pooled_judge.pending(runs))
            assert pooled_judge.prefill(runs) == todo > 0
            assert pooled_judge.pending(runs) == []
            if verdict == "dev":  # every run is known ahead: the judge simulates nothing
                monkeypatch.setattr(desched.simulator, "simulate", None)
        results.append(jd.run_judge(cases, policies, tune=tuner, training_logs=training,
                                    deployable=True))
        monkeypatch.undo()
    serial, pooled = results
    assert pooled.model_dump_json() == serial.model_dump_json()


_PROCESS_END = """
import atexit, sys
from desched.bench.pool import _ends_quickly

_ends_quickly()
atexit.register(lambda: open(sys.argv[1] + ".handler", "w").write("ran"))
left_open = open(sys.argv[1] + ".teardown", "w")  # buffered: written when the teardown frees it
left_open.write("freed")
sys.stdout.write("unflushed result line")
sys.exit(0)
"""


@pytest.mark.parametrize("quick", [True, False])
def test_a_pool_process_ends_without_the_teardown_but_runs_later_handlers_and_flushes(
    tmp_path: Path, quick: bool
) -> None:
    import subprocess
    import sys

    code = _PROCESS_END if quick else _PROCESS_END.replace("_ends_quickly()", "")
    base = tmp_path / "p"
    res = subprocess.run([sys.executable, "-c", code, str(base)], capture_output=True, check=False,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "unflushed result line"
    assert (tmp_path / "p.handler").read_text() == "ran"  # registered after: runs first
    # the teardown, which frees module globals one by one, runs only without it
    assert (tmp_path / "p.teardown").read_text() == ("" if quick else "freed")
