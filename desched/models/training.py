"""Training of the duration model: time-ordered split, objectives compared, baselines, metrics.

The frame is sorted by ``submit_s`` and cut in three consecutive slices: train (the first
``1 - valid_frac - test_frac``), valid and test (the last ``test_frac``). Every candidate
objective is fitted on train with early stopping on valid; the one with the lowest valid MAE
is the model. Test is touched only to report: the model and the baselines are scored on the
same test rows, and a champion is re-scored on them before promotion
(``desched.models.promotion``).

Candidate objectives (``OBJECTIVES``): squared loss on log duration predicts the conditional
geometric mean; absolute loss predicts the conditional median, the minimiser of MAE; the
median is invariant under ``log``, so absolute loss on log duration predicts the median too,
with better-behaved gradients on heavy tails. p50 and p90 quantile models are fitted on log
duration (quantiles commute with the monotone ``exp``).

Baselines, fitted on train + valid and scored on test: the global median; the per-(tenant,
task type) mean (falling back to the tenant's mean, then the global mean); the mean of the
tenant's last two durations that ended before the submit (Tsafrir, Etsion and Feitelson,
IEEE TPDS 2007), falling back to the global median.

LightGBM is imported inside the functions that need it.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import polars as pl
from pydantic import Field
from pydantic_settings import SettingsConfigDict

from desched.errors import DeschedError
from desched.models.features import FeatureSpec, feature_matrix, with_history
from desched.models.gbm import import_lightgbm
from desched.settings import DeschedSettings
from desched.trace import group_means, validate_trace

if TYPE_CHECKING:
    import lightgbm

ObjectiveName = Literal["l2-log", "l1-log", "l1", "l2"]
OBJECTIVES: dict[ObjectiveName, tuple[str, bool]] = {
    "l2-log": ("regression", True),
    "l1-log": ("regression_l1", True),
    "l1": ("regression_l1", False),
    "l2": ("regression", False),
}
"""Objective name -> (LightGBM objective, target is log duration)."""
QUANTILES: tuple[float, ...] = (0.5, 0.9)
BASELINES: tuple[str, ...] = ("global_median", "tenant_type_mean", "tenant_last2_mean")


class TrainSettings(DeschedSettings):
    """Hyper-parameters of one training run of the duration model; each field also reads
    ``DESCHED_TRAIN_<NAME>``. Every field is recorded in the card."""

    model_config = SettingsConfigDict(env_prefix="DESCHED_TRAIN_")

    valid_frac: float = Field(
        default=0.15,
        ge=0,
        lt=1,
        description="share of the rows, after the training slice, that chooses the objective",
    )
    test_frac: float = Field(
        default=0.15,
        ge=0,
        lt=1,
        description="newest share of the rows, held out to score the model and promote it",
    )
    objectives: tuple[ObjectiveName, ...] = Field(
        default=tuple(OBJECTIVES), description="candidate objectives; the lowest valid MAE wins"
    )
    quantiles: tuple[float, ...] = Field(
        default=QUANTILES, description="quantile models fitted beside the model (p50, p90, ...)"
    )
    num_leaves: int = Field(default=31, ge=2, description="LightGBM leaves per tree")
    learning_rate: float = Field(default=0.05, gt=0, description="LightGBM shrinkage per round")
    min_data_in_leaf: int = Field(default=20, ge=1, description="LightGBM minimum rows per leaf")
    cat_smooth: float = Field(default=10.0, ge=0, description="LightGBM smoothing of categories")
    min_data_per_group: int = Field(
        default=100, ge=1, description="LightGBM minimum rows per category group"
    )
    max_rounds: int = Field(default=400, ge=1, description="most boosting rounds per model")
    early_stopping_rounds: int = Field(
        default=30, ge=1, description="rounds without a better valid L1 before a fit stops"
    )
    num_threads: int = Field(default=0, ge=0, description="LightGBM threads (0: one per core)")
    seed: int = Field(default=0, description="LightGBM seed (training is deterministic)")

    def lgb_params(self, objective: str, **extra: Any) -> dict[str, Any]:
        """LightGBM parameters of one fit with ``objective`` (deterministic, row-wise)."""
        return {
            "objective": objective,
            "num_leaves": self.num_leaves,
            "learning_rate": self.learning_rate,
            "min_data_in_leaf": self.min_data_in_leaf,
            "cat_smooth": self.cat_smooth,
            "min_data_per_group": self.min_data_per_group,
            "num_threads": self.num_threads,
            "seed": self.seed,
            "deterministic": True,
            "force_row_wise": True,
            "verbose": -1,
            **extra,
        }


@dataclass(frozen=True)
class Split:
    """Row ranges of the time-ordered split, over a frame sorted by ``submit_s``."""

    train: slice
    valid: slice
    test: slice

    @classmethod
    def of(cls, n: int, valid_frac: float, test_frac: float, source: str = "trace") -> Split:
        n_test = max(1, round(n * test_frac))
        n_valid = max(1, round(n * valid_frac))
        n_train = n - n_valid - n_test
        if n_train < 20:
            need = next(m for m in range(20, 10**9) if m - max(1, round(m * valid_frac))
                        - max(1, round(m * test_frac)) >= 20)
            raise DeschedError(
                f"{source}: {n} tasks, too few to train: need at least {need} (20 to train, "
                "the rest to validate and test)"
            )
        return cls(
            slice(0, n_train), slice(n_train, n_train + n_valid), slice(n_train + n_valid, n)
        )


@dataclass
class Model:
    """A fitted booster and how to turn its raw output into seconds."""

    booster: lightgbm.Booster
    log_target: bool

    def predict_s(self, x: np.ndarray) -> np.ndarray:
        raw = np.asarray(self.booster.predict(x), dtype=np.float64)
        return np.exp(raw) if self.log_target else raw


@dataclass
class TrainResult:
    """Everything a registry version records, plus the test rows for a champion re-score."""

    spec: FeatureSpec
    settings: TrainSettings
    objective: str
    model: Model
    quantile_models: dict[str, Model]
    objectives: dict[str, dict[str, float]]
    metrics: dict[str, float | None]
    baselines: dict[str, dict[str, float | None]]
    quantile_metrics: dict[str, float | None]
    window: dict[str, Any]
    training_time_s: float
    test_frame: pl.DataFrame = field(repr=False)


def mae(y: np.ndarray, pred: np.ndarray) -> float:
    return float(np.mean(np.abs(pred - y)))


def score(y: np.ndarray, pred: np.ndarray) -> dict[str, float | None]:
    """MAE (s), median absolute percentage error (%) and Spearman rank correlation.

    Spearman is None where it is undefined (a constant prediction, as the global median's).
    """
    from scipy.stats import spearmanr

    rho: float | None = None
    if np.ptp(pred) > 0 and np.ptp(y) > 0:
        value = float(spearmanr(y, pred).statistic)
        rho = None if math.isnan(value) else value
    return {
        "mae_s": mae(y, pred),
        "mdape_pct": float(np.median(np.abs(pred - y) / y) * 100.0),
        "spearman": rho,
    }


def prepare(frame: pl.DataFrame, source: str = "training data") -> pl.DataFrame:
    """The validated frame sorted by ``submit_s`` (stable), with the history features."""
    frame = validate_trace(frame, source)
    return with_history(frame.sort("submit_s", maintain_order=True))


def baseline_predictions(fit_rows: pl.DataFrame, test: pl.DataFrame) -> dict[str, np.ndarray]:
    """Each baseline's prediction on ``test``, fitted on ``fit_rows`` (earlier tasks)."""
    global_median = float(fit_rows["duration_s"].median())  # type: ignore[arg-type]
    global_mean = float(fit_rows["duration_s"].mean())  # type: ignore[arg-type]
    pair = group_means(fit_rows, ["tenant", "task_type"], "duration_s", "_pair")
    tenant = group_means(fit_rows, ["tenant"], "duration_s", "_tenant")
    type_mean = (
        test.select("tenant", "task_type")
        .join(pair, on=["tenant", "task_type"], how="left", maintain_order="left")
        .join(tenant, on="tenant", how="left", maintain_order="left")
        .select(pl.coalesce("_pair", "_tenant", pl.lit(global_mean)))
        .to_series()
        .to_numpy()
    )
    last2 = test["tenant_last2_mean_s"].fill_nan(global_median).to_numpy()
    return {
        "global_median": np.full(test.height, global_median),
        "tenant_type_mean": type_mean.astype(np.float64),
        "tenant_last2_mean": last2.astype(np.float64),
    }


def fit_model(
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_valid: np.ndarray,
    y_valid: np.ndarray,
    *,
    objective: str,
    log_target: bool,
    settings: TrainSettings,
    categorical: list[int],
    feature_names: list[str],
    **extra: Any,
) -> Model:
    """One LightGBM model with early stopping on the valid slice (L1 on the fitted target)."""
    lgb = import_lightgbm()

    t_train = np.log(y_train) if log_target else y_train
    t_valid = np.log(y_valid) if log_target else y_valid
    params = settings.lgb_params(objective, metric="l1", **extra)
    dtrain = lgb.Dataset(
        x_train,
        t_train,
        feature_name=feature_names,
        categorical_feature=categorical,
        free_raw_data=False,
    )
    dvalid = lgb.Dataset(x_valid, t_valid, reference=dtrain)
    booster = lgb.train(
        params,
        dtrain,
        num_boost_round=settings.max_rounds,
        valid_sets=[dvalid],
        callbacks=[lgb.early_stopping(settings.early_stopping_rounds, verbose=False)],
    )
    if booster.best_iteration and booster.best_iteration < booster.current_iteration():
        # Keep only the trees up to the best iteration, so the saved and compiled model is it.
        booster = lgb.Booster(
            model_str=booster.model_to_string(num_iteration=booster.best_iteration)
        )
    return Model(booster=booster, log_target=log_target)


def heldout_fingerprint(test: pl.DataFrame) -> str:
    """A hash of the held-out task ids, in order: equal slices have equal fingerprints."""
    digest = hashlib.sha256("\n".join(test["task_id"].to_list()).encode()).hexdigest()
    return digest[:16]


def train(
    frame: pl.DataFrame, settings: TrainSettings | None = None, source: str = "trace",
    progress: Callable[[str], None] | None = None,
) -> TrainResult:
    """Fit the duration model, its quantile models and the baselines on ``frame``; score all on
    the test slice. Cost: one LightGBM fit per objective and per quantile (``fits``);
    ``progress`` hears the name of each fit done."""
    settings = settings or TrainSettings()
    started = time.perf_counter()
    data = prepare(frame, source)
    split = Split.of(data.height, settings.valid_frac, settings.test_frac, source)
    train_rows, valid_rows, test_rows = data[split.train], data[split.valid], data[split.test]
    spec = FeatureSpec.fit(train_rows)
    x_train, x_valid, x_test = (
        feature_matrix(rows, spec) for rows in (train_rows, valid_rows, test_rows)
    )
    y_train, y_valid, y_test = (
        rows["duration_s"].to_numpy() for rows in (train_rows, valid_rows, test_rows)
    )

    fit = functools.partial(
        fit_model,
        x_train,
        y_train,
        x_valid,
        y_valid,
        settings=settings,
        categorical=spec.categorical_indices,
        feature_names=list(spec.names),
    )
    candidates: dict[str, Model] = {}
    compared: dict[str, dict[str, float]] = {}
    on_test: dict[str, np.ndarray] = {}
    for name in settings.objectives:
        lgb_objective, log_target = OBJECTIVES[name]
        model = fit(objective=lgb_objective, log_target=log_target)
        if progress is not None:
            progress(name)
        candidates[name] = model
        on_test[name] = model.predict_s(x_test)
        compared[name] = {
            "valid_mae_s": mae(y_valid, model.predict_s(x_valid)),
            "test_mae_s": mae(y_test, on_test[name]),
            "trees": float(model.booster.num_trees()),
        }
    chosen = min(compared, key=lambda n: (compared[n]["valid_mae_s"], n))
    model = candidates[chosen]

    quantile_models: dict[str, Model] = {}
    quantile_metrics: dict[str, float | None] = {}
    for q in settings.quantiles:
        key = f"p{round(q * 100)}"
        qm = fit(objective="quantile", log_target=True, alpha=q)
        if progress is not None:
            progress(key)
        quantile_models[key] = qm
        pred = qm.predict_s(x_test)
        diff = y_test - pred
        quantile_metrics[f"{key}_coverage"] = float(np.mean(y_test <= pred))
        quantile_metrics[f"{key}_pinball_s"] = float(np.mean(np.maximum(q * diff, (q - 1) * diff)))
        quantile_metrics[f"{key}_mae_s"] = mae(y_test, pred)

    fit_rows = pl.concat([train_rows, valid_rows])
    baselines = {
        name: score(y_test, pred)
        for name, pred in baseline_predictions(fit_rows, test_rows).items()
    }

    def span(rows: pl.DataFrame) -> dict[str, float | int]:
        return {
            "rows": rows.height,
            "submit_s_min": float(rows["submit_s"].min()),  # type: ignore[arg-type]
            "submit_s_max": float(rows["submit_s"].max()),  # type: ignore[arg-type]
        }

    window = {
        "source": source,
        "rows": data.height,
        "tenants": int(data["tenant"].n_unique()),
        "task_types": int(data["task_type"].n_unique()),
        "train": span(train_rows),
        "valid": span(valid_rows),
        "test": span(test_rows),
        "heldout_fingerprint": heldout_fingerprint(test_rows),
    }
    return TrainResult(
        spec=spec,
        settings=settings,
        objective=chosen,
        model=model,
        quantile_models=quantile_models,
        objectives=compared,
        metrics=score(y_test, on_test[chosen]),
        baselines=baselines,
        quantile_metrics=quantile_metrics,
        window=window,
        training_time_s=time.perf_counter() - started,
        test_frame=test_rows,
    )


def load_trace_or_swf(path: str | Path) -> pl.DataFrame:
    """A trace Parquet file, or an SWF log (``.swf``, ``.swf.gz``) imported as a trace (whose
    ``swf_wait_s`` gives the history features the jobs' real end times)."""
    from desched.swf import read_trace_or_swf

    return read_trace_or_swf(path)


def _read_completions(db_path: str | Path) -> pl.DataFrame:
    """Every successful completion record of the warehouse, ``t`` renamed ``end_s``, in
    (source, seq) order. Opens the database read-only."""
    import duckdb

    db_path = Path(db_path)
    if not db_path.is_file():
        raise DeschedError(f"{db_path}: no such warehouse database")
    try:
        with duckdb.connect(str(db_path), read_only=True) as con:
            columns = {row[0] for row in con.sql("DESCRIBE completions").fetchall()}
            order = ", ".join(c for c in ("source", "seq") if c in columns) or "task_id"
            frame: pl.DataFrame = con.sql(f"SELECT * FROM completions ORDER BY {order}").pl()
    except duckdb.Error as exc:
        raise DeschedError(
            f"{db_path}: cannot read table 'completions' ({str(exc).splitlines()[0]})"
        ) from None
    if "status" in frame.columns:
        frame = frame.filter(pl.col("status").is_null() | (pl.col("status") == "ok"))
    if "end_s" not in frame.columns and "t" in frame.columns:
        frame = frame.rename({"t": "end_s"})
    return frame


def _one_per_task(frame: pl.DataFrame) -> pl.DataFrame:
    """The same task logged by several files kept once (the first); distinct tasks that share
    an id across files get ``source:task_id`` ids."""
    frame = frame.unique(
        ["task_id", "tenant", "task_type", "submit_s", "duration_s"],
        keep="first",
        maintain_order=True,
    )
    if "source" in frame.columns and frame["task_id"].is_duplicated().any():
        frame = frame.with_columns((pl.col("source") + ":" + pl.col("task_id")).alias("task_id"))
    return frame


def load_warehouse(db_path: str | Path) -> pl.DataFrame:
    """Successful completion records of the DuckDB warehouse (``desched.warehouse``) as a
    trace frame; ``t``, the completion time, becomes ``end_s``. Opens the database read-only.

    The same task logged by several runs (one trace simulated under several policies) is kept
    once, from the first source in name order; distinct tasks that share an id across sources
    get ``source:task_id`` ids. Every workload of the warehouse is in the frame:
    ``load_warehouse_workloads`` separates them.
    """
    frame = _one_per_task(_read_completions(db_path))
    if frame.height == 0:
        raise DeschedError(f"{db_path}: table 'completions' has no successful completion")
    return frame


def workload_of(source: str) -> str:
    """The workload a log file belongs to: the folder it sits in (a simulation's run folder,
    the service's log folder, whose daily files are one workload)."""
    return str(Path(source).parent)


def workload_keys(folders: Iterable[str]) -> dict[str, str]:
    """A short, stable name for each workload folder, usable as a registry sub-folder and in
    an artifact key: the folder's last two path components (more where two folders of one
    warehouse would share a name), lower case, every run of other characters one ``-``
    (``/repo/data/logs`` -> ``data-logs``). The name depends on the folder as the warehouse
    recorded it, never on the directory a trainer runs in (it did: ``train --warehouse``
    from three directories made three registries, each with a first "champion")."""
    parts = {f: [p for p in Path(f).parts if p != Path(f).anchor] or ["workload"]
             for f in dict.fromkeys(folders)}
    depth = dict.fromkeys(parts, 2)

    def name(f: str) -> str:
        key = re.sub(r"[^a-z0-9]+", "-", "/".join(parts[f][-depth[f]:]).lower()).strip("-")
        return key or "workload"

    while True:
        keys = {f: name(f) for f in parts}
        seen = Counter(keys.values())
        longer = [f for f in parts if seen[keys[f]] > 1 and depth[f] < len(parts[f])]
        if not longer:
            break
        for f in longer:
            depth[f] += 1
    taken: Counter[str] = Counter()
    for f in parts:  # the same components twice ("a/b" and "/a/b"): numbered
        taken[keys[f]] += 1
        if seen[keys[f]] > 1:
            keys[f] = f"{keys[f]}-{taken[keys[f]]}"
    return keys


def workload_key(folder: str) -> str:
    """``workload_keys`` of one folder alone."""
    return workload_keys([folder])[folder]


def load_warehouse_workloads(db_path: str | Path) -> dict[str, pl.DataFrame]:
    """Successful completion records of the warehouse, one trace frame per workload
    (``workload_of`` its ``source``), in folder order; empty when there is none. A model is
    trained per workload: tasks of unrelated workloads (a flood scenario, a supercomputer's
    log) do not share one duration distribution, so one model fitted to their mix predicts
    neither well. Within a workload the same task logged by several files is kept once."""
    frame = _read_completions(db_path)
    if frame.height == 0:
        return {}
    if "source" not in frame.columns:
        return {str(db_path): _one_per_task(frame)}
    folders = frame["source"].map_elements(workload_of, return_dtype=pl.String)
    frame = frame.with_columns(folders.alias("_workload"))
    return {
        folder: _one_per_task(frame.filter(pl.col("_workload") == folder).drop("_workload"))
        for folder in sorted(frame["_workload"].unique().to_list())
    }
