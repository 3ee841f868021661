"""The duration predictor runtime: the champion of a registry, compiled, for the submit path.

A prediction is made once, when a task is submitted, and stored as ``predicted_s``; the poll
path only reads it. ``Predictor.predict_one`` encodes a task's mapping in pure Python and calls
the champion's compiled forest (lleaves: LLVM-compiled LightGBM trees, cached as ``.so`` in the
version folder) directly through its C entry point on preallocated float64 buffers, with no
per-call allocation or thread pool: about 1-2 us, against 15-70 us for
``lightgbm.Booster.predict`` on one row (BENCHMARKS.md). Outputs equal ``Booster.predict`` to
1e-9 (tests/test_predictor.py, property-based).

The tenant-history features (``desched.models.features.HISTORY``) come from the task mapping when
present, else from completions reported with ``observe_completion`` (the service's completion
records), so the submit path never sees a duration of a task that had not finished.

The model comes from the read side of the registry (``desched.models.registry``), which sits
below this module; the write side (``desched.models.promotion``) sits above it and uses
``compile_model`` and ``host_target`` when it registers a version. A missing or corrupt model
raises ``ModelUnavailable``; ``load_or_none`` turns that into ``None`` with the reason, and
``policy_without_prediction`` names the policy a scheduler falls back to. lightgbm and lleaves
are imported inside the functions that need them.
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import math
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from desched.errors import DeschedError
from desched.models.cards import DurationCard, ModelKind
from desched.models.features import (
    HISTORY,
    FeatureEncoder,
    FeatureSpec,
    TenantHistory,
    feature_matrix,
    with_history,
)
from desched.models.gbm import import_lightgbm
from desched.models.registry import CARD, ModelUnavailable, Registry, file_sha256
from desched.today import TODAY_SCORER

if TYPE_CHECKING:
    import lightgbm

logger = logging.getLogger("desched.models")

FALLBACK_POLICY = TODAY_SCORER
"""The policy a scheduler runs when no predictor loads: it reads no ``predicted_s``."""

_DOUBLE_P = ctypes.POINTER(ctypes.c_double)

COMPILE_OPTIONS: dict[str, Any] = {"finline": False}
"""How lleaves compiles a forest: each tree its own function, not inlined into the root.
LLVM then optimises small functions instead of one huge one: a 400-tree quantile model
compiles in about 4 s instead of 22 (BENCHMARKS.md), with the same bits out, for 6-45 % more
time per row (a few microseconds on the submit path)."""

QUANTILE_KEYS: tuple[str, ...] = ("p50", "p90")
"""The quantile models a card may list in ``files`` (``desched.models.training``), each fitted
on log duration: their raw outputs are ``exp``'d into seconds."""


def host_target() -> str:
    """The CPU a compiled forest is specialised for (lleaves compiles for the host)."""
    import llvmlite.binding as llvm

    try:
        features = llvm.get_host_cpu_features().flatten()
    except RuntimeError:
        features = ""
    digest = hashlib.sha256(features.encode()).hexdigest()[:12]
    return f"{llvm.get_process_triple()}/{llvm.get_host_cpu_name()}/{digest}"


class CompiledForest:
    """A LightGBM text model compiled by lleaves, called through its C entry point.

    ``predict_row`` writes into one preallocated input row and output cell: it is not
    reentrant, and ``Predictor`` serialises calls with a lock. ``predict`` takes any number
    of rows and runs on one thread.
    """

    def __init__(self, model_path: Path, cache_path: Path) -> None:
        import lleaves

        model = lleaves.Model(model_file=str(model_path))
        model.compile(cache=str(cache_path), **COMPILE_OPTIONS)
        if model.num_model_per_iteration() != 1:
            raise ModelUnavailable(f"{model_path}: not a single-output regression model")
        self._model = model  # keeps the execution engine (and the code) alive
        self.n_features: int = model.num_feature()
        self._entry: Callable[..., None] = model._c_entry_func
        self.entry = self._entry
        """lleaves' C entry point, ``forest_root(double *x, double *out, int32 start, int32
        end)`` (a ctypes function: its address is what a compiled kernel calls)."""
        self.row = np.zeros(self.n_features, dtype=np.float64)
        self._out = np.zeros(1, dtype=np.float64)
        self._row_p = self.row.ctypes.data_as(_DOUBLE_P)
        self._out_p = self._out.ctypes.data_as(_DOUBLE_P)

    def predict_row(self) -> float:
        """The raw output for the values currently in ``self.row``."""
        self._entry(self._row_p, self._out_p, 0, 1)
        return float(self._out[0])

    def predict(self, x: np.ndarray) -> np.ndarray:
        """Raw outputs for an (n, n_features) matrix."""
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise DeschedError(f"expected an (n, {self.n_features}) matrix, got {x.shape}")
        out = np.zeros(x.shape[0], dtype=np.float64)
        if x.shape[0]:
            self._entry(x.ctypes.data_as(_DOUBLE_P), out.ctypes.data_as(_DOUBLE_P), 0, x.shape[0])
        return out


FOREST_CACHE_ENV = "DESCHED_FOREST_CACHE"
"""A folder of compiled forests shared by every registry on this machine (``off``: none);
default ``$XDG_CACHE_HOME/desched/forests`` (``~/.cache/desched/forests``)."""


def shared_forest_dir() -> Path | None:
    """The machine's folder of compiled forests (``FOREST_CACHE_ENV``), or None when off."""
    value = os.environ.get(FOREST_CACHE_ENV)
    if value is not None:
        return None if value.strip() in {"", "off"} else Path(value)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "desched" / "forests"


def shared_forest(model_path: Path) -> Path | None:
    """Where the machine's cache keeps ``model_path`` compiled: named by the SHA-256 of the
    model text, the host CPU (``host_target``), the lleaves and llvmlite versions and
    ``COMPILE_OPTIONS``, so an entry is only ever the object code lleaves would build here for
    that text."""
    folder = shared_forest_dir()
    if folder is None:
        return None
    from importlib.metadata import version

    digest = hashlib.sha256(model_path.read_bytes())
    options = ",".join(f"{k}={v}" for k, v in sorted(COMPILE_OPTIONS.items()))
    for part in (host_target(), version("lleaves"), version("llvmlite"), options):
        digest.update(b"\0" + part.encode())
    return folder / f"{digest.hexdigest()[:32]}.so"


def _entry_ok(entry: Path) -> bool:
    """An entry counts only beside its own checksum (a torn or altered file is ignored)."""
    try:
        return entry.with_suffix(".sha256").read_text().strip() == file_sha256(entry)
    except OSError:
        return False


def _publish(compiled: Path, entry: Path) -> None:
    """Copy ``compiled`` into the machine's cache: object code, then its checksum, each by
    an atomic rename (a reader sees both or ignores the entry)."""
    entry.parent.mkdir(parents=True, exist_ok=True)
    code = compiled.read_bytes()
    for data, target in ((code, entry),
                         (hashlib.sha256(code).hexdigest().encode(), entry.with_suffix(".sha256"))):
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def compile_model(model_path: Path, cache_path: Path) -> CompiledForest:
    """Compile ``model_path`` (once; later loads read the cached ``cache_path``).

    Where ``cache_path`` is missing, a model text this machine has compiled before (a
    retraining that gives the same trees, the demo run again, a version copied to another
    registry) is not compiled again: its object code comes from ``shared_forest`` when the
    entry's checksum holds, and a compilation is published there. The machine's cache is an
    optimisation only: an error reading or writing it compiles as without it."""
    if cache_path.exists():
        return CompiledForest(model_path, cache_path)
    try:
        entry = shared_forest(model_path)
    except OSError:
        entry = None
    copied = False
    if entry is not None and _entry_ok(entry):
        try:
            shutil.copyfile(entry, cache_path)
            copied = True
        except OSError:
            cache_path.unlink(missing_ok=True)
    forest = CompiledForest(model_path, cache_path)
    if entry is not None and not copied and cache_path.is_file():
        try:
            _publish(cache_path, entry)
        except OSError:
            pass  # a read-only or full cache folder: the next compilation goes on without it
    return forest


class Predictor:
    """The champion model of a registry, ready to predict durations in seconds."""

    def __init__(
        self,
        *,
        version: str,
        spec: FeatureSpec,
        log_target: bool,
        forest: CompiledForest,
        model_path: Path,
        card: DurationCard,
        quantiles: Mapping[str, CompiledForest] | None = None,
    ) -> None:
        self.version = version
        self.spec = spec
        self.log_target = log_target
        self.card = card
        self.model_path = model_path
        self._forest = forest
        self._encoder = FeatureEncoder(spec)
        self._lock = threading.Lock()
        self._history_at = len(spec.names) - len(HISTORY)
        self.history = TenantHistory(spec.history_window)
        self._booster: lightgbm.Booster | None = None
        self.quantiles: dict[str, CompiledForest] = dict(quantiles or {})
        for key, f in (("model", forest), *self.quantiles.items()):
            if f.n_features != len(spec.names):
                raise ModelUnavailable(
                    f"{model_path.parent / card.files.get(key, key)}: model has "
                    f"{f.n_features} features, its card lists {len(spec.names)}"
                )

    @classmethod
    def load(
        cls, registry: str | Path, version: str | None = None, *, quantiles: bool = False
    ) -> Predictor:
        """Load the champion (or ``version``) of ``registry``; compile it if its ``.so`` is
        missing, differs from the card's checksum or was built for another CPU. With
        ``quantiles``, also the quantile models the card lists (``QUANTILE_KEYS``; see
        ``load_quantiles``). Raises ``ModelUnavailable`` naming what is missing or corrupt."""
        reg = Registry(registry, ModelKind.DURATION)
        name = version or reg.champion_or_error()
        card = reg.duration_card(name)
        folder = reg.root / name
        model_path = reg.model_file(name, card)
        cache_path = folder / card.files["compiled"]
        try:
            spec = FeatureSpec.from_json(card.features.model_dump())
        except DeschedError as exc:
            raise ModelUnavailable(f"{folder / CARD}: {exc}") from None
        if cache_path.exists() and (
            card.sha256.get("compiled") != file_sha256(cache_path)
            or card.compiled_for != host_target()
        ):
            # A stale or foreign object file is never loaded: compile afresh.
            try:
                cache_path.unlink()
            except OSError:
                cache_path = Path(tempfile.mkdtemp(prefix="desched-model-")) / cache_path.name
        try:
            forest = compile_model(model_path, cache_path)
        except ModelUnavailable:
            raise
        except Exception as exc:  # noqa: BLE001 (lleaves and llvmlite raise many types)
            raise ModelUnavailable(
                f"{model_path}: model cannot be compiled or loaded ({type(exc).__name__}: "
                f"{str(exc).splitlines()[0] if str(exc) else 'no detail'})"
            ) from None
        return cls(
            version=name,
            spec=spec,
            log_target=card.target_log,
            forest=forest,
            model_path=model_path,
            card=card,
            quantiles=load_quantiles(folder, card, forest.n_features) if quantiles else None,
        )

    def _seconds(self, raw: float) -> float:
        return math.exp(raw) if self.log_target else raw

    def observe_completion(self, tenant: str, task_type: str, duration_s: float) -> None:
        """Record a finished task of ``tenant``; later predictions use it as history."""
        self.history.record(tenant, task_type, duration_s)

    def adopt_history(self, other: object) -> None:
        """Take over the tenant history ``other`` (the predictor this one replaces) learned
        from completions, where both keep the same window; otherwise start empty."""
        theirs = getattr(other, "history", None)
        if isinstance(theirs, TenantHistory) and theirs.window == self.history.window:
            self.history = theirs

    def encode(self, task: Mapping[str, Any]) -> np.ndarray:
        """The feature row of ``task`` (a copy), history filled as ``predict_one`` does."""
        row = np.zeros(len(self.spec.names), dtype=np.float64)
        self._fill(task, row)
        return row

    def _fill(self, task: Mapping[str, Any], row: Any) -> None:
        self._encoder.encode(task, row)
        if self.history.recent and all(task.get(c) is None for c in HISTORY):
            tenant = task.get("tenant")
            values = (self.history.values(tenant, task.get("task_type"))  # type: ignore[arg-type]
                      if isinstance(tenant, str) else None)
            for j in range(len(HISTORY)):
                row[self._history_at + j] = math.nan if values is None else values[j]

    def predict_one(self, task: Mapping[str, Any]) -> float:
        """Predicted duration (s) of one task: keys ``tenant``, ``task_type``, the size
        features, ``submit_s`` and optionally the history columns."""
        with self._lock:
            self._fill(task, self._forest.row)
            raw = self._forest.predict_row()
        return self._seconds(raw)

    @property
    def labels(self) -> tuple[str, ...]:
        """``predicted_s`` and the quantile columns this predictor fills (loaded models)."""
        return ("predicted_s", *(f"predicted_{k}_s" for k in QUANTILE_KEYS if k in self.quantiles))

    def predict_labels(self, task: Mapping[str, Any]) -> tuple[float, float, float]:
        """``(predicted_s, p50_s, p90_s)`` of one task, from one encoding of its features (as
        ``predict_one``); a quantile this predictor has not loaded is NaN."""
        labels = [math.nan, math.nan]
        with self._lock:
            self._fill(task, self._forest.row)
            raw = self._forest.predict_row()
            for j, key in enumerate(QUANTILE_KEYS):
                q = self.quantiles.get(key)
                if q is not None:
                    q.row[:] = self._forest.row
                    labels[j] = math.exp(q.predict_row())
        return self._seconds(raw), labels[0], labels[1]

    def predict_quantiles(self, x: np.ndarray) -> dict[str, np.ndarray]:
        """Each loaded quantile model's predictions (s) for a feature matrix."""
        return {key: np.exp(q.predict(x)) for key, q in self.quantiles.items()}

    def features_of(self, frame: pl.DataFrame) -> np.ndarray:
        """Feature matrix of a trace frame; history from the frame's own finished tasks unless
        it carries the history columns already."""
        if not all(c in frame.columns for c in HISTORY):
            frame = with_history(frame)
        return feature_matrix(frame, self.spec)

    def predict_batch(self, frame: pl.DataFrame | np.ndarray) -> np.ndarray:
        """Predicted durations (s) of every row of a trace frame, or of a feature matrix."""
        x = frame if isinstance(frame, np.ndarray) else self.features_of(frame)
        raw = self._forest.predict(x)
        return np.exp(raw) if self.log_target else raw

    def booster(self) -> lightgbm.Booster:
        """The same model as ``lightgbm.Booster`` (the reference the fast path must equal)."""
        if self._booster is None:
            lgb = import_lightgbm()

            self._booster = lgb.Booster(model_file=str(self.model_path))
        return self._booster

    def reference_batch(self, x: np.ndarray) -> np.ndarray:
        """``Booster.predict`` on a feature matrix, in seconds."""
        raw = np.asarray(self.booster().predict(x), dtype=np.float64)
        return np.exp(raw) if self.log_target else raw


def load_quantiles(
    folder: Path, card: DurationCard, n_features: int
) -> dict[str, CompiledForest]:
    """The quantile models of the version in ``folder`` that its card lists, compiled.

    One that is missing, differs from the card's checksum, does not compile or reads other
    than the model's ``n_features`` is left out with a warning on the ``desched.models``
    logger: the duration model still serves, and a policy that wants the quantiles falls back
    to ``predicted_s`` alone. Their object code
    lives only in the machine's cache (``shared_forest``; compiled there once, seconds each)
    and in memory, so a read-only registry serves them too and nothing stale can be loaded
    from the version folder; with the machine's cache off they compile on every load."""
    out: dict[str, CompiledForest] = {}
    for key in QUANTILE_KEYS:
        name = card.files.get(key)
        if name is None:
            continue
        path = folder / name
        expected = card.sha256.get(key)
        try:
            if expected is not None and file_sha256(path) != expected:
                raise ModelUnavailable(f"checksum differs from the card's ({CARD})")
            with tempfile.TemporaryDirectory(prefix="desched-quantile-") as tmp:
                forest = compile_model(path, Path(tmp) / f"{key}.so")
            if forest.n_features != n_features:
                raise ModelUnavailable(f"{forest.n_features} features, the model {n_features}")
            out[key] = forest
        except Exception as exc:  # noqa: BLE001 (lleaves and llvmlite raise many types)
            detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            logger.warning("%s: quantile model %s not loaded: %s", path, key, detail)
    return out


def load_or_none(
    registry: str | Path, *, quantiles: bool = False
) -> tuple[Predictor | None, str | None]:
    """The champion predictor (with its quantile models when ``quantiles``), or
    ``(None, reason)`` when it is missing or corrupt."""
    try:
        return Predictor.load(registry, quantiles=quantiles), None
    except ModelUnavailable as exc:
        return None, str(exc)


def policy_without_prediction(wanted: str, reads_prediction: bool, available: bool) -> str:
    """The policy to run: ``wanted``, or ``FALLBACK_POLICY`` when it needs a prediction that
    is not available."""
    return FALLBACK_POLICY if reads_prediction and not available else wanted
