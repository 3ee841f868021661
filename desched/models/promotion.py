"""The model registry, write side: register a trained model as a version, decide, promote.

``register`` writes a training result as the next version of a registry
(``desched.models.registry`` documents the layout), applies its kind's promotion rule, writes
the card last (atomically), and moves the champion pointer when the version is promoted.

Promotion rules:

- **Duration model** (``decide``): a new version whose MAE on its held-out slice does not
  beat the constant prediction (the training rows' median duration, the ``global_median``
  baseline, on the same rows) is rejected: it knows nothing a constant does not, and a
  service would rank on noise. Otherwise it becomes the champion when there is no champion,
  when the champion cannot score the new held-out slice (its features are absent, or its
  files are unreadable: the reason says so), or when its MAE on the new version's held-out
  slice is strictly lower than the champion's MAE on the very same rows. Otherwise the
  version is kept and marked rejected, with both MAEs in the reason.

Registrations into one registry take turns (``registry_lock``, an exclusive ``flock`` on its
``.lock`` file, held from reading the champion to moving the pointer): two trainings racing
into one registry are compared one after the other, so the second is judged against the
first if that one was promoted, never both against the old champion with the last write
winning.
- **Memory model** (``decide_memory``): the newest version replaces the champion. A memory
  model is refit on every completion record it is given, so a champion has usually seen the
  new version's held-out rows and a comparison on them would favour it.

This module sits above training (it takes ``TrainResult`` and ``MemoryTrainResult``) and above
the duration runtime (it compiles a new version with lleaves); lightgbm and lleaves are
imported inside the functions that use them.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, overload

from desched.errors import DeschedError
from desched.models.cards import (
    Card,
    DurationCard,
    DurationPromotion,
    DurationWindow,
    FeatureLayout,
    MemoryCard,
    MemoryPromotion,
    ModelKind,
    ObjectiveScores,
    Scores,
)
from desched.models.duration import compile_model as compile_forest
from desched.models.duration import host_target
from desched.models.features import FeatureSpec, feature_matrix
from desched.models.gbm import import_lightgbm
from desched.models.memory import FEATURES as MEMORY_FEATURES
from desched.models.memory import TARGET as MEMORY_TARGET
from desched.models.memory_training import MemoryTrainResult
from desched.models.registry import CARD, CHAMPION, MODEL_FILE, Registry, file_sha256
from desched.models.training import Model, TrainResult, mae

COMPILED_FILE = "model.so"
DURATION_RULE = ("promote when MAE on this version's held-out slice < the constant median "
                 "prediction's and < champion's, on the same rows")
BASELINE = "global_median"
"""The baseline a duration model must beat to be promoted at all: a constant prediction."""
LOCK_FILE = ".lock"
MEMORY_RULE = "the newest version replaces the champion (a memory model is refit on every row)"


@dataclass(frozen=True)
class Verdict:
    """The promotion decision for one new version of a duration model."""

    promoted: bool
    reason: str
    champion_before: str | None
    champion_mae_s: float | None
    challenger_mae_s: float


def decide(
    challenger_mae_s: float,
    champion: str | None,
    champion_mae_s: float | None,
    unscorable: str | None = None,
    baseline_mae_s: float | None = None,
) -> Verdict:
    """The duration model's promotion rule (module docstring), as a pure function;
    ``baseline_mae_s``: the constant median prediction's MAE on the same held-out rows (None:
    not measured, no gate)."""
    if baseline_mae_s is not None and not challenger_mae_s < baseline_mae_s:
        return Verdict(
            False,
            f"MAE {challenger_mae_s:.4g} s does not beat the constant median prediction's "
            f"{baseline_mae_s:.4g} s on its held-out slice",
            champion,
            champion_mae_s,
            challenger_mae_s,
        )
    if champion is None:
        return Verdict(True, "no champion yet", None, None, challenger_mae_s)
    if unscorable is not None:
        return Verdict(
            True,
            f"champion {champion} cannot score this held-out slice: {unscorable}",
            champion,
            None,
            challenger_mae_s,
        )
    assert champion_mae_s is not None
    if challenger_mae_s < champion_mae_s:
        return Verdict(
            True,
            f"MAE {challenger_mae_s:.4g} s beats champion {champion}'s {champion_mae_s:.4g} s "
            "on the same held-out slice",
            champion,
            champion_mae_s,
            challenger_mae_s,
        )
    return Verdict(
        False,
        f"MAE {challenger_mae_s:.4g} s does not beat champion {champion}'s "
        f"{champion_mae_s:.4g} s on the same held-out slice",
        champion,
        champion_mae_s,
        challenger_mae_s,
    )


def decide_memory(champion: str | None) -> str:
    """The memory model's promotion rule: always promoted; the reason names the champion
    replaced."""
    if champion is None:
        return "no champion yet"
    return f"the newest memory model replaces champion {champion}"


def _write_atomic(path: Path, text: str) -> None:
    # created 0666 less the umask, as any file here (mkstemp's 0600 hid the card and the
    # pointer from a service run as another user)
    tmp = path.parent / f".{path.name}.{secrets.token_hex(8)}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


@contextmanager
def registry_lock(root: Path) -> Iterator[None]:
    """Hold the registry's exclusive lock (module docstring); blocks while another
    registration holds it. The lock file stays (an empty ``.lock``); the kernel frees the
    lock when its holder exits, however it ends."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / LOCK_FILE, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def git_commit(cwd: Path | None = None) -> str | None:
    """The checkout's HEAD commit (with ``-dirty`` when the tree has changes), or None."""

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        )
        return done.stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head


def new_version_dir(root: Path) -> Path:
    """Create and return the next version's folder (``v0001``, ``v0002``, ...); safe against a
    concurrent writer (the folder is created exclusively)."""
    root.mkdir(parents=True, exist_ok=True)
    taken = [p.name for p in root.iterdir() if p.is_dir() and p.name.startswith("v")]
    n = max((int(name[1:]) for name in taken if name[1:].isdigit()), default=0) + 1
    while True:
        folder = root / f"v{n:04d}"
        try:
            folder.mkdir()
            return folder
        except FileExistsError:
            n += 1


def promote(registry: str | Path, version: str) -> None:
    """Make ``version`` (a complete version: its card is readable) the champion; the pointer
    is replaced atomically."""
    reg = Registry(registry)
    reg.card(version)
    _write_atomic(reg.root / CHAMPION, version + "\n")


def _write_card(folder: Path, card: Card) -> None:
    text = json.dumps(card.model_dump(mode="json"), indent=2, allow_nan=False) + "\n"
    _write_atomic(folder / CARD, text)


def _current_champion(reg: Registry) -> str | None:
    try:
        return reg.champion()
    except DeschedError:
        return None  # a dangling pointer: the new version replaces it


def _registry_of(registry: str | Path, kind: ModelKind) -> Registry:
    """The registry, refused when it already holds versions of another kind."""
    reg = Registry(registry)
    for version in reg.versions():
        try:
            other = reg.card(version).kind
        except DeschedError:
            continue
        if other != kind:
            raise DeschedError(
                f"{reg.root}: holds {other} models; a {kind} model goes in a registry of its own"
            )
        break
    return reg


def champion_mae_on(
    registry: Registry, champion: str, result: TrainResult
) -> tuple[float | None, str | None]:
    """The champion's MAE on ``result``'s held-out rows, or ``(None, why it cannot score)``."""
    lgb = import_lightgbm()

    test = result.test_frame
    try:
        card = registry.duration_card(champion)
        spec = FeatureSpec.from_json(card.features.model_dump())
        booster = lgb.Booster(model_file=str(registry.root / champion / card.files["model"]))
    except Exception as exc:  # noqa: BLE001 (a corrupt champion must not block a challenger)
        return None, f"its files are unreadable ({type(exc).__name__}: {exc})"
    missing = [c for c in spec.size_features if c not in test.columns]
    if missing:
        return None, f"it needs feature column(s) {', '.join(missing)} absent from this data"
    if spec.history_window != result.spec.history_window:
        return None, "its history window differs from this version's"
    if booster.num_feature() != len(spec.names):
        return None, "its model and card disagree on the features"
    pred = Model(booster, card.target_log).predict_s(feature_matrix(test, spec))
    return mae(test["duration_s"].to_numpy(), pred), None


@overload
def register(
    registry: str | Path,
    result: TrainResult,
    *,
    commit: str | None = None,
    compile_model: bool = True,
) -> DurationCard: ...


@overload
def register(
    registry: str | Path,
    result: MemoryTrainResult,
    *,
    commit: str | None = None,
    compile_model: bool = True,
) -> MemoryCard: ...


def register(
    registry: str | Path,
    result: TrainResult | MemoryTrainResult,
    *,
    commit: str | None = None,
    compile_model: bool = True,
) -> DurationCard | MemoryCard:
    """Write ``result`` as a new version of ``registry``, apply its kind's promotion rule, and
    return the card. The champion pointer moves only on promotion. ``commit`` is recorded as
    the git commit (default: this checkout's HEAD); ``compile_model`` (duration models only)
    compiles the forest with lleaves for this host. A registry holds one kind of model: a
    result of the other kind is refused (``DeschedError``)."""
    with registry_lock(Path(registry)):
        if isinstance(result, MemoryTrainResult):
            return _register_memory(registry, result, commit)
        return _register_duration(registry, result, commit, compile_model)


def _provenance(commit: str | None) -> tuple[str | None, str]:
    return (
        commit if commit is not None else git_commit(Path(__file__).parent),
        datetime.now(UTC).isoformat(timespec="seconds"),
    )


def _register_duration(
    registry: str | Path, result: TrainResult, commit: str | None, compile_model: bool
) -> DurationCard:
    reg = _registry_of(registry, ModelKind.DURATION)
    champion = _current_champion(reg)
    champion_mae, unscorable = (None, None)
    if champion is not None:
        champion_mae, unscorable = champion_mae_on(reg, champion, result)
    baseline = result.baselines.get(BASELINE, {}).get("mae_s")
    verdict = decide(result.metrics["mae_s"] or 0.0, champion, champion_mae, unscorable,
                     baseline)

    folder = new_version_dir(reg.root)
    files = {"model": MODEL_FILE, "compiled": COMPILED_FILE}
    result.model.booster.save_model(str(folder / MODEL_FILE))
    for key, model in result.quantile_models.items():
        files[key] = f"{key}.txt"
        model.booster.save_model(str(folder / files[key]))
    compile_s = None
    if compile_model:
        started = time.perf_counter()
        compile_forest(folder / MODEL_FILE, folder / COMPILED_FILE)
        compile_s = time.perf_counter() - started
    digests = {k: file_sha256(folder / f) for k, f in files.items() if (folder / f).is_file()}

    import lleaves

    lightgbm = import_lightgbm()

    git, created_at = _provenance(commit)
    card = DurationCard(
        version=folder.name,
        verdict="promoted" if verdict.promoted else "rejected",
        reason=verdict.reason,
        promotion=DurationPromotion(
            rule=DURATION_RULE,
            champion_before=verdict.champion_before,
            champion_mae_s=verdict.champion_mae_s,
            challenger_mae_s=verdict.challenger_mae_s,
        ),
        objective=result.objective,
        target_log=result.model.log_target,
        objectives_compared={
            name: ObjectiveScores.model_validate(scores)
            for name, scores in result.objectives.items()
        },
        features=FeatureLayout.model_validate(result.spec.to_json()),
        data_window=DurationWindow.model_validate(result.window),
        metrics=Scores.model_validate(result.metrics),
        baselines={name: Scores.model_validate(m) for name, m in result.baselines.items()},
        beats_baselines={
            name: (result.metrics["mae_s"] or 0.0) < (m["mae_s"] or 0.0)
            for name, m in result.baselines.items()
        },
        quantile_metrics=result.quantile_metrics,
        settings=result.settings.model_dump(mode="json"),
        training_time_s=result.training_time_s,
        compile_time_s=compile_s,
        files=files,
        sha256=digests,
        compiled_for=host_target() if compile_model else None,
        libraries={"lightgbm": lightgbm.__version__, "lleaves": _version("lleaves", lleaves)},
        git_commit=git,
        created_at=created_at,
    )
    _write_card(folder, card)
    if verdict.promoted:
        promote(reg.root, folder.name)
    return card


def _register_memory(
    registry: str | Path, result: MemoryTrainResult, commit: str | None
) -> MemoryCard:
    reg = _registry_of(registry, ModelKind.MEMORY)
    champion = _current_champion(reg)
    folder = new_version_dir(reg.root)
    result.model.booster.save_model(str(folder / MODEL_FILE))
    git, created_at = _provenance(commit)
    card = MemoryCard(
        version=folder.name,
        verdict="promoted",
        reason=decide_memory(champion),
        promotion=MemoryPromotion(rule=MEMORY_RULE, champion_before=champion),
        target=MEMORY_TARGET,
        features=list(MEMORY_FEATURES),
        task_types=result.model.task_types,
        source=result.source,
        rows=result.rows,
        held_out_rows=result.held_out_rows,
        data_window=result.window,
        metrics=result.metrics,
        settings=result.settings.model_dump(mode="json"),
        train_s=result.train_s,
        files={"model": MODEL_FILE},
        sha256={"model": file_sha256(folder / MODEL_FILE)},
        libraries={"lightgbm": result.lightgbm_version},
        git_commit=git,
        created_at=created_at,
    )
    _write_card(folder, card)
    promote(reg.root, folder.name)
    return card


def _version(name: str, module: Any) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return getattr(module, "__version__", None)

