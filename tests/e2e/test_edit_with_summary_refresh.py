"""Issue 24, defects 1 and 2: one `PUT /knowledge/{id}` that disables a document and changes its title (so the
summary is refreshed) must leave it out of search after the refresh too, and a description written in the
same request outlives the refresh."""

from __future__ import annotations

from typing import Any

from chalicelib.local.runtime import LocalRuntime

from .conftest import Api

TIDES = b"# Tides\n\nSpring tides happen at full and new moon, when the sun and moon pull together.\n"


def _put(api: Api, knowledge_id: str, body: str) -> dict[str, Any]:
    response = api.client.http.put(
        f"/api/v1/knowledge/{knowledge_id}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body=body,
    )
    assert response.status_code == 200, response.json_body
    return dict(response.json_body["data"])


def _hits(api: Api, kb_id: str, query: str) -> list[dict[str, Any]]:
    response = api.post(f"/knowledge-bases/{kb_id}/hybrid-search", {"query_text": query, "match_count": 20})
    assert response.status_code == 200, response.json_body
    return list(response.json_body["data"])


def test_a_disabled_document_stays_out_of_search_after_the_summary_refresh_of_the_same_edit(
    api: Api, runtime: LocalRuntime
) -> None:
    kb = api.create_kb(summary_model_id="local/extractive")
    created = api.upload(kb["id"], "tides.md", TIDES * 20).json_body["data"]
    runtime.drain(timeout=120)
    assert api.knowledge(created["id"])["summary_status"] == "completed"
    assert _hits(api, kb["id"], "summary spring tides full moon")
    _put(api, created["id"], '{"enable_status": "disabled", "title": "Tides (archived)"}')
    runtime.drain(timeout=120)
    row = api.knowledge(created["id"])
    assert row["summary_status"] == "completed" and row["enable_status"] == "disabled"
    assert _hits(api, kb["id"], "summary spring tides full moon") == []
    _put(api, created["id"], '{"enable_status": "enabled"}')
    assert any(h["knowledge_id"] == created["id"] for h in _hits(api, kb["id"], "summary spring tides"))


def test_a_description_written_with_a_title_change_outlives_the_summary_refresh(
    api: Api, runtime: LocalRuntime
) -> None:
    kb = api.create_kb(summary_model_id="local/extractive")
    created = api.upload(kb["id"], "tides.md", TIDES * 20).json_body["data"]
    runtime.drain(timeout=120)
    generated = api.knowledge(created["id"])["description"]
    assert generated
    edited = _put(api, created["id"], '{"title": "Tides, revised", "description": "Our notes on tides."}')
    assert edited["description"] == "Our notes on tides."
    runtime.drain(timeout=120)
    row = api.knowledge(created["id"])
    assert row["summary_status"] == "completed"
    assert row["description"] == "Our notes on tides."
    # an empty description hands it back to the summary
    _put(api, created["id"], '{"description": "", "title": "Tides again"}')
    runtime.drain(timeout=120)
    assert api.knowledge(created["id"])["description"] == generated
