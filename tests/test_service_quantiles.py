"""The service's quantile predictions: the p50 and p90 models a duration card lists are loaded
with it, predicted once at submit beside ``predicted_s``, stored, rebuilt after a restart and
read by the Boost policies from the live task table, as the judge's runs read them."""

from __future__ import annotations

import logging
import math
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from desched.models.duration import QUANTILE_KEYS, Predictor
from desched.models.loading import load_duration_predictor
from desched.models.registry import Registry
from desched.service.records import NewTask
from desched.service.schema import SCHEMA
from desched.service.store import Store
from desched.service.writer import wait
from tests.test_service_scheduler import FakeTime, FixedPredictor, make_scheduler, poll


@pytest.fixture(scope="module")
def registry(small_duration_registry: Path) -> Path:
    return small_duration_registry


@pytest.fixture(scope="module")
def predictor(registry: Path) -> Predictor:
    return Predictor.load(registry, quantiles=True)


def _reference(predictor: Predictor, key: str, x: np.ndarray) -> np.ndarray:
    import lightgbm as lgb

    folder = Registry(predictor.model_path.parent.parent).root / predictor.version
    booster = lgb.Booster(model_file=str(folder / predictor.card.files[key]))
    return np.exp(np.asarray(booster.predict(x), dtype=np.float64))


def test_the_service_loader_loads_the_quantile_models_the_card_lists(registry: Path) -> None:
    loaded, reason = load_duration_predictor(registry)
    assert reason is None and isinstance(loaded, Predictor)
    assert sorted(loaded.quantiles) == sorted(QUANTILE_KEYS)
    assert loaded.labels == ("predicted_s", "predicted_p50_s", "predicted_p90_s")
    bare = Predictor.load(registry)  # the batch paths that do not need them compile none
    assert bare.quantiles == {} and bare.labels == ("predicted_s",)
    labels = bare.predict_labels({"tenant": "t0", "task_type": "extract", "submit_s": 1.0})
    assert math.isfinite(labels[0]) and math.isnan(labels[1]) and math.isnan(labels[2])


@settings(max_examples=60, deadline=None)
@given(
    tenant=st.sampled_from(["t0", "t3", "t9", "unseen"]),
    task_type=st.sampled_from(["extract", "embed", "ocr", "unknown"]),
    doc_bytes=st.one_of(st.none(), st.integers(0, 10**8)),
    pages=st.one_of(st.none(), st.integers(0, 500)),
    submit_s=st.floats(0, 1e6),
)
def test_predict_labels_equals_booster_predict_of_each_model_on_one_encoding(
    predictor: Predictor,
    tenant: str,
    task_type: str,
    doc_bytes: int | None,
    pages: int | None,
    submit_s: float,
) -> None:
    task = {"tenant": tenant, "task_type": task_type, "doc_bytes": doc_bytes, "pages": pages,
            "submit_s": submit_s}
    mean, p50, p90 = predictor.predict_labels(task)
    x = predictor.encode(task)[None, :]
    assert mean == predictor.predict_one(task)
    np.testing.assert_allclose(mean, predictor.reference_batch(x)[0], rtol=1e-9)
    np.testing.assert_allclose(p50, _reference(predictor, "p50", x)[0], rtol=1e-9)
    np.testing.assert_allclose(p90, _reference(predictor, "p90", x)[0], rtol=1e-9)
    batch = predictor.predict_quantiles(x)  # numpy's exp, not math's: equal to the last bits
    np.testing.assert_allclose([batch["p50"][0], batch["p90"][0]], [p50, p90], rtol=1e-15)


def test_a_corrupt_quantile_model_leaves_it_out_with_a_warning_not_the_predictor(
    registry: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    copy = tmp_path / "duration"
    shutil.copytree(registry, copy)
    version = Registry(copy).champion_or_error()
    p90 = copy / version / "p90.txt"
    p90.write_text(p90.read_text().replace("tree", "trea", 3))
    with caplog.at_level(logging.WARNING, logger="desched.models"):
        loaded = Predictor.load(copy, quantiles=True)
    assert sorted(loaded.quantiles) == ["p50"]
    assert loaded.labels == ("predicted_s", "predicted_p50_s")
    assert "p90.txt: quantile model p90 not loaded: checksum differs" in caplog.text
    _, p50, p90_s = loaded.predict_labels({"tenant": "t0", "task_type": "extract"})
    assert math.isfinite(p50) and math.isnan(p90_s)


def _stored(db: Path) -> list[tuple[float | None, float | None, float | None]]:
    con = sqlite3.connect(db)
    try:
        return con.execute(
            "SELECT predicted_s, predicted_p50_s, predicted_p90_s FROM tasks ORDER BY seq"
        ).fetchall()
    finally:
        con.close()


def test_quantiles_are_predicted_at_submit_stored_and_rebuilt_after_a_restart(
    tmp_path: Path,
) -> None:
    db = tmp_path / "state.db"
    sched = make_scheduler(db, FakeTime(), predictor=FixedPredictor(), policy="boost-predicted")
    try:
        ids, _, pending = sched.submit("a", [NewTask("extract", pages=3), NewTask("extract")])
        wait(pending)
        table = sched.tasks
        positions = [sched.position[i] for i in ids]
        assert [(table.predicted_s[i], table.predicted_p50_s[i], table.predicted_p90_s[i])
                for i in positions] == [(6.0, 3.0, 18.0), (2.0, 1.0, 6.0)]
        assert sched.health().predicted_labels == [
            "predicted_s", "predicted_p50_s", "predicted_p90_s"]  # /healthz
        view = sched.task_view("a", ids[0])  # what GET /v1/tasks/{id} answers
        assert (view.predicted_s, view.predicted_p50_s, view.predicted_p90_s) == (6.0, 3.0, 18.0)
    finally:
        sched.stop()
    assert _stored(db) == [(6.0, 3.0, 18.0), (2.0, 1.0, 6.0)]
    # a restart without any model rebuilds the stored labels, and the policy still runs on them
    again = make_scheduler(db, FakeTime(), predictor=FixedPredictor(), policy="boost-predicted")
    try:
        rebuilt = sorted((again.tasks.predicted_p50_s[i], again.tasks.predicted_p90_s[i])
                         for i in again.live)
        assert rebuilt == [(1.0, 6.0), (3.0, 18.0)]
        assert poll(again).task.task_id in ids
    finally:
        again.stop()


def test_the_real_predictor_fills_the_stored_quantiles(
    tmp_path: Path, predictor: Predictor
) -> None:
    db = tmp_path / "state.db"
    sched = make_scheduler(db, FakeTime(), predictor=predictor, policy="boost-predicted")
    try:
        _, _, pending = sched.submit("t1", [NewTask("extract", pages=p) for p in (1, 30)])
        wait(pending)
    finally:
        sched.stop()
    rows = _stored(db)
    assert len(rows) == 2
    for mean, p50, p90 in rows:
        assert mean is not None and p50 is not None and p90 is not None
        assert mean > 0 and 0 < p50 < p90


def test_an_old_database_gains_the_quantile_columns_and_its_tasks_have_none(
    tmp_path: Path,
) -> None:
    db = tmp_path / "old.db"
    old_schema = SCHEMA[1].replace("predicted_p50_s DOUBLE PRECISION,", "").replace(
        "predicted_p90_s DOUBLE PRECISION,", "")
    assert "predicted_p50_s" not in old_schema and "predicted_p90_s" not in old_schema
    con = sqlite3.connect(db)
    con.execute(old_schema)
    con.execute(
        "INSERT INTO tasks (seq, task_id, tenant, task_type, document_ref, submit_s, "
        "predicted_s, state) VALUES (1, 't-old', 'a', 'extract', '', 0.0, 4.0, 'queued')")
    con.commit()
    con.close()
    store = Store(str(db))
    try:
        store.migrate()
        cols = [r[1] for r in store.execute("PRAGMA table_info(tasks)").fetchall()]
    finally:
        store.close()
    assert cols.count("predicted_p50_s") == 1 and cols.count("predicted_p90_s") == 1
    sched = make_scheduler(db, FakeTime(), predictor=FixedPredictor(), policy="boost-predicted")
    try:
        (i,) = sched.live
        assert sched.tasks.predicted_s[i] == 4.0
        assert math.isnan(sched.tasks.predicted_p50_s[i])
        assert math.isnan(sched.tasks.predicted_p90_s[i])
        assert poll(sched).task.task_id == "t-old"  # the policy ranks it on predicted_s alone
    finally:
        sched.stop()


def test_a_quantile_model_of_other_features_is_left_out_not_misread(
    registry: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import json

    import lightgbm as lgb

    from desched.models.registry import CARD, file_sha256

    copy = tmp_path / "duration"
    shutil.copytree(registry, copy)
    folder = copy / Registry(copy).champion_or_error()
    rng = np.random.default_rng(0)
    x = rng.random((200, 3))
    other = lgb.train({"objective": "quantile", "alpha": 0.9, "verbose": -1},
                      lgb.Dataset(x, x.sum(axis=1)), num_boost_round=5)
    other.save_model(str(folder / "p90.txt"))
    card = json.loads((folder / CARD).read_text())
    card["sha256"]["p90"] = file_sha256(folder / "p90.txt")  # a consistent card, other trees
    (folder / CARD).write_text(json.dumps(card))
    with caplog.at_level(logging.WARNING, logger="desched.models"):
        loaded = Predictor.load(copy, quantiles=True)
    assert sorted(loaded.quantiles) == ["p50"]
    assert "quantile model p90 not loaded: 3 features" in caplog.text
