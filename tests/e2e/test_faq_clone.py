"""Issue 24, defect 3 and spec row 32/33: cloning an FAQ knowledge base copies its entries (a diff by content
hash: matched pairs only take the source's state, missing entries are copied, extras go), through the public
path; a redelivered task message changes nothing."""

from __future__ import annotations

from typing import Any

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api
from .test_faq import entry, search, task


def _entries(api: Api, kb_id: str) -> list[dict[str, Any]]:
    page = api.get(f"/knowledge-bases/{kb_id}/faq/entries?limit=100").json_body["data"]
    return list(page["items"])


def _add(api: Api, kb_id: str, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post(f"/knowledge-bases/{kb_id}/faq/entries", body)
    assert response.status_code == 201, response.json_body
    return dict(response.json_body["data"])


def _put(api: Api, kb_id: str, entry_id: str, body: str) -> None:
    response = api.client.http.put(
        f"/api/v1/knowledge-bases/{kb_id}/faq/entries/{entry_id}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body=body,
    )
    assert response.status_code == 200, response.json_body


def test_cloning_an_faq_knowledge_base_copies_its_entries_into_a_new_one(
    api: Api, runtime: LocalRuntime
) -> None:
    source = api.create_kb(type="faq")
    password = _add(
        api, source["id"], entry("How do I reset my password?", "Use the reset link.", tags=["account"])
    )
    _add(api, source["id"], entry("What are the opening hours?", "9 to 5"))
    response = api.post(f"/knowledge-bases/{source['id']}/clone", {"name": "faq mirror"})
    assert response.status_code == 202, response.json_body
    target_id = response.json_body["data"]["target_kb_id"]
    runtime.drain(timeout=120)
    done = task(api, response.json_body["data"]["task_id"])
    assert done["status"] == "completed", done
    copies = _entries(api, target_id)
    assert sorted(e["standard_question"] for e in copies) == [
        "How do I reset my password?",
        "What are the opening hours?",
    ]
    assert all(e["indexed"] for e in copies) and password["id"] not in {e["id"] for e in copies}
    hits = search(api, target_id, "reset my password")
    assert hits and hits[0]["answers"] == ["Use the reset link."]
    assert hits[0]["entry_id"] in {e["id"] for e in copies}
    assert api.get(f"/knowledge-bases/{target_id}/faq/tags").json_body["data"] == ["account"]


def test_cloning_into_an_existing_faq_kb_syncs_matches_copies_the_missing_and_drops_extras(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    source, target = api.create_kb(type="faq"), api.create_kb(type="faq")
    hours = _add(api, source["id"], entry("What are the opening hours?", "9 to 5"))
    _put(api, source["id"], hours["id"], '{"is_enabled": false}')
    _add(api, source["id"], entry("Where is the office?", "Main street 1"))
    matched = _add(api, target["id"], entry("What are the opening hours?", "9 to 5"))
    extra = _add(api, target["id"], entry("Is there parking?", "No"))
    response = api.post(f"/knowledge-bases/{source['id']}/clone", {"target_kb_id": target["id"]})
    assert response.status_code == 202, response.json_body
    task_id = response.json_body["data"]["task_id"]
    services.queue.send_raw("lifecycle", {"task_id": task_id})  # the same task message, delivered twice
    runtime.drain(timeout=120)
    assert task(api, task_id)["status"] == "completed"
    entries = {e["standard_question"]: e for e in _entries(api, target["id"])}
    assert sorted(entries) == ["What are the opening hours?", "Where is the office?"]
    kept = entries["What are the opening hours?"]
    assert kept["id"] == matched["id"] and kept["is_enabled"] is False  # the same entry, the source's state
    assert all(h["entry_id"] != matched["id"] for h in search(api, target["id"], "opening hours"))
    assert all(h["entry_id"] != extra["id"] for h in search(api, target["id"], "parking"))
    assert search(api, target["id"], "where is the office")[0]["standard_question"] == "Where is the office?"
    services.queue.send_raw("lifecycle", {"task_id": task_id})  # once more after it finished
    runtime.drain(timeout=60)
    assert len(_entries(api, target["id"])) == 2
