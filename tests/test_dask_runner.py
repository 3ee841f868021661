"""The bench beyond one machine: ``evaluate_policies`` and ``tune_weights`` on a Dask cluster
through prefect-dask give exactly what the process runner (and, for tuning, no runner)
gives. A LocalCluster stands in for a real one: started by the runner (``address=None``) or
by the test and named by its scheduler address, as a real cluster is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("prefect_dask")

from desched.bench.evaluate import EvaluationRun
from desched.bench.weights import read_card

SMALL = "flood?tasks=240&tenants=5"
TINY = "flood?tasks=160&tenants=4"


def cells_text(result: EvaluationRun) -> str:
    out = Path(result.out) / "evaluation.json"
    saved = json.loads(out.read_text())
    saved["settings"].pop("runner")
    return json.dumps({"cells": saved["cells"], "rows": saved["rows"],
                       "settings": saved["settings"]}, sort_keys=True)


@pytest.fixture(scope="module")
def cluster():
    """A separate two-process Dask cluster, reached only through its address."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                      dashboard_address=None) as c:
        yield c


def test_evaluate_policies_on_dask_equals_the_process_runner(
    prefect_harness: None, tmp_path: Path, cluster
) -> None:
    from desched.flows.evaluate import evaluate_policies

    kw = {"traces": [SMALL], "policies": ["ifs-memoryless", "vtc", "fifo"], "seeds": [0, 1],
          "workers": 3, "max_parallel": 2}
    on_process = evaluate_policies(runner="process", out=str(tmp_path / "p"), **kw)
    on_local = evaluate_policies(runner="dask", out=str(tmp_path / "d"), **kw)
    on_cluster = evaluate_policies(runner="dask", address=cluster.scheduler_address,
                                   out=str(tmp_path / "c"), **kw)
    assert cells_text(on_local) == cells_text(on_process)
    assert cells_text(on_cluster) == cells_text(on_process)
    assert len(json.loads(cells_text(on_cluster))["cells"]) == 6


def card_text(out: Path) -> str:
    card = read_card(out).model_dump(mode="json")
    for varies in ("learner_seconds", "created", "name"):
        card.pop(varies)
    return json.dumps(card, sort_keys=True)


def test_tune_weights_on_dask_equals_the_process_runner_and_no_runner(
    prefect_harness: None, tmp_path: Path, cluster
) -> None:
    from desched.flows.tune import tune_weights

    kw = {"train": [TINY], "train_seeds": [0, 1], "heldout_seeds": [10, 11], "workers": 2,
          "trials": 3, "learner": "optuna"}
    here = tune_weights(out=str(tmp_path / "here"), **kw)
    on_process = tune_weights(out=str(tmp_path / "p"), runner="process", max_parallel=2, **kw)
    on_cluster = tune_weights(out=str(tmp_path / "c"), runner="dask",
                              address=cluster.scheduler_address, **kw)
    assert card_text(tmp_path / "p") == card_text(tmp_path / "here")
    assert card_text(tmp_path / "c") == card_text(tmp_path / "here")
    assert on_cluster.weights == on_process.weights == here.weights
    assert len(read_card(tmp_path / "c").learning_curve) == 3
