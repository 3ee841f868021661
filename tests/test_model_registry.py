"""One registry for both kinds of model: versions, cards, the champion, the settings family."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from pydantic import ValidationError

from desched.errors import DeschedError
from desched.models import memory
from desched.models.cards import DurationCard, MemoryCard, ModelKind
from desched.models.memory_training import (
    MemoryModelSettings,
    MemoryTrainResult,
    train_memory_model,
)
from desched.models.promotion import promote, register
from desched.models.registry import ModelUnavailable, Registry
from desched.models.training import TrainResult, TrainSettings, train
from desched.service.app import load_memory_model
from desched.warehouse.settings import IngestSettings
from desched.workloads import generate

QUICK = TrainSettings(max_rounds=20, objectives=("l2",), quantiles=())
"""Few rounds, enough to beat the constant median prediction (MAE 22.4 s against 27.9 s)."""
ROWS: list[dict[str, object]] = [
    {"task_type": "embed", "doc_bytes": 1000, "pages": 1},
    {"task_type": "extract"},
]


def completions(n: int = 200, seed: int = 0) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    kind = rng.choice(["embed", "extract", "classify"], n)
    size = rng.integers(200, 1500, n)
    return pl.DataFrame(
        {
            "task_type": kind,
            "doc_bytes": size,
            "pages": np.ones(n, dtype=np.int64),
            "peak_mem_mb": np.where(kind == "extract", 1.0, 80.0) + 0.05 * size,
            "submit_s": np.arange(n, dtype=np.float64),
            "status": ["ok"] * n,
        }
    )


@pytest.fixture(scope="module")
def memory_result() -> MemoryTrainResult:
    return train_memory_model(completions(), MemoryModelSettings(rounds=40))


@pytest.fixture(scope="module")
def duration_result() -> TrainResult:
    return train(generate("steady", tasks=400, tenants=5, seed=3), QUICK)


def test_each_memory_version_is_kept_and_the_newest_becomes_the_champion(
    tmp_path: Path, memory_result: MemoryTrainResult
) -> None:
    root = tmp_path / "memory"
    first = register(root, memory_result, commit="abc")
    second = register(root, memory_result, commit="abc")
    reg = Registry(root)
    assert reg.versions() == ["v0001", "v0002"] and reg.champion() == "v0002"
    assert (first.reason, second.promotion.champion_before) == ("no champion yet", "v0001")
    assert "replaces champion v0001" in second.reason
    assert reg.card("v0002") == second  # the card on disk is the card returned
    assert memory.load(root).predict_mb(ROWS) == memory_result.model.predict_mb(ROWS)
    assert memory.load(root, "v0001").card == first
    rows = reg.listing()
    assert [(r.version, r.champion, r.kind, r.unit) for r in rows] == [
        ("v0001", False, ModelKind.MEMORY, "MiB"),
        ("v0002", True, ModelKind.MEMORY, "MiB"),
    ]
    assert rows[1].mae == memory_result.metrics.mae_mb


def test_a_memory_card_records_kind_target_files_and_checksums(
    tmp_path: Path, memory_result: MemoryTrainResult
) -> None:
    register(tmp_path / "m", memory_result, commit="c0ffee")
    raw = json.loads((tmp_path / "m" / "v0001" / "card.json").read_text())
    assert (raw["kind"], raw["target"], raw["git_commit"]) == ("memory", "peak_mem_mb", "c0ffee")
    assert raw["files"] == {"model": "model.txt"} and len(raw["sha256"]["model"]) == 64
    assert raw["features"] == ["task_type", "log1p(doc_bytes)", "pages"]
    assert raw["task_types"] == ["classify", "embed", "extract"]
    assert raw["settings"]["rounds"] == 40 and raw["held_out_rows"] == 40


def test_a_corrupt_memory_model_is_refused_and_the_service_runs_without_it(
    tmp_path: Path, memory_result: MemoryTrainResult, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "memory"
    register(root, memory_result)
    (root / "v0001" / "model.txt").write_text("tree\nnot a model\n")
    with pytest.raises(ModelUnavailable, match="model file is corrupt"):
        memory.load(root)
    with caplog.at_level(logging.WARNING):
        assert load_memory_model(root) is None
    assert "model file is corrupt" in caplog.text


def test_a_memory_model_of_the_old_single_folder_layout_gives_a_one_line_error(
    tmp_path: Path, memory_result: MemoryTrainResult, caplog: pytest.LogCaptureFixture
) -> None:
    old = tmp_path / "memory"
    old.mkdir()
    memory_result.model.booster.save_model(str(old / "model.txt"))
    (old / "card.json").write_text(json.dumps({"task_types": ["embed"], "rows": 10}))
    model, reason = memory.load_or_none(old)
    assert model is None and reason is not None
    assert "old single-folder layout" in reason and "\n" not in reason
    with caplog.at_level(logging.WARNING):
        assert load_memory_model(old) is None
    assert "old single-folder layout" in caplog.text
    register(old, memory_result)  # retraining into it makes it a registry
    assert memory.load(old).predict_mb(ROWS) == memory_result.model.predict_mb(ROWS)


def test_a_version_folder_given_for_its_registry_is_named_as_such(
    tmp_path: Path, memory_result: MemoryTrainResult,
) -> None:
    # it was called "a model of the old single-folder layout" (a QA pass)
    root = tmp_path / "memory"
    register(root, memory_result)
    with pytest.raises(ModelUnavailable) as info:
        memory.load(root / "v0001")
    assert str(info.value) == (f"{root / 'v0001'}: one version of the registry {root}; give "
                               "that folder (its champion is the model used)")


def test_a_registry_holds_one_kind_of_model(
    tmp_path: Path, memory_result: MemoryTrainResult, duration_result: TrainResult
) -> None:
    register(tmp_path / "memory", memory_result)
    register(tmp_path / "duration", duration_result, compile_model=False)
    with pytest.raises(DeschedError, match="holds memory models"):
        register(tmp_path / "memory", duration_result, compile_model=False)
    with pytest.raises(DeschedError, match="holds duration models"):
        register(tmp_path / "duration", memory_result)
    with pytest.raises(ModelUnavailable, match="a duration model card in a registry of memory"):
        memory.load(tmp_path / "duration")
    assert Registry(tmp_path / "memory").versions() == ["v0001"]


def test_a_duration_card_written_before_cards_had_a_kind_still_loads(
    tmp_path: Path, duration_result: TrainResult
) -> None:
    card = register(tmp_path / "d", duration_result, compile_model=False)
    path = tmp_path / "d" / "v0001" / "card.json"
    raw = json.loads(path.read_text())
    del raw["kind"]
    path.write_text(json.dumps(raw))
    again = Registry(tmp_path / "d", ModelKind.DURATION).card("v0001")
    assert isinstance(again, DurationCard) and again == card


def test_a_card_missing_a_key_names_it_in_one_line(
    tmp_path: Path, duration_result: TrainResult
) -> None:
    register(tmp_path / "d", duration_result, compile_model=False)
    path = tmp_path / "d" / "v0001" / "card.json"
    raw = json.loads(path.read_text())
    del raw["features"]
    path.write_text(json.dumps(raw))
    with pytest.raises(ModelUnavailable, match="model card lacks 'features'"):
        Registry(tmp_path / "d").card("v0001")
    listed = Registry(tmp_path / "d").listing()
    assert listed[0].verdict.startswith("corrupt:") and listed[0].mae is None


def test_promote_moves_the_champion_back_to_an_earlier_version(
    tmp_path: Path, memory_result: MemoryTrainResult
) -> None:
    root = tmp_path / "memory"
    register(root, memory_result)
    register(root, memory_result)
    promote(root, "v0001")
    assert Registry(root).champion() == "v0001"
    with pytest.raises(ModelUnavailable, match="no such model card"):
        promote(root, "v0042")
    assert isinstance(memory.load(root).card, MemoryCard)


def test_the_settings_read_their_own_environment_prefix_and_are_frozen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DESCHED_TRAIN_MAX_ROUNDS", "7")
    monkeypatch.setenv("DESCHED_INGEST_BATCH_ROWS", "99")
    monkeypatch.setenv("DESCHED_MEMORY_ROUNDS", "11")
    monkeypatch.setenv("DESCHED_MEMORY_MODEL", "models/memory")  # the service's, not training's
    assert TrainSettings().max_rounds == 7 and TrainSettings(max_rounds=3).max_rounds == 3
    assert IngestSettings().batch_rows == 99
    assert MemoryModelSettings().rounds == 11
    settings = TrainSettings()
    with pytest.raises(ValidationError):
        settings.seed = 1
    with pytest.raises(ValidationError):
        TrainSettings(objectives=("l3",))  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        IngestSettings(batch_rows=0)
