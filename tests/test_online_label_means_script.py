"""scripts/online_label_means.py reads the labels a run made as it went, not the cached ones."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import desched.bench.judge as jd
from scripts.online_label_means import label_means
from tests.test_judge import write_swf


@pytest.fixture(scope="module")
def case(tmp_path_factory: pytest.TempPathFactory) -> jd.Case:
    folder = tmp_path_factory.mktemp("means")
    return jd.prepare_log(write_swf(folder / "syn.swf", 900, 3), cache_dir=folder / "cache")


def test_the_ratios_are_those_of_the_labels_the_run_made(case: jd.Case) -> None:
    truth = np.asarray(case.frame["duration_s"].to_numpy(), dtype=np.float64)
    cached = np.asarray(case.frame["predicted_s"].to_numpy(), dtype=np.float64)
    got = label_means(case, "boost-predicted")
    assert set(got) == {"point_mean_ratio", "point_median_ratio", "p90_mean_ratio",
                        "p90_median_ratio"}
    assert all(math.isfinite(v) and v > 0 for v in got.values())
    # the run's history grows as its tasks finish, so its labels are not the cached ones
    assert got["point_mean_ratio"] != pytest.approx(cached.mean() / truth.mean(), rel=1e-9)
    fsp = label_means(case, "fsp-predicted")
    assert set(fsp) == {"point_mean_ratio", "point_median_ratio"}


def test_a_policy_that_makes_no_labels_is_refused(case: jd.Case) -> None:
    with pytest.raises(SystemExit, match="fifo makes no labels"):
        label_means(case, "fifo")


def test_a_missing_log_is_named(tmp_path: Path) -> None:
    from scripts.online_label_means import main

    with pytest.raises(SystemExit, match="no such log"):
        main(["--traces", str(tmp_path), "--cache", str(tmp_path / "cache")])
