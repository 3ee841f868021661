"""The workloads of the deployment judge (``desched.bench.judge``), prepared once and cached.

A *log case* is one real SWF log, cut by submit time: the first ``train_frac`` of its tasks
(in submit order, ties in file order) train the duration model with the very code of
``desched train`` (``desched.models.training.train``: its own train/valid/test slices, the
objective chosen on valid, p50 and p90 quantile models beside it); the model then predicts
the last ``1 - train_frac`` of the tasks, rebased to start at 0, is the *test part*. A
policy that ranks on predictions gets them as the live service makes them: at each task's
arrival in its own simulated run, from the tenant history of the tasks finished before it in
that run, seeded with the training tasks that had finished (on the log's clock) before the
first test task was submitted (``desched.bench.online``; ``Case.online``). The test part's
own ``predicted_s`` (the chosen model, floored at 1e-6 s like ``desched predict``),
``predicted_p50_s`` and ``predicted_p90_s`` columns are those with the seed history alone (what
is known at the cut, whatever the run): what the frame shows, never what a run ranks on. Its worker
count is ``desched.bench.specs.workers_for(test, load)`` and its submit times are then scaled
so that the offered load ``total work / submission span / workers`` is exactly ``load``
(durations untouched): the same rescaling as a trace spec's ``load`` option.

A *scenario case* is a DES scenario (``steady``, ``flood``) for the no-harm check: seed 1 of
the scenario (20,000 tasks, 8 workers, load 0.85: the demo's traces) is the test trace, and
the model is trained on seed 2 of the same scenario, so it never sees the tasks it predicts;
its runs predict as a log's do, from an empty history.

Preparing a log trains seven LightGBM models; the test part and its metadata are cached under
``cache_dir`` keyed by the log's content hash and every setting that changes them, so a
second run reads a Parquet file.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import polars as pl
from pydantic import ConfigDict

from desched.errors import DeschedError
from desched.records import Record
from desched.trace import MIN_PREDICTION_S

if TYPE_CHECKING:
    from desched.bench.online import OnlineModel

CACHE_VERSION = 4
"""Bumped when the preparation changes, so that stale cache files are not read (2: the
log's job count and its dropped jobs kept beside the test part; 3: the models and feature
rows of predictions made during each run, ``desched.bench.online``; 4: the worker count
capped at ``TASKS_PER_WORKER``)."""
TRAIN_FRAC = 0.7
LOAD = 0.9
TASKS_PER_WORKER = 10
"""A log's test part runs on at most one worker per this many of its tasks. ``workers_for``
keeps the log's own time scale, and a test part submitted within a moment for hours of work
would take more workers than tasks there: nothing would queue, every policy would be
first-come and keep every promise (a QA pass found 3,364,845,946 workers for 1,200 tasks).
Capped, its submissions are spread to the judge's load on the capped count instead
(``workers_wanted`` and ``cap_note`` say so). No bundled log comes near it (the most is one
worker per 392 tasks, LLNL-Atlas's)."""
SCENARIOS: tuple[str, ...] = ("steady", "flood")
SCENARIO_TASKS = 20_000
SCENARIO_WORKERS = 8
SCENARIO_LOAD = 0.85
SCENARIO_TEST_SEED = 1
SCENARIO_TRAIN_SEED = 2
PREDICTED_COLUMNS: tuple[str, ...] = ("predicted_s", "predicted_p50_s", "predicted_p90_s")

Progress = Callable[[str], None]
CaseKind = Literal["log", "scenario"]


class ModelInfo(Record):
    """The duration model that predicted a case's test part, on its own test slice
    (``desched.models.training.TrainResult``): the objective chosen on valid, its MAE and
    Spearman's rank correlation, the baseline with the lowest MAE and that MAE, the rows it
    trained on; then, as extra keys, each quantile model's coverage (``p50_coverage``, ...)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    objective: str
    mae_s: float | None
    spearman: float | None
    best_baseline: str
    best_baseline_mae_s: float | None
    train_rows: int

    @classmethod
    def of(cls, result: Any) -> ModelInfo:
        """The info of a ``TrainResult``."""
        best = min(result.baselines.items(), key=lambda kv: kv[1]["mae_s"])
        return cls(
            objective=result.objective,
            mae_s=result.metrics["mae_s"],
            spearman=result.metrics["spearman"],
            best_baseline=best[0],
            best_baseline_mae_s=best[1]["mae_s"],
            train_rows=result.window["rows"],
            **{k: v for k, v in result.quantile_metrics.items() if k.endswith("_coverage")},
        )


class CaseInfo(Record):
    """What ``judge.json`` records about a case (``Case.info``)."""

    name: str
    kind: CaseKind
    source: str
    tasks: int
    tenants: int
    workers: int
    mean_train_duration_s: float
    model: ModelInfo | None
    load: float | None
    train_frac: float | None
    log_jobs: int | None = None
    """Job lines in the SWF file (None for a scenario)."""
    log_dropped: dict[str, int] | None = None
    """Jobs of the file the import dropped, per reason (``desched.swf.SwfReport.dropped``)."""
    workers_wanted: int | None = None
    """Where ``TASKS_PER_WORKER`` capped the worker count, the count the log's own time scale
    asked for (None where it did not bind)."""
    top_work_share: float | None = None
    """Share of the test part's work (sum of durations) its longest ``TOP_TASKS_SHARE`` of
    tasks hold (``shape_note``); None for a scenario."""
    longest_gap_share: float | None = None
    """The longest time between two successive submissions of the test part, as a share of
    its submission span (``shape_note``); None for a scenario or a span of 0."""


TOP_TASKS_SHARE = 0.01
TOP_WORK_NOTE = 0.5
GAP_NOTE = 0.25
"""``shape_note`` speaks where the longest 1 % of a log's test tasks (at least one) hold half
its work or more (the load of 0.9 is then mostly theirs: the other tasks barely queue), or
where one gap without a submission is a quarter of its span or more (the load is an average
over an outage: the tasks around it queue more than that). Fixed before any log was looked
at with them; a QA pass built both kinds of log."""


CACHED = ("name", "kind", "source", "workers", "mean_train_duration_s", "model", "load",
          "train_frac", "log_jobs", "log_dropped", "workers_wanted")
"""The fields of ``CaseInfo`` a cached case keeps beside its test part (the rest are read
off the frame)."""


@dataclass
class Case:
    """One workload of the judge: its test trace (with predictions) and how to run it.

    ``outcomes`` caches ``desched.bench.judge.evaluate`` results by resolved policy spec.
    """

    name: str
    kind: CaseKind
    source: str
    frame: pl.DataFrame
    workers: int
    mean_train_duration_s: float
    model: ModelInfo | None = None
    """The model that made the predictions (None where none did: a clairvoyant twin, whose
    predictions are the true durations, or a case built by hand)."""
    load: float | None = LOAD
    """Offered load the test part was rescaled to (None for a scenario: its own)."""
    train_frac: float | None = TRAIN_FRAC
    """Share of the log's tasks that trained the model (None for a scenario: another seed)."""
    log_jobs: int | None = None
    """Job lines in the SWF file; the import kept ``log_jobs - sum(log_dropped)`` of them."""
    log_dropped: dict[str, int] | None = None
    """Jobs the import dropped, per reason (None for a scenario)."""
    workers_wanted: int | None = None
    """The worker count ``TASKS_PER_WORKER`` capped, where it did (``CaseInfo``)."""
    outcomes: dict[str, Any] = field(default_factory=dict, repr=False)
    tenants: tuple[Any, ...] | None = field(default=None, repr=False, compare=False)
    """(frame, sorted tenant names, each task's code): ``verdicts.case_tenants``' cache."""
    table: tuple[Any, ...] | None = field(default=None, repr=False, compare=False)
    """(frame, its ``TaskTable``): ``verdicts.case_table``'s cache."""
    online: OnlineModel | None = field(default=None, repr=False, compare=False)
    """What a run needs to predict as it goes (module docstring); None where the frame's own
    predictions are the ones to rank on (a clairvoyant twin, a case built by hand)."""

    @property
    def tasks(self) -> int:
        return self.frame.height

    def info(self) -> CaseInfo:
        """What ``judge.json`` records about the case."""
        return CaseInfo(
            name=self.name,
            kind=self.kind,
            source=self.source,
            tasks=self.tasks,
            tenants=int(self.frame["tenant"].n_unique()),
            workers=self.workers,
            mean_train_duration_s=self.mean_train_duration_s,
            model=self.model,
            load=self.load,
            train_frac=self.train_frac,
            log_jobs=self.log_jobs,
            log_dropped=self.log_dropped,
            workers_wanted=self.workers_wanted,
            **(_shape(self.frame) if self.kind == "log" else {}),
        )


def _shape(frame: pl.DataFrame) -> dict[str, float | None]:
    """``CaseInfo``'s ``top_work_share`` and ``longest_gap_share`` of a test part."""
    duration = np.sort(frame["duration_s"].to_numpy())[::-1]
    top = max(1, math.ceil(TOP_TASKS_SHARE * duration.size))
    work = float(duration.sum())
    submit = np.sort(frame["submit_s"].to_numpy())
    span = float(submit[-1] - submit[0]) if submit.size else 0.0
    return {
        "top_work_share": float(duration[:top].sum()) / work if work > 0 else None,
        "longest_gap_share": float(np.diff(submit).max()) / span if span > 0 else None,
    }


def case_notes(case: Case | CaseInfo) -> list[str]:
    """What a user should hear about a prepared case: ``dropped_note``, ``load_note``,
    ``cap_note``, ``shape_note``."""
    return [note for note in (dropped_note(case), load_note(case), cap_note(case),
                              shape_note(case)) if note]


def shape_note(case: Case | CaseInfo) -> str | None:
    """Where a few of a log's test tasks hold most of its work, or one gap without a
    submission most of its span (``GAP_NOTE``), a line that says what the load then means."""
    info = case.info() if isinstance(case, Case) else case
    said = []
    if info.top_work_share is not None and info.top_work_share >= TOP_WORK_NOTE:
        top = max(1, math.ceil(TOP_TASKS_SHARE * info.tasks))
        said.append(f"its longest {top:,} of {info.tasks:,} test tasks hold "
                    f"{info.top_work_share:.0%} of their work, so the load of "
                    f"{info.load:g} is mostly theirs and the other tasks queue little")
    if info.longest_gap_share is not None and info.longest_gap_share >= GAP_NOTE:
        said.append(f"one gap without a submission is {info.longest_gap_share:.0%} of its "
                    f"test part's span, so the load of {info.load:g} is an average over an "
                    "idle stretch and the tasks around it queue more than that")
    if not said or info.load is None:
        return None
    return f"{info.name}: " + "; ".join(said) + " (the figures describe that shape)"


def cap_note(case: Case | CaseInfo) -> str | None:
    """Where ``TASKS_PER_WORKER`` capped a log case's workers, a line that says so."""
    if case.workers_wanted is None:
        return None
    return (f"{case.name}: its test part's own submission span would need "
            f"{case.workers_wanted:,} workers for load {case.load:g} on {case.tasks:,} tasks, "
            f"and nothing would queue; it runs on {case.workers:,} (one per "
            f"{TASKS_PER_WORKER} tasks), its submissions spread to that load")


def load_note(case: Case | CaseInfo) -> str | None:
    """Where a log's test part could not be rescaled to the judge's load (every task of it
    submitted at one instant), a line that says so, else None."""
    if case.kind != "log" or case.load is not None:
        return None
    return (f"{case.name}: every test task is submitted at one instant, so no load could be "
            "applied (the log's own arrivals are kept)")


def dropped_note(case: Case | CaseInfo) -> str | None:
    """``NAME: kept K of the log's N jobs (dropped REASON COUNT, ...)`` where the SWF import
    dropped any job of the case's log, else None."""
    if not case.log_dropped or case.log_jobs is None:
        return None
    dropped = {why: n for why, n in case.log_dropped.items() if n}
    if not dropped:
        return None
    reasons = ", ".join(f"{why} {n}" for why, n in dropped.items())
    kept = case.log_jobs - sum(dropped.values())
    return f"{case.name}: kept {kept} of the log's {case.log_jobs} jobs (dropped {reasons})"


def default_logs() -> list[Path]:
    """The bundled real logs (``desched.samples.traces_dir()/*.swf.gz``), sorted by name."""
    from desched.samples import require, traces_dir

    folder = require(traces_dir(), "folder of SWF logs")
    logs = sorted(folder.glob("*.swf.gz")) + sorted(folder.glob("*.swf"))
    if not logs:
        raise DeschedError(f"{folder}: no SWF log (*.swf, *.swf.gz)")
    return logs


def log_name(path: Path) -> str:
    """``LANL-CM5-1994-4.1-cln`` for ``.../LANL-CM5-1994-4.1-cln.swf.gz``."""
    from desched.swf import log_stem

    return log_stem(path)


def _digest(*parts: Any) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else json.dumps(p, sort_keys=True).encode())
        h.update(b"\x1f")
    return h.hexdigest()[:16]


def predict_frame(result: Any, frame: pl.DataFrame, from_row: int = 0) -> pl.DataFrame:
    """``frame[from_row:]`` plus ``PREDICTED_COLUMNS`` from a ``TrainResult``, the history
    from the whole frame's own finished tasks on the frame's clock (as ``desched predict``,
    ``Predictor.features_of``): a model-accuracy study's predictions (``scripts/``), not what
    a judge run ranks on, which ``online_frame`` prepares. A quantile model that was not
    fitted leaves its column out."""
    from desched.models.features import feature_matrix, with_history

    x = feature_matrix(with_history(frame), result.spec)[from_row:]
    frame = frame[from_row:]
    columns = [pl.Series("predicted_s", np.maximum(result.model.predict_s(x), MIN_PREDICTION_S))]
    for key, column in (("p50", "predicted_p50_s"), ("p90", "predicted_p90_s")):
        model = result.quantile_models.get(key)
        if model is not None:
            columns.append(pl.Series(column, np.maximum(model.predict_s(x), MIN_PREDICTION_S)))
    return frame.drop([c for c in PREDICTED_COLUMNS if c in frame.columns]).with_columns(columns)


def online_frame(result: Any, frame: pl.DataFrame, from_row: int = 0
                 ) -> tuple[pl.DataFrame, OnlineModel]:
    """``frame[from_row:]`` (sorted by ``submit_s``) with ``PREDICTED_COLUMNS`` from a
    ``TrainResult`` made with the seed history alone, and the ``OnlineModel`` its runs predict
    with (module docstring). The seed: the rows before ``from_row`` that ended (on the
    frame's clock, ``desched.models.features.end_times``) before ``frame[from_row]`` was
    submitted, in end order. A quantile model that was not fitted leaves its column out."""
    from desched.bench.online import OnlineLabels, OnlineModel
    from desched.models.features import HISTORY, end_times, feature_matrix
    from desched.trace import TaskTable

    test = frame[from_row:]
    seed: list[tuple[str, str, float]] = []
    if from_row:
        cut = float(test["submit_s"][0])
        ended = (frame[:from_row].with_columns(end_times(frame).alias("_end_s"))
                 .filter(pl.col("_end_s") < cut).sort("_end_s", maintain_order=True))
        seed = list(zip(ended["tenant"].to_list(), ended["task_type"].to_list(),
                        ended["duration_s"].to_list()))
    blank = test.with_columns([pl.lit(None, pl.Float64).alias(c) for c in HISTORY])
    static = feature_matrix(blank, result.spec)
    online = OnlineModel.of(result, static, test["task_type"].to_list(), seed)
    test = test.drop([c for c in PREDICTED_COLUMNS if c in test.columns])
    table = TaskTable.from_frame(test.with_columns(pl.lit(math.nan).alias("predicted_s")))
    OnlineLabels(online, table).seed_labels()  # nothing of the run has ended: the seed alone
    return test.with_columns([pl.Series(c, getattr(table, c)) for c in
                              PREDICTED_COLUMNS if c in online.models]), online


def rescale_to_load(frame: pl.DataFrame, workers: int, load: float) -> pl.DataFrame:
    """``frame`` with ``submit_s`` scaled so that ``sum(duration) / span / workers == load``."""
    span = float(frame["submit_s"].max()) - float(frame["submit_s"].min())  # type: ignore[arg-type]
    if span <= 0:
        return frame
    offered = float(frame["duration_s"].sum()) / (span * workers)
    return frame.with_columns(pl.col("submit_s") * (offered / load))


def min_log_jobs(train_frac: float, settings: Any) -> int:
    """The fewest usable jobs a log needs for ``prepare_log``: its first ``train_frac`` must
    hold ``desched.models.training``'s smallest train/valid/test split."""
    from desched.models.training import Split

    for n in range(2, 10**7):
        cut = round(n * train_frac)
        if 1 <= cut < n:
            try:
                Split.of(cut, settings.valid_frac, settings.test_frac)
            except DeschedError:
                continue
            return n
    raise DeschedError(f"no log is long enough for a training share of {train_frac}")


def split_log(frame: pl.DataFrame, train_frac: float, source: str = "log"
              ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The first ``train_frac`` of the tasks by submit time and the rest (stable order)."""
    frame = frame.sort("submit_s", maintain_order=True)
    cut = round(frame.height * train_frac)
    if cut < 1 or cut >= frame.height:
        raise DeschedError(f"{source}: {frame.height} usable task(s), too few to split into a "
                           f"training part ({train_frac:g}) and a test part")
    return frame[:cut], frame[cut:]


def _train(frame: pl.DataFrame, source: str, settings: Any) -> Any:
    from desched.models.training import train

    return train(frame, settings, source=source)


def _files(base: Path) -> tuple[Path, Path]:
    """The metadata and test-part files of cache entry ``base`` (``NAME-KEY``; a log name has
    dots, so no ``with_suffix``)."""
    return base.parent / f"{base.name}.json", base.parent / f"{base.name}.parquet"


def _online_files(base: Path) -> tuple[Path, Path]:
    """The ``OnlineModel`` of cache entry ``base``: its models and seed, its feature rows."""
    return base.parent / f"{base.name}.online.json", base.parent / f"{base.name}.online.npy"


def _write_online(base: Path, online: OnlineModel) -> None:
    meta_path, rows_path = _online_files(base)
    np.save(rows_path, online.static, allow_pickle=False)
    meta_path.write_text(json.dumps({
        "spec": online.spec, "models": online.models, "task_type": online.task_type,
        "seed": online.seed}))


def _read_online(base: Path) -> OnlineModel | None:
    from desched.bench.online import OnlineModel

    meta_path, rows_path = _online_files(base)
    try:
        meta = json.loads(meta_path.read_text())
        static = np.load(rows_path, allow_pickle=False)
        return OnlineModel(spec=meta["spec"],
                           models={k: (str(v[0]), bool(v[1])) for k, v in meta["models"].items()},
                           static=static, task_type=[str(t) for t in meta["task_type"]],
                           seed=[(str(a), str(b), float(c)) for a, b, c in meta["seed"]])
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def _read_cache(base: Path) -> Case | None:
    meta_path, data_path = _files(base)
    if not (meta_path.is_file() and data_path.is_file()):
        return None
    try:
        meta = json.loads(meta_path.read_text())
        frame = pl.read_parquet(data_path)
        model = meta.pop("model", None)
        model = None if model is None else ModelInfo.model_validate(model)
    except (OSError, ValueError, pl.exceptions.PolarsError):  # a ValidationError too
        return None
    if meta.get("kind") == "scenario":
        meta.setdefault("load", None)
        meta.setdefault("train_frac", None)
    online = _read_online(base)
    if online is None or online.static.shape[0] != frame.height:
        return None
    return Case(frame=frame, model=model, online=online, **meta)


def _write_cache(base: Path, case: Case) -> None:
    meta_path, data_path = _files(base)
    base.parent.mkdir(parents=True, exist_ok=True)
    case.frame.write_parquet(data_path)
    if case.online is not None:
        _write_online(base, case.online)
    meta = case.info().model_dump(include=set(CACHED))
    meta_path.write_text(json.dumps(meta, indent=1))


def prepare_log(
    path: str | Path,
    *,
    cache_dir: Path | None,
    max_tasks: int | None = None,
    train_frac: float = TRAIN_FRAC,
    load: float = LOAD,
    settings: Any = None,
    progress: Progress | None = None,
) -> Case:
    """The log case of an SWF log (module docstring); ``max_tasks`` keeps only its first tasks
    by submit time (for tests and quick looks). Cached under ``cache_dir`` when given."""
    from desched.bench.specs import workers_for
    from desched.models.training import TrainSettings
    from desched.swf import import_swf

    path = Path(path)
    if not path.is_file():
        raise DeschedError(f"{path}: no such SWF log")
    settings = settings or TrainSettings()
    name = log_name(path)
    key = _digest(path.read_bytes(), CACHE_VERSION, max_tasks, train_frac, load,
                  settings.model_dump(mode="json"))
    base = cache_dir / f"{name}-{key}" if cache_dir is not None else None
    if base is not None and (cached := _read_cache(base)) is not None:
        if progress:
            progress(f"{name}: cached ({cached.tasks} test tasks, {cached.workers} workers)")
        return cached
    full, report = import_swf(path)
    full = full.sort("submit_s", maintain_order=True)
    if max_tasks is not None:
        full = full.head(max_tasks)
    need = min_log_jobs(train_frac, settings)
    if full.height < need:  # say how many jobs it takes, and where the rest went
        dropped = ", ".join(f"{why} {n}" for why, n in report.dropped.items() if n)
        kept = (f"the import kept {report.jobs_kept} of its {report.job_lines} jobs (dropped "
                f"{dropped})" if dropped else f"it has {report.jobs_kept} usable jobs")
        raise DeschedError(f"{path}: {full.height} usable task(s), too few: the judge needs a "
                           f"log of at least {need} usable jobs (it trains on the first "
                           f"{train_frac:.0%}), and {kept}")
    train_part, _test_part = split_log(full, train_frac, str(path))
    if progress:
        progress(f"{name}: training on {train_part.height} tasks")
    result = _train(train_part, str(path), settings)
    predicted, online = online_frame(result, full, from_row=train_part.height)
    t0 = float(predicted["submit_s"].min())  # type: ignore[arg-type]
    test = predicted.with_columns(pl.col("submit_s") - t0)
    wanted = workers_for(test, load)
    workers = min(wanted, max(1, test.height // TASKS_PER_WORKER))
    # one instant: no span to rescale, the log's own arrivals are kept (``load_note``)
    applied = load if float(test["submit_s"].max()) > 0 else None  # type: ignore[arg-type]
    test = rescale_to_load(test, workers, load)
    model = ModelInfo.of(result)
    case = Case(name=name, kind="log", source=str(path), frame=test, workers=workers,
                mean_train_duration_s=float(train_part["duration_s"].mean()),  # type: ignore[arg-type]
                model=model, load=applied, train_frac=train_frac, log_jobs=report.job_lines,
                log_dropped=report.dropped, online=online,
                workers_wanted=wanted if wanted > workers else None)
    if base is not None:
        _write_cache(base, case)
    if progress:
        for note in case_notes(case):
            progress(note)
    if progress:
        progress(f"{name}: {case.tasks} test tasks on {workers} workers, model MAE "
                 f"{model.mae_s:.0f} s")
    return case


def prepare_scenario(
    name: str,
    *,
    cache_dir: Path | None,
    tasks: int = SCENARIO_TASKS,
    settings: Any = None,
    progress: Progress | None = None,
    seed: int = SCENARIO_TEST_SEED,
) -> Case:
    """The scenario case of DES scenario ``name`` (module docstring), its test trace drawn
    with ``seed`` (the held-back seed of ``desched.bench.holdout`` for the final verdict);
    named ``NAME`` at the judge's own seed, ``NAME-seedS`` at another."""
    from desched.models.training import TrainSettings
    from desched.workloads import SCENARIOS as KNOWN
    from desched.workloads import generate

    if name not in KNOWN:
        raise DeschedError(f"unknown scenario {name!r} (known: {', '.join(KNOWN)})")
    settings = settings or TrainSettings()
    if seed == SCENARIO_TRAIN_SEED:
        raise DeschedError(f"scenario seed {seed} is the one its duration model trains on")
    key = _digest(CACHE_VERSION, name, tasks, SCENARIO_WORKERS, SCENARIO_LOAD,
                  seed, SCENARIO_TRAIN_SEED, settings.model_dump(mode="json"))
    label = name if seed == SCENARIO_TEST_SEED else f"{name}-seed{seed}"
    base = cache_dir / f"scenario-{label}-{key}" if cache_dir is not None else None
    if base is not None and (cached := _read_cache(base)) is not None:
        if progress:
            progress(f"{name}: cached ({cached.tasks} tasks)")
        return cached

    def draw(seed: int) -> pl.DataFrame:
        frame = generate(name, tasks=tasks, load=SCENARIO_LOAD, workers=SCENARIO_WORKERS,
                         seed=seed)
        return frame.drop([c for c in PREDICTED_COLUMNS if c in frame.columns])

    train_frame = draw(SCENARIO_TRAIN_SEED)
    if progress:
        progress(f"{name}: training on seed {SCENARIO_TRAIN_SEED} ({train_frame.height} tasks)")
    result = _train(train_frame, f"scenario {name} seed {SCENARIO_TRAIN_SEED}", settings)
    test, online = online_frame(result, draw(seed))
    source = f"scenario:{name}" + ("" if seed == SCENARIO_TEST_SEED else f"?seed={seed}")
    case = Case(name=label, kind="scenario", source=source, frame=test,
                workers=SCENARIO_WORKERS,
                mean_train_duration_s=float(train_frame["duration_s"].mean()),  # type: ignore[arg-type]
                model=ModelInfo.of(result), load=None, train_frac=None, online=online)
    if base is not None:
        _write_cache(base, case)
    return case


def prepare_cases(
    logs: Iterable[str | Path] | None = None,
    *,
    scenarios: Iterable[str] = SCENARIOS,
    cache_dir: Path | None = Path("data/judge-cache"),
    max_tasks: int | None = None,
    train_frac: float = TRAIN_FRAC,
    load: float = LOAD,
    progress: Progress | None = None,
    scenario_seed: int = SCENARIO_TEST_SEED,
) -> list[Case]:
    """Every log case (``default_logs()`` when ``logs`` is None), then every scenario case
    (test trace of ``scenario_seed``). ``max_tasks`` also caps a scenario's tasks."""
    paths = default_logs() if logs is None else [Path(p) for p in logs]
    if not 0 < train_frac < 1:
        raise DeschedError(f"train_frac must be in (0, 1), got {train_frac}")
    if not (math.isfinite(load) and load > 0):
        raise DeschedError(f"load must be > 0, got {load}")
    cases = [prepare_log(p, cache_dir=cache_dir, max_tasks=max_tasks, train_frac=train_frac,
                         load=load, progress=progress) for p in paths]
    tasks = SCENARIO_TASKS if max_tasks is None else min(max_tasks, SCENARIO_TASKS)
    cases += [prepare_scenario(s, cache_dir=cache_dir, tasks=tasks, progress=progress,
                               seed=scenario_seed) for s in scenarios]
    return cases
