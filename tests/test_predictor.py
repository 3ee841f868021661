"""The predictor runtime: compiled predictions equal Booster.predict; clear errors; fallback."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from desched.models.duration import (
    FALLBACK_POLICY,
    Predictor,
    load_or_none,
    policy_without_prediction,
)
from desched.models.features import HISTORY, with_history
from desched.models.promotion import register
from desched.models.registry import ModelUnavailable, Registry
from desched.models.training import TrainSettings, train
from desched.workloads import generate


@pytest.fixture(scope="module")
def registry(small_duration_registry: Path) -> Path:
    return small_duration_registry


@pytest.fixture(scope="module")
def predictor(registry: Path) -> Predictor:
    return Predictor.load(registry)


def copy_registry(registry: Path, tmp_path: Path) -> Path:
    target = tmp_path / "duration"
    shutil.copytree(registry, target)
    return target


_value = st.one_of(
    st.just(math.nan),
    st.floats(-1e3, 1e7, allow_nan=False),
    st.integers(-3, 40).map(float),  # category codes: known, unseen (>= 10) and negative
)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_compiled_predictions_equal_booster_predict_to_1e_9_on_random_rows(
    predictor: Predictor, data: st.DataObject
) -> None:
    n_features = len(predictor.spec.names)
    x = data.draw(
        arrays(np.float64, st.tuples(st.integers(1, 20), st.just(n_features)), elements=_value)
    )
    fast = predictor.predict_batch(x)
    reference = predictor.reference_batch(x)
    np.testing.assert_allclose(fast, reference, rtol=0, atol=1e-9)
    for row, want in zip(x, reference, strict=True):
        predictor._forest.row[:] = row
        assert abs(predictor._seconds(predictor._forest.predict_row()) - want) <= 1e-9


@settings(max_examples=100, deadline=None)
@given(
    tenant=st.sampled_from(["t00", "t03", "t09", "never-seen", None]),
    task_type=st.sampled_from(["ocr_clean", "extract", "classify", "embed", "new-type"]),
    doc_bytes=st.one_of(st.none(), st.integers(1, 10**9)),
    pages=st.one_of(st.none(), st.integers(1, 5000)),
    submit_s=st.floats(0, 1e6),
    recent=st.one_of(st.none(), st.floats(0.1, 1e4)),
)
def test_predict_one_equals_booster_predict_on_the_encoded_task(
    predictor: Predictor,
    tenant: str | None,
    task_type: str,
    doc_bytes: int | None,
    pages: int | None,
    submit_s: float,
    recent: float | None,
) -> None:
    task = {
        "tenant": tenant,
        "task_type": task_type,
        "doc_bytes": doc_bytes,
        "pages": pages,
        "submit_s": submit_s,
        "tenant_recent_mean_s": recent,
    }
    got = predictor.predict_one(task)
    want = predictor.reference_batch(predictor.encode(task)[None, :])[0]
    assert abs(got - want) <= 1e-9


def test_batch_and_single_predictions_of_a_trace_agree(predictor: Predictor) -> None:
    frame = with_history(generate("steady", tasks=300, tenants=10, seed=4))
    batch = predictor.predict_batch(frame)
    singles = [predictor.predict_one(row) for row in frame.iter_rows(named=True)]
    np.testing.assert_allclose(batch, singles, rtol=0, atol=1e-9)
    np.testing.assert_allclose(
        batch, predictor.reference_batch(predictor.features_of(frame)), rtol=0, atol=1e-9
    )
    assert np.all(batch > 0)


def test_predict_one_reads_history_only_from_reported_completions(registry: Path) -> None:
    p = Predictor.load(registry)
    task = {
        "tenant": "t01",
        "task_type": "extract",
        "doc_bytes": 50_000,
        "pages": 3,
        "submit_s": 100.0,
    }
    assert np.isnan(p.encode(task)[-len(HISTORY) :]).all()
    p.observe_completion("t01", "extract", 10.0)
    p.observe_completion("t01", "embed", 20.0)
    history = dict(zip(HISTORY, p.encode(task)[-len(HISTORY) :], strict=True))
    assert history == {
        "tenant_recent_mean_s": 15.0,
        "tenant_last2_mean_s": 15.0,
        "tenant_type_recent_mean_s": 10.0,
        "tenant_done_n": 2.0,
    }


def test_a_missing_registry_gives_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ModelUnavailable, match="no champion model"):
        Predictor.load(tmp_path / "nothing")


def test_a_corrupt_model_file_gives_a_clear_error(registry: Path, tmp_path: Path) -> None:
    root = copy_registry(registry, tmp_path)
    (root / "v0001" / "model.txt").write_text("tree\nnot a model\n")
    with pytest.raises(ModelUnavailable, match="model file is corrupt"):
        Predictor.load(root)


def test_a_deleted_model_file_gives_a_clear_error(registry: Path, tmp_path: Path) -> None:
    root = copy_registry(registry, tmp_path)
    (root / "v0001" / "model.txt").unlink()
    with pytest.raises(ModelUnavailable, match="model file is missing"):
        Predictor.load(root)


def test_a_corrupt_card_or_champion_pointer_gives_a_clear_error(
    registry: Path, tmp_path: Path
) -> None:
    root = copy_registry(registry, tmp_path)
    (root / "v0001" / "card.json").write_text("{not json")
    with pytest.raises(ModelUnavailable, match="unreadable model card"):
        Predictor.load(root)
    (root / "CHAMPION").write_text("v0042\n")
    with pytest.raises(ModelUnavailable, match="has no card"):
        Predictor.load(root)


def test_a_corrupt_compiled_file_is_recompiled_not_loaded(
    registry: Path, predictor: Predictor, tmp_path: Path
) -> None:
    root = copy_registry(registry, tmp_path)
    (root / "v0001" / "model.so").write_bytes(b"\x7fELF garbage")
    rebuilt = Predictor.load(root)
    x = predictor.features_of(generate("steady", tasks=200, tenants=10, seed=9))
    np.testing.assert_allclose(rebuilt.predict_batch(x), predictor.predict_batch(x), atol=1e-12)


def test_a_missing_model_lets_the_scheduler_fall_back_to_a_policy_without_prediction(
    tmp_path: Path,
) -> None:
    loaded, reason = load_or_none(tmp_path / "nothing")
    assert loaded is None and reason is not None and "no champion" in reason
    assert policy_without_prediction("srpt-predicted", True, loaded is not None) == FALLBACK_POLICY
    assert policy_without_prediction("fifo", False, False) == "fifo"


def test_the_model_layer_imports_no_prefect_lightgbm_duckdb_service_or_enrichment() -> None:
    code = (
        "import sys, desched.models.duration, desched.models.memory, desched.models.loading,"
        " desched.models.promotion, desched.models.training, desched.models.memory_training;"
        "bad = [m for m in ('prefect', 'lightgbm', 'lleaves', 'duckdb', 'desched.service',"
        " 'desched.enrich') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_registry_listing_marks_the_champion(registry: Path) -> None:
    rows = Registry(registry).listing()
    assert [(r.version, r.champion, r.verdict) for r in rows] == [
        ("v0001", True, "promoted")
    ]
    card = json.loads((registry / "v0001" / "card.json").read_text())
    assert card["sha256"]["model"] and card["compiled_for"]


def test_predicting_a_frame_without_history_columns_computes_them_from_the_frame(
    predictor: Predictor,
) -> None:
    frame = generate("steady", tasks=50, tenants=10, seed=2)
    assert not any(c in frame.columns for c in HISTORY)
    np.testing.assert_allclose(
        predictor.predict_batch(frame), predictor.predict_batch(with_history(frame)), atol=0
    )
    assert isinstance(frame, pl.DataFrame)


def _compiles(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The model paths lleaves actually compiles (not loads from an existing object file)."""
    import lleaves

    calls: list[str] = []
    original = lleaves.Model.compile

    def spy(self: lleaves.Model, cache: str | None = None, **kw: object) -> None:
        if cache is None or not Path(cache).exists():
            calls.append(str(self.model_file))
        original(self, cache=cache, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(lleaves.Model, "compile", spy)
    return calls


def test_a_model_text_compiled_once_on_this_machine_is_loaded_not_compiled_again(
    registry: Path, predictor: Predictor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from desched.models.duration import shared_forest

    monkeypatch.setenv("DESCHED_FOREST_CACHE", str(tmp_path / "forests"))
    calls = _compiles(monkeypatch)
    first = copy_registry(registry, tmp_path / "a")
    (first / "v0001" / "model.so").unlink()
    Predictor.load(first)
    assert len(calls) == 1  # an empty machine cache: compiled, then published
    entry = shared_forest(first / "v0001" / "model.txt")
    assert entry is not None and entry.is_file() and entry.with_suffix(".sha256").is_file()

    second = copy_registry(registry, tmp_path / "b")
    (second / "v0001" / "model.so").unlink()
    again = Predictor.load(second)
    assert len(calls) == 1  # the same text elsewhere: the machine's object code, no compile
    x = predictor.features_of(generate("steady", tasks=200, tenants=10, seed=9))
    np.testing.assert_array_equal(again.predict_batch(x), predictor.predict_batch(x))

    # Another model text never takes that entry.
    other = tmp_path / "other" / "duration"
    register(other, train(generate("steady", tasks=600, tenants=4, seed=5),
                          TrainSettings(max_rounds=20)), commit="test")
    assert len(calls) == 2


def test_an_altered_machine_cache_entry_is_ignored_and_replaced(
    registry: Path, predictor: Predictor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from desched.models.duration import shared_forest

    monkeypatch.setenv("DESCHED_FOREST_CACHE", str(tmp_path / "forests"))
    root = copy_registry(registry, tmp_path / "a")
    (root / "v0001" / "model.so").unlink()
    Predictor.load(root)
    entry = shared_forest(root / "v0001" / "model.txt")
    assert entry is not None
    entry.write_bytes(b"\x7fELF garbage")  # its checksum no longer holds
    calls = _compiles(monkeypatch)
    fresh = copy_registry(registry, tmp_path / "b")
    (fresh / "v0001" / "model.so").unlink()
    rebuilt = Predictor.load(fresh)
    assert len(calls) == 1
    x = predictor.features_of(generate("steady", tasks=200, tenants=10, seed=9))
    np.testing.assert_allclose(rebuilt.predict_batch(x), predictor.predict_batch(x), atol=1e-12)
    assert entry.read_bytes() == (fresh / "v0001" / "model.so").read_bytes()


def test_the_machine_cache_off_writes_nothing_and_a_read_only_one_still_compiles(
    registry: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    monkeypatch.setenv("DESCHED_FOREST_CACHE", "off")
    root = copy_registry(registry, tmp_path / "a")
    (root / "v0001" / "model.so").unlink()
    Predictor.load(root)
    assert (root / "v0001" / "model.so").is_file()

    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        monkeypatch.setenv("DESCHED_FOREST_CACHE", str(locked / "forests"))
        other = copy_registry(registry, tmp_path / "b")
        (other / "v0001" / "model.so").unlink()
        assert Predictor.load(other).version == "v0001"
        if os.geteuid() != 0:  # root writes anywhere: only the load is checked then
            assert not (locked / "forests").exists()
    finally:
        locked.chmod(0o700)


def test_the_service_follows_its_registrys_champion_keeping_the_tenant_history(
    registry: Path, tmp_path: Path
) -> None:
    # A promotion (here: the champion's folder copied as the next version and pointed to) is
    # loaded by the housekeeper's refresh, which before the service never did: a running
    # service kept the model it started with whatever the nightly retraining promoted.
    import threading

    from desched.models.loading import load_duration_predictor
    from desched.service.predictions import Predictions

    root = copy_registry(registry, tmp_path)
    first, _ = load_duration_predictor(root)
    assert first is not None
    predictions, lock = Predictions(first, None), threading.Lock()
    predictions.registry = root
    assert not predictions.refresh(lock) and predictions.version == "v0001"
    predictions.observe_completion("tenant00", "ocr", 42.0)

    def as_version(name: str, corrupt: bool = False) -> None:
        shutil.copytree(root / "v0001", root / name)
        card = json.loads((root / name / "card.json").read_text())
        (root / name / "card.json").write_text(json.dumps({**card, "version": name}))
        if corrupt:
            with (root / name / "model.txt").open("a") as handle:
                handle.write("junk\n")
        (root / "CHAMPION").write_text(name + "\n")

    as_version("v0002")
    assert predictions.refresh(lock) and predictions.version == "v0002"
    assert predictions.error is None
    assert predictions.duration is not first
    assert predictions.duration.history.recent["tenant00"][-1] == 42.0  # type: ignore[union-attr]
    as_version("v0003", corrupt=True)
    assert not predictions.refresh(lock)
    assert predictions.version == "v0002"  # the last model that loaded serves on
    assert predictions.error is not None and predictions.error.startswith(
        "champion v0003 not loaded, v0002 serves: ")
    assert not predictions.refresh(lock)  # not tried again while its files stay as they are
    (root / "CHAMPION").write_text("v0002\n")  # back to the model serving: no error left
    assert not predictions.refresh(lock) and predictions.error is None
    (root / "CHAMPION").write_text("v0003\n")  # the same broken files: not tried again
    assert not predictions.refresh(lock) and predictions.version == "v0002"
    shutil.copy(root / "v0002" / "model.txt", root / "v0003" / "model.txt")  # fixed in place
    assert predictions.refresh(lock) and predictions.version == "v0003"
    assert predictions.error is None
    (root / "CHAMPION").write_bytes(b"\xff\xfe\n")  # unreadable: said, nothing raised
    assert not predictions.refresh(lock) and predictions.version == "v0003"
    assert predictions.error is not None and predictions.error.startswith(
        "the registry's champion not loaded, v0003 serves: UnicodeDecodeError")


def test_healthz_names_the_model_serving_and_follows_a_promotion(
    registry: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The whole app over a registry, with its real housekeeper: /healthz says which version
    # serves, and a promotion is served within a check period, with no restart.
    import time

    from fastapi.testclient import TestClient

    from desched.service import predictions
    from desched.service.app import create_app
    from desched.service.settings import ServiceSettings

    monkeypatch.setattr(predictions, "MODEL_CHECK_S", 0.1)
    root = copy_registry(registry, tmp_path)
    settings = ServiceSettings(db=str(tmp_path / "state.db"), log_dir=tmp_path / "logs",
                               predictor_registry=root, sweep_s=0.05)
    with TestClient(create_app(settings)) as client:
        health = client.get("/healthz").json()
        assert (health["model_version"], health["model_error"]) == ("v0001", None)
        shutil.copytree(root / "v0001", root / "v0002")
        card = json.loads((root / "v0002" / "card.json").read_text())
        (root / "v0002" / "card.json").write_text(json.dumps({**card, "version": "v0002"}))
        (root / "CHAMPION").write_text("v0002\n")
        deadline = time.monotonic() + 20
        while client.get("/healthz").json()["model_version"] != "v0002":
            assert time.monotonic() < deadline, "the promotion was never loaded"
            time.sleep(0.05)
        (root / "CHAMPION").write_text("v0009\n")  # a pointer to nothing
        while client.get("/healthz").json()["model_error"] is None:
            assert time.monotonic() < deadline, "the dangling pointer was never reported"
            time.sleep(0.05)
        health = client.get("/healthz").json()
        assert health["model_version"] == "v0002" and "v0009" in health["model_error"]


def test_a_model_that_loads_after_the_start_lets_a_recorded_prediction_policy_run(
    registry: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a QA pass: the service knew of a model only at its start, so a policy that ranks on
    # predictions stayed refused after the registry's first champion loaded
    import time

    from fastapi.testclient import TestClient

    from desched.service import predictions
    from desched.service.app import create_app
    from desched.service.settings import ServiceSettings
    from desched.service.store import Store

    monkeypatch.setattr(predictions, "MODEL_CHECK_S", 0.1)
    root = copy_registry(registry, tmp_path)
    (root / "CHAMPION").unlink()  # trained, not yet promoted
    settings = ServiceSettings(db=str(tmp_path / "state.db"), log_dir=tmp_path / "logs",
                               predictor_registry=root, sweep_s=0.05)
    with TestClient(create_app(settings)) as client:
        store = Store(settings.db)
        store.set_policy("sjf-predicted", {})
        store.close()
        deadline = time.monotonic() + 20
        while client.get("/healthz").json()["policy_error"] is None:
            assert time.monotonic() < deadline, "the recorded policy was never refused"
            time.sleep(0.05)
        health = client.get("/healthz").json()
        assert health["policy"] != "sjf-predicted" and health["model_version"] is None
        (root / "CHAMPION").write_text("v0001\n")  # promoted
        while client.get("/healthz").json()["policy"] != "sjf-predicted":
            assert time.monotonic() < deadline, client.get("/healthz").json()
            time.sleep(0.05)
        health = client.get("/healthz").json()
        assert (health["model_version"], health["policy_error"]) == ("v0001", None)


def test_a_champion_that_fails_at_the_start_is_named_in_healthz_at_once(
    registry: Path, tmp_path: Path
) -> None:
    # a QA pass: model_error stayed null until the first check, 5 s after the start
    import time

    from fastapi.testclient import TestClient

    from desched.service.app import create_app
    from desched.service.settings import ServiceSettings

    root = copy_registry(registry, tmp_path)
    with (root / "v0001" / "model.txt").open("a") as handle:
        handle.write("junk\n")
    settings = ServiceSettings(db=str(tmp_path / "state.db"), log_dir=tmp_path / "logs",
                               predictor_registry=root)
    with TestClient(create_app(settings)) as client:
        deadline = time.monotonic() + 3  # well inside the 5 s between checks
        while (health := client.get("/healthz").json())["model_error"] is None:
            assert time.monotonic() < deadline, health
            time.sleep(0.05)
    assert health["model_version"] is None
    assert health["model_error"].startswith("champion v0001 not loaded, no model serves: ")
