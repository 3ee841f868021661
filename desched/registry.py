"""The model registry: a folder of versions and a champion pointer (models/README.md).

::

    models/duration/
      CHAMPION            the champion's version name, one line (replaced atomically)
      v0001/              one version: model.txt (LightGBM), model.so (its lleaves compiled
        card.json         form, for this host), p50.txt, p90.txt (quantile models), card.json
      v0002/ ...

A version exists once its ``card.json`` is written (last, atomically); cards never change
afterwards. The card records the features and their category mapping, the data window and
the held-out slice's fingerprint, the model's and the baselines' metrics on that slice, the
objectives compared, training and compile time, library versions and the git commit, and the
promotion verdict with its reason.

Promotion rule: a new version becomes the champion when there is no champion, when the
champion cannot score the new held-out slice (its features are absent, or its files are
unreadable: the reason says so), or when its MAE on the new version's held-out slice is
strictly lower than the champion's MAE on the very same rows. Otherwise the version is kept
and marked rejected, with both MAEs in the reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from desched.errors import DeschedError
from desched.features import FeatureSpec, feature_matrix
from desched.predictor import PredictorUnavailable, file_sha256, host_target
from desched.predictor import compile_model as compile_forest
from desched.training import Model, TrainResult, mae

CARD = "card.json"
CHAMPION = "CHAMPION"
MODEL_FILE = "model.txt"
COMPILED_FILE = "model.so"


@dataclass(frozen=True)
class Verdict:
    """The promotion decision for one new version."""

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
) -> Verdict:
    """The promotion rule of the module docstring, as a pure function."""
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


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(tmp, path)


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


class Registry:
    """Read and write access to one registry folder."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def versions(self) -> list[str]:
        """Complete versions (those with a card), oldest first."""
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and (p / CARD).is_file())

    def champion(self) -> str | None:
        """The champion's version name, or None when there is none yet."""
        pointer = self.root / CHAMPION
        if not pointer.is_file():
            return None
        name = pointer.read_text().strip()
        if not name or not (self.root / name / CARD).is_file():
            raise PredictorUnavailable(
                f"{pointer}: names version {name!r}, which has no card (corrupt registry)"
            )
        return name

    def card(self, version: str) -> dict[str, Any]:
        path = self.root / version / CARD
        try:
            card: dict[str, Any] = json.loads(path.read_text())
        except FileNotFoundError:
            raise PredictorUnavailable(f"{path}: no such model card") from None
        except (OSError, ValueError) as exc:
            raise PredictorUnavailable(f"{path}: unreadable model card ({exc})") from None
        for key in ("features", "files", "target_log"):
            if key not in card:
                raise PredictorUnavailable(f"{path}: model card lacks {key!r}")
        return card

    def new_version_dir(self) -> Path:
        """Create and return the next version's folder (``v0001``, ``v0002``, ...)."""
        self.root.mkdir(parents=True, exist_ok=True)
        taken = [p.name for p in self.root.iterdir() if p.is_dir() and p.name.startswith("v")]
        n = max((int(name[1:]) for name in taken if name[1:].isdigit()), default=0) + 1
        while True:
            folder = self.root / f"v{n:04d}"
            try:
                folder.mkdir()
                return folder
            except FileExistsError:
                n += 1

    def set_champion(self, version: str) -> None:
        _write_atomic(self.root / CHAMPION, version + "\n")

    def listing(self) -> list[dict[str, Any]]:
        """One summary per version: verdict, objective, MAE vs the best baseline, window."""
        try:
            champion = self.champion()
        except DeschedError:
            champion = None
        rows = []
        for version in self.versions():
            try:
                card = self.card(version)
            except DeschedError as exc:
                rows.append({"version": version, "champion": False, "verdict": f"corrupt: {exc}"})
                continue
            best = min(card["baselines"].items(), key=lambda kv: kv[1]["mae_s"])
            rows.append(
                {
                    "version": version,
                    "champion": version == champion,
                    "verdict": card["verdict"],
                    "objective": card["objective"],
                    "mae_s": card["metrics"]["mae_s"],
                    "mdape_pct": card["metrics"]["mdape_pct"],
                    "spearman": card["metrics"]["spearman"],
                    "best_baseline": best[0],
                    "best_baseline_mae_s": best[1]["mae_s"],
                    "rows": card["data_window"]["rows"],
                    "source": card["data_window"]["source"],
                    "created_at": card["created_at"],
                    "reason": card["reason"],
                }
            )
        return rows


def champion_mae_on(
    registry: Registry, champion: str, result: TrainResult
) -> tuple[float | None, str | None]:
    """The champion's MAE on ``result``'s held-out rows, or ``(None, why it cannot score)``."""
    import lightgbm as lgb

    test = result.test_frame
    try:
        card = registry.card(champion)
        spec = FeatureSpec.from_json(card["features"])
        booster = lgb.Booster(model_file=str(registry.root / champion / card["files"]["model"]))
    except Exception as exc:  # noqa: BLE001 (a corrupt champion must not block a challenger)
        return None, f"its files are unreadable ({type(exc).__name__}: {exc})"
    missing = [c for c in spec.size_features if c not in test.columns]
    if missing:
        return None, f"it needs feature column(s) {', '.join(missing)} absent from this data"
    if spec.history_window != result.spec.history_window:
        return None, "its history window differs from this version's"
    if booster.num_feature() != len(spec.names):
        return None, "its model and card disagree on the features"
    pred = Model(booster, bool(card["target_log"])).predict_s(feature_matrix(test, spec))
    return mae(test["duration_s"].to_numpy(), pred), None


def register(
    registry: str | Path,
    result: TrainResult,
    *,
    commit: str | None = None,
    compile_model: bool = True,
) -> dict[str, Any]:
    """Write ``result`` as a new version, compile it, apply the promotion rule, and return the
    card. The champion pointer moves only on promotion."""
    reg = Registry(registry)
    try:
        champion = reg.champion()
    except DeschedError:
        champion = None  # a dangling pointer: the new version replaces it
    champion_mae, unscorable = (None, None)
    if champion is not None:
        champion_mae, unscorable = champion_mae_on(reg, champion, result)
    verdict = decide(result.metrics["mae_s"] or 0.0, champion, champion_mae, unscorable)

    folder = reg.new_version_dir()
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

    import lightgbm
    import lleaves

    card = {
        "version": folder.name,
        "verdict": "promoted" if verdict.promoted else "rejected",
        "reason": verdict.reason,
        "promotion": {
            "rule": "promote when MAE on this version's held-out slice < champion's on the same rows",
            "champion_before": verdict.champion_before,
            "champion_mae_s": verdict.champion_mae_s,
            "challenger_mae_s": verdict.challenger_mae_s,
        },
        "objective": result.objective,
        "target_log": result.model.log_target,
        "objectives_compared": result.objectives,
        "features": result.spec.to_json(),
        "data_window": result.window,
        "metrics": result.metrics,
        "baselines": result.baselines,
        "beats_baselines": {
            name: (result.metrics["mae_s"] or 0.0) < (m["mae_s"] or 0.0)
            for name, m in result.baselines.items()
        },
        "quantile_metrics": result.quantile_metrics,
        "settings": {k: getattr(result.settings, k) for k in result.settings.__dataclass_fields__},
        "training_time_s": result.training_time_s,
        "compile_time_s": compile_s,
        "files": files,
        "sha256": digests,
        "compiled_for": host_target() if compile_model else None,
        "libraries": {"lightgbm": lightgbm.__version__, "lleaves": _version("lleaves", lleaves)},
        "git_commit": commit if commit is not None else git_commit(Path(__file__).parent),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    _write_atomic(folder / CARD, json.dumps(card, indent=2, allow_nan=False, default=_json) + "\n")
    if verdict.promoted:
        reg.set_champion(folder.name)
    return card


def _version(name: str, module: Any) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return getattr(module, "__version__", None)


def _json(value: Any) -> Any:
    if isinstance(value, (np.floating, np.integer)):
        return value.item()
    if isinstance(value, tuple):
        return list(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
