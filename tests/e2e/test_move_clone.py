"""Move and clone (issue 10, spec §1.25) through the public path: the Chalice test client, the lifecycle
queue on moto SQS, the real state machine for the documents, DynamoDB and S3/local storage."""

from __future__ import annotations

import base64
import io
import json
import urllib.request
from dataclasses import replace
from typing import Any

from PIL import Image

from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime
from chalicelib.ports import IndexSpace

from .conftest import Api

TIDES = b"# Tides\n\nSpring tides happen at full and new moon, when the sun and moon pull together.\n"
CRANES = b"# Cranes\n\nHarbour cranes lift containers; their load limit is painted on the jib.\n"


def _bread() -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (96, 96), (200, 120, 40)).save(buffer, "PNG")
    data = base64.b64encode(buffer.getvalue()).decode()
    return (
        "# Sourdough\n\nA sourdough starter is flour and water fermented by wild yeast.\n\n"
        f"![crumb](data:image/png;base64,{data})\n"
    ).encode()


def _search(api: Api, kb_id: str, query: str) -> list[dict[str, Any]]:
    response = api.post(f"/knowledge-bases/{kb_id}/hybrid-search", {"query_text": query, "match_count": 20})
    assert response.status_code == 200, response.json_body
    return list(response.json_body["data"])


def _task(api: Api, task_id: str) -> dict[str, Any]:
    response = api.get(f"/tasks/{task_id}")
    assert response.status_code == 200, response.json_body
    return dict(response.json_body["data"])


def _rows(api: Api, kb_id: str) -> list[dict[str, Any]]:
    response = api.get(f"/knowledge-bases/{kb_id}/knowledge?page=1&page_size=100")
    assert response.status_code == 200, response.json_body
    data = response.json_body["data"]
    return list(data["items"] if isinstance(data, dict) else data)


def _upload(api: Api, kb_id: str, name: str, data: bytes) -> dict[str, Any]:
    response = api.upload(kb_id, name, data)
    assert response.status_code in (200, 201), response.json_body
    return dict(response.json_body["data"])


def test_move_with_reuse_vectors_makes_no_embedding_call(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    model = HashingEmbedding(64)
    services.replace_embedding_model(model)
    source, target = api.create_kb(), api.create_kb()
    doc = _upload(api, source["id"], "tides.md", TIDES)
    other = _upload(api, source["id"], "cranes.md", CRANES)
    runtime.drain(timeout=120)
    assert api.knowledge(doc["id"])["parse_status"] == "completed"
    calls = len(model.calls)
    response = api.post(
        "/knowledge/move",
        {
            "source_kb_id": source["id"],
            "target_kb_id": target["id"],
            "ids": [doc["id"]],
            "mode": "reuse_vectors",
        },
    )
    assert response.status_code == 202, response.json_body
    runtime.drain(timeout=120)
    task = _task(api, response.json_body["data"]["task_id"])
    assert (task["status"], task["succeeded"], task["kind"]) == ("completed", 1, "move")
    assert len(model.calls) == calls  # no chunk embedded again
    assert api.knowledge(doc["id"])["kb_id"] == target["id"]
    assert [h["knowledge_id"] for h in _search(api, target["id"], "spring tides full moon")][:1] == [
        doc["id"]
    ]
    assert all(h["knowledge_id"] != doc["id"] for h in _search(api, source["id"], "spring tides full moon"))
    assert [h["knowledge_id"] for h in _search(api, source["id"], "harbour cranes")][:1] == [other["id"]]
    assert all(c.kb_id == target["id"] for c in services.chunks.list(doc["id"]))
    # The dedupe claim moved with it.
    assert api.upload(target["id"], "tides.md", TIDES).status_code == 409
    assert api.upload(source["id"], "tides.md", TIDES).status_code in (200, 201)


def test_move_with_reparse_and_the_checks_up_front(
    api: Api, other_api: Api, runtime: LocalRuntime, services: Services
) -> None:
    source, target = api.create_kb(), api.create_kb(chunking_config={"chunk_size": 120, "chunk_overlap": 10})
    doc = _upload(api, source["id"], "tides.md", TIDES * 6)
    runtime.drain(timeout=120)
    body = {"source_kb_id": source["id"], "target_kb_id": target["id"], "ids": [doc["id"]], "mode": "reparse"}
    # Another embedding model, another type, another tenant: refused before any work.
    stored = services.kbs.get(api.create_kb()["id"])
    assert stored is not None
    services.kbs.put(replace(stored, embedding_model_id="hashing/32"))
    mismatch = api.post("/knowledge/move", {**body, "target_kb_id": stored.id})
    assert mismatch.status_code == 400 and mismatch.json_body["error"]["code"] == "embedding_model_mismatch"
    faq = api.create_kb(type="faq")
    assert api.post("/knowledge/move", {**body, "target_kb_id": faq["id"]}).json_body["error"]["code"] == (
        "kb_type_mismatch"
    )
    assert other_api.post("/knowledge/move", body).status_code == 404
    bad_mode = api.post("/knowledge/move", {**body, "mode": "teleport"})
    assert bad_mode.status_code == 400 and bad_mode.json_body["error"]["code"] == "invalid_mode"
    response = api.post("/knowledge/move", body)
    assert response.status_code == 202
    runtime.drain(timeout=180)
    assert _task(api, response.json_body["data"]["task_id"])["status"] == "completed"
    row = api.knowledge(doc["id"])
    assert (row["kb_id"], row["attempt"], row["parse_status"]) == (target["id"], 2, "completed")
    assert [h["knowledge_id"] for h in _search(api, target["id"], "spring tides full moon")][:1] == [
        doc["id"]
    ]
    assert _search(api, source["id"], "spring tides full moon") == []


def test_clone_with_images_then_delete_the_source_then_search_the_clone(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    source = api.create_kb()
    bread = _upload(api, source["id"], "bread.md", _bread())
    _upload(api, source["id"], "tides.md", TIDES)
    runtime.drain(timeout=180)
    response = api.post(f"/knowledge-bases/{source['id']}/clone", {"name": "handbook mirror"})
    assert response.status_code == 202, response.json_body
    target_id = response.json_body["data"]["target_kb_id"]
    runtime.drain(timeout=180)
    task = _task(api, response.json_body["data"]["task_id"])
    assert (task["status"], task["succeeded"], task["failed"]) == ("completed", 2, 0)
    copies = _rows(api, target_id)
    assert sorted(r["file_name"] for r in copies) == ["bread.md", "tides.md"]
    copy = next(r for r in copies if r["file_name"] == "bread.md")
    assert copy["id"] != bread["id"] and copy["parse_status"] == "completed"
    spans = api.get(f"/knowledge/{copy['id']}/spans").json_body["data"]["trace"]
    embedding = next(s for s in spans if s["span_id"] == "embedding")
    assert embedding["outputs"]["texts_embedded"] == 0 and embedding["outputs"]["entries_copied"] > 0

    deleted = api.client.http.delete(
        f"/api/v1/knowledge-bases/{source['id']}", headers={"X-API-Key": api.api_key}
    )
    assert deleted.status_code == 202
    runtime.drain(timeout=180)
    assert api.get(f"/knowledge-bases/{source['id']}").status_code == 404
    assert services.knowledge.get(bread["id"]) is None
    hits = _search(api, target_id, "sourdough starter wild yeast")
    assert hits and hits[0]["knowledge_id"] == copy["id"]
    links = [part.split(")")[0] for part in hits[0]["content"].split("](")[1:]]
    assert links and all(f"/{copy['id']}/images/" in link for link in links)
    for link in links:  # signed links (issue 26), and the images behind them still there
        with urllib.request.urlopen(link, timeout=10) as image:
            assert image.read()[:8] == b"\x89PNG\r\n\x1a\n"
    stored = services.knowledge.get(copy["id"])
    assert stored is not None and services.files.read(stored.file_path) == _bread()


def test_clone_into_an_existing_kb_deletes_extras_and_a_redelivered_message_changes_nothing(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    source, target = api.create_kb(), api.create_kb()
    for name, data in (("tides.md", TIDES), ("cranes.md", CRANES)):
        _upload(api, source["id"], name, data)
    same = _upload(api, target["id"], "tides.md", TIDES)
    extra = _upload(api, target["id"], "extra.md", b"# Extra\n\nlighthouse lamp oil inventory")
    runtime.drain(timeout=180)
    response = api.post(f"/knowledge-bases/{source['id']}/clone", {"target_kb_id": target["id"]})
    assert response.status_code == 202, response.json_body
    task_id = response.json_body["data"]["task_id"]
    services.queue.send_raw("lifecycle", {"task_id": task_id})  # the same task message, delivered twice
    runtime.drain(timeout=180)
    task = _task(api, task_id)
    assert (task["status"], task["total"], task["succeeded"]) == ("completed", 2, 2)  # one delete, one copy
    rows = _rows(api, target["id"])
    assert sorted(r["file_name"] for r in rows) == ["cranes.md", "tides.md"]
    assert same["id"] in {r["id"] for r in rows}
    assert api.get(f"/knowledge/{extra['id']}").status_code == 404
    assert all(h["knowledge_id"] != extra["id"] for h in _search(api, target["id"], "lighthouse lamp oil"))
    services.queue.send_raw("lifecycle", {"task_id": task_id})  # once more after it finished
    runtime.drain(timeout=60)
    assert len(_rows(api, target["id"])) == 2 and _task(api, task_id) == task
    space = IndexSpace.of(services.embedding_model(""))
    copy = next(r for r in rows if r["file_name"] == "cranes.md")
    assert services.engine().count(space, target["id"], copy["id"]) > 0


def test_a_clones_description_points_at_its_own_images(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """Issue 24, defect 6: the copy's chunks were rewritten to its own images, and so is its description."""
    source = api.create_kb()
    bread = _upload(api, source["id"], "bread.md", _bread())
    runtime.drain(timeout=180)
    chunk = next(c for c in services.chunks.list(bread["id"]) if "](" in c.content)
    image = chunk.content.split("](")[1].split(")")[0]  # the stored URL (search shows signed links)
    edited = api.client.http.put(
        f"/api/v1/knowledge/{bread['id']}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body=json.dumps({"description": f"A loaf: ![crumb]({image})"}),
    )
    assert edited.status_code == 200, edited.json_body
    response = api.post(f"/knowledge-bases/{source['id']}/clone", {"name": "bread mirror"})
    assert response.status_code == 202, response.json_body
    runtime.drain(timeout=180)
    copy = _rows(api, response.json_body["data"]["target_kb_id"])[0]
    assert image not in copy["description"]
    assert f"/{copy['id']}/images/" in copy["description"]
