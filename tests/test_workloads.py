"""Synthetic workloads: valid, deterministic, at the requested load, shaped as named."""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from desched.errors import DeschedError
from desched.trace import OPTIONAL, validate_trace
from desched.workloads import SCENARIOS, TASK_TYPE_NAMES, generate, offered_load

NAMES = sorted(SCENARIOS)
TASKS = 6_000


@pytest.fixture(scope="module", params=NAMES)
def scenario(request: pytest.FixtureRequest) -> tuple[str, pl.DataFrame]:
    return request.param, generate(request.param, tasks=TASKS, seed=7)


def test_every_scenario_has_a_one_line_description() -> None:
    for name, s in SCENARIOS.items():
        assert s.name == name
        assert s.description and "\n" not in s.description


def test_every_scenario_yields_a_valid_trace_sorted_by_submit_time(scenario) -> None:
    name, frame = scenario
    assert validate_trace(frame, name).equals(frame)
    assert frame.height == TASKS
    assert frame["submit_s"].is_sorted()
    assert frame["task_id"].to_list()[:2] == ["s0000000", "s0000001"]
    for column in ("doc_bytes", "pages", "mem_mb"):
        assert frame.schema[column] == OPTIONAL[column]
    assert "predicted_s" not in frame.columns
    assert frame["pages"].min() >= 1
    assert frame["mem_mb"].min() > 0
    assert set(frame["task_type"].unique()) == set(TASK_TYPE_NAMES)


def test_the_same_seed_gives_the_same_frame_and_another_seed_a_different_one() -> None:
    for name in NAMES:
        a = generate(name, tasks=2_000, seed=3)
        assert_frame_equal(a, generate(name, tasks=2_000, seed=3))
        assert not a.equals(generate(name, tasks=2_000, seed=4))


def test_the_offered_load_is_the_requested_one(scenario) -> None:
    name, frame = scenario
    assert offered_load(frame, workers=8) == pytest.approx(0.85, rel=0.1), name


@pytest.mark.parametrize("load, workers", [(0.5, 4), (1.2, 32)])
def test_the_offered_load_follows_load_and_workers(load: float, workers: int) -> None:
    for name in NAMES:
        frame = generate(name, tasks=4_000, load=load, workers=workers, seed=1)
        assert offered_load(frame, workers) == pytest.approx(load, rel=0.1), name


def test_steady_and_diurnal_hold_the_same_documents_for_a_seed() -> None:
    def documents(name: str) -> pl.DataFrame:
        frame = generate(name, tasks=3_000, seed=6).drop("task_id", "submit_s")
        return frame.sort("doc_bytes", "duration_s")

    assert_frame_equal(documents("steady"), documents("diurnal"))


def test_offered_load_is_rate_times_mean_duration_over_workers() -> None:
    frame = pl.DataFrame({"submit_s": [0.0, 5.0, 10.0], "duration_s": [2.0, 4.0, 6.0]})
    assert offered_load(frame, workers=2) == pytest.approx(3 / 10 * 4 / 2)


def test_flood_has_one_tenant_with_a_third_of_the_tasks_in_a_burst_early_on() -> None:
    frame = generate("flood", tasks=TASKS, seed=2)
    counts = frame["tenant"].value_counts().sort("count", descending=True)
    assert counts["tenant"][0] == "flood"
    assert counts["count"][0] == pytest.approx(TASKS / 3, abs=1)
    assert counts["count"][1] < 0.75 * counts["count"][0]
    horizon = frame["submit_s"].max()
    flood = frame.filter(pl.col("tenant") == "flood")["submit_s"]
    assert flood.max() - flood.min() <= 60.0
    assert 0.10 * horizon <= flood.min() <= 0.20 * horizon
    others = frame.filter(pl.col("tenant") != "flood")["submit_s"]
    assert others.min() < 0.05 * horizon and others.max() > 0.95 * horizon


def test_many_tenants_has_a_thousand_tenants_unless_told_otherwise() -> None:
    assert generate("many-tenants", tasks=5_000)["tenant"].n_unique() == 1_000
    assert generate("many-tenants", tasks=5_000, tenants=300)["tenant"].n_unique() == 300


def test_every_tenant_submits_so_a_trace_has_exactly_the_requested_tenants() -> None:
    for name in NAMES:
        assert generate(name, tasks=500, tenants=50)["tenant"].n_unique() == 50


def test_tenant_shares_are_zipf_like_in_steady() -> None:
    counts = generate("steady", tasks=TASKS)["tenant"].value_counts()
    shares = counts.sort("count", descending=True)["count"].to_numpy() / TASKS
    assert shares[0] > 0.2 and shares[0] / shares[-1] > 8


def test_heavy_tail_has_a_few_huge_documents() -> None:
    heavy = generate("heavy-tail", tasks=TASKS, seed=5)
    steady = generate("steady", tasks=TASKS, seed=5)
    huge = (heavy["pages"] > 20 * steady["pages"].median()).sum()
    assert 0 < huge < 0.05 * TASKS
    assert heavy["pages"].max() > 10 * steady["pages"].max()


def hourly_counts(submit_s: pl.Series) -> np.ndarray:
    """Arrivals per whole hour of the trace (the last, partial hour left out)."""
    return np.bincount((submit_s.to_numpy() // 3_600).astype(int))[:-1]


def test_diurnal_arrivals_peak_and_trough_within_the_day() -> None:
    frame = generate("diurnal", tasks=20_000, seed=1)
    per_hour = hourly_counts(frame["submit_s"])
    assert per_hour.max() > 1.4 * per_hour.min()
    biggest = frame.filter(pl.col("tenant") == "t00")["submit_s"]
    assert hourly_counts(biggest).max() > 3 * hourly_counts(biggest).min()
    steady = generate("steady", tasks=20_000, seed=1)
    flat = hourly_counts(steady["submit_s"])
    assert flat.max() < 1.3 * flat.min()


def log_linear_r2(frame: pl.DataFrame) -> float:
    """R² of log duration on task type, tenant dummies, log pages and log bytes (least squares)."""

    def dummies(column: str) -> np.ndarray:
        codes = frame[column].cast(pl.Categorical).to_physical().to_numpy()
        return np.eye(codes.max() + 1)[codes][:, 1:]

    x = np.column_stack(
        [
            np.ones(frame.height),
            dummies("task_type"),
            dummies("tenant"),
            np.log(frame["pages"].to_numpy()),
            np.log(frame["doc_bytes"].to_numpy()),
        ]
    )
    y = np.log(frame["duration_s"].to_numpy())
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    residual = y - x @ coef
    return float(1 - residual.var() / y.var())


def test_duration_is_learnable_from_tenant_type_and_size_but_not_exactly() -> None:
    for name in NAMES:
        frame = generate(name, tasks=TASKS, seed=11)
        r2 = log_linear_r2(frame)
        assert 0.5 < r2 < 0.97, (name, r2)


def test_duration_grows_with_pages_within_each_task_type() -> None:
    frame = generate("steady", tasks=TASKS, seed=4)
    for task_type in TASK_TYPE_NAMES:
        part = frame.filter(pl.col("task_type") == task_type)
        rho = part.select(pl.corr("pages", "duration_s", method="spearman")).item()
        assert rho > 0.3, task_type
    means = frame.group_by("task_type").agg(pl.col("duration_s").mean())
    by_type = dict(zip(means["task_type"], means["duration_s"]))
    assert by_type["ocr_clean"] > by_type["extract"] > by_type["classify"]


def test_pages_grow_with_bytes_and_memory_with_size() -> None:
    frame = generate("steady", tasks=TASKS, seed=4)
    within = frame.group_by("tenant").agg(pl.corr("doc_bytes", "pages", method="spearman"))
    assert within["doc_bytes"].min() > 0.7
    assert frame.select(pl.corr("doc_bytes", "pages", method="spearman")).item() > 0.4
    ocr = frame.filter(pl.col("task_type") == "ocr_clean")
    assert ocr.select(pl.corr("pages", "mem_mb", method="spearman")).item() > 0.7


def test_tenants_differ_in_task_mix_and_document_size() -> None:
    frame = generate("steady", tasks=TASKS, seed=4)
    per_tenant = frame.group_by("tenant").agg(
        (pl.col("task_type") == "ocr_clean").mean().alias("ocr_share"),
        pl.col("doc_bytes").median().alias("median_bytes"),
    )
    assert per_tenant["ocr_share"].max() - per_tenant["ocr_share"].min() > 0.2
    assert per_tenant["median_bytes"].max() > 4 * per_tenant["median_bytes"].min()


def test_predicted_noise_adds_a_log_normal_prediction_and_changes_nothing_else() -> None:
    plain = generate("steady", tasks=TASKS, seed=9)
    noisy = generate("steady", tasks=TASKS, seed=9, predicted_noise=0.5)
    assert_frame_equal(noisy.drop("predicted_s"), plain)
    log_error = np.log(noisy["predicted_s"].to_numpy() / noisy["duration_s"].to_numpy())
    assert abs(log_error.mean()) < 0.05
    assert log_error.std() == pytest.approx(0.5, rel=0.05)
    oracle = generate("steady", tasks=100, seed=9, predicted_noise=0.0)
    assert_frame_equal(
        oracle.select(pl.col("predicted_s").alias("duration_s")), oracle.select("duration_s")
    )


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"name": "nope"}, "nope"),
        ({"name": "steady", "tasks": 0}, "tasks"),
        ({"name": "steady", "tasks": 2.5}, "tasks"),
        ({"name": "steady", "tenants": 0}, "tenants"),
        ({"name": "steady", "tasks": 10, "tenants": 11}, "tenants"),
        ({"name": "flood", "tenants": 1}, "tenants"),
        ({"name": "steady", "load": 0.0}, "load"),
        ({"name": "steady", "load": math.inf}, "load"),
        ({"name": "steady", "load": "high"}, "load"),
        ({"name": "steady", "workers": 0}, "workers"),
        ({"name": "steady", "workers": True}, "workers"),
        ({"name": "steady", "seed": -1}, "seed"),
        ({"name": "steady", "predicted_noise": -0.1}, "predicted_noise"),
        ({"name": "steady", "predicted_noise": math.nan}, "predicted_noise"),
    ],
)
def test_an_unknown_scenario_or_bad_argument_is_refused_by_name(kwargs, named) -> None:
    with pytest.raises(DeschedError, match=named):
        generate(**kwargs)


def test_task_ids_are_s_and_seven_digits_for_fewer_than_ten_million_tasks() -> None:
    frame = generate("steady", tasks=30, tenants=3)
    assert frame["task_id"].str.len_chars().unique().to_list() == [8]
