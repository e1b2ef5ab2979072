"""Issue 24: PUT /knowledge-bases/{id} with the specification's scope rule (new documents only, or reparse
the existing ones), the durable re-embed a new embedding model needs, and defect 9 (every index off)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime
from chalicelib.ports import IndexSpace
from chalicelib.settings import ModelCatalog

from .conftest import Api

PARAGRAPHS = "\n\n".join(
    f"Paragraph {i}: the harbour pilot boards ship {i} at the breakwater and guides it past the shoals."
    for i in range(30)
)
DOC = f"# Harbour pilots\n\n{PARAGRAPHS}\n".encode()


def _put(api: Api, kb_id: str, body: dict[str, Any]) -> Any:
    return api.client.http.put(
        f"/api/v1/knowledge-bases/{kb_id}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body=json.dumps(body),
    )


def _search(api: Api, kb_id: str, query: str) -> list[dict[str, Any]]:
    response = api.post(f"/knowledge-bases/{kb_id}/hybrid-search", {"query_text": query, "match_count": 5})
    assert response.status_code == 200, response.json_body
    return list(response.json_body["data"])


@pytest.fixture
def two_models(services: Services) -> Services:
    """Two offered embedding models of different spaces (deterministic test doubles)."""
    entries = {kind: dict(offered) for kind, offered in services.settings.models.catalog.entries.items()}
    entries["embedding"].update({"small": "hashing/32", "big": "hashing/48"})
    models = replace(services.settings.models, catalog=ModelCatalog(entries))
    services.settings = replace(services.settings, models=models)
    return services


def test_a_change_applies_to_new_documents_and_names_stay_unique(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    before = api.upload(kb["id"], "a.md", DOC).json_body["data"]
    runtime.drain(timeout=120)
    changed = _put(
        api, kb["id"], {"chunking_config": {"chunk_size": 200, "chunk_overlap": 0}, "description": "pilots"}
    )
    assert changed.status_code == 200, changed.json_body
    data = changed.json_body["data"]
    assert data["chunking_config"]["chunk_size"] == 200 and data["description"] == "pilots"
    assert data["chunking_config"]["strategy"] == kb["chunking_config"]["strategy"]  # merged, not replaced
    after = api.upload(kb["id"], "b.md", DOC + b"\nThe end.\n").json_body["data"]
    runtime.drain(timeout=120)
    assert api.knowledge(after["id"])["chunk_count"] > api.knowledge(before["id"])["chunk_count"]
    assert api.knowledge(before["id"])["attempt"] == 1  # `new`: existing documents are left alone
    other = api.create_kb()
    taken = _put(api, kb["id"], {"name": other["name"]})
    assert taken.status_code == 409 and taken.json_body["error"]["code"] == "duplicate_kb_name"
    bad = _put(api, kb["id"], {"summary_model_id": "openai/x@http://169.254.169.254/"})
    assert bad.status_code == 400 and bad.json_body["error"]["code"] == "unknown_model"
    assert api.get(f"/knowledge-bases/{kb['id']}").json_body["data"]["summary_model_id"] == ""


def test_apply_to_reparse_parses_every_document_again_with_the_new_settings(
    api: Api, runtime: LocalRuntime
) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "a.md", DOC).json_body["data"]
    runtime.drain(timeout=120)
    chunks = api.knowledge(created["id"])["chunk_count"]
    response = _put(
        api, kb["id"], {"chunking_config": {"chunk_size": 200, "chunk_overlap": 0}, "apply_to": "reparse"}
    )
    assert response.status_code == 202, response.json_body
    runtime.drain(timeout=180)
    task = api.get(f"/tasks/{response.json_body['data']['task_id']}").json_body["data"]
    assert task["status"] == "completed" and task["kind"] == "reparse_kb"
    row = api.knowledge(created["id"])
    assert row["attempt"] == 2 and row["parse_status"] == "completed" and row["chunk_count"] > chunks


def test_a_new_embedding_model_is_built_beside_the_old_one_and_switched_to(
    api: Api, runtime: LocalRuntime, two_models: Services
) -> None:
    services = two_models
    kb = api.create_kb(embedding_model_id="small")
    docs = [
        api.upload(kb["id"], f"{n}.md", DOC + f"\nCopy {n}.\n".encode()).json_body["data"] for n in range(2)
    ]
    runtime.drain(timeout=120)
    engine = services.engine()
    old_space = IndexSpace.of(services.embedding_model("small"))
    new_space = IndexSpace.of(services.embedding_model("big"))
    entries = {d["id"]: engine.count(old_space, kb["id"], d["id"]) for d in docs}
    assert all(entries.values())
    refused = _put(api, kb["id"], {"embedding_model_id": "big"})
    assert refused.status_code == 409 and refused.json_body["error"]["code"] == "reembed_required"
    started = _put(api, kb["id"], {"embedding_model_id": "big", "reembed": True})
    assert started.status_code == 202, started.json_body
    task_id = started.json_body["data"]["task_id"]
    assert started.json_body["data"]["embedding_model_id"] == "small"  # search stays on the old index
    assert _search(api, kb["id"], "harbour pilot breakwater")
    again = _put(api, kb["id"], {"embedding_model_id": "big", "reembed": True})
    assert again.status_code == 409 and again.json_body["error"]["code"] == "reembed_running"
    services.queue.send_raw("lifecycle", {"task_id": task_id})  # the task message, delivered twice
    runtime.drain(timeout=180)
    task = api.get(f"/tasks/{task_id}").json_body["data"]
    assert task["status"] == "completed", task
    switched = api.get(f"/knowledge-bases/{kb['id']}").json_body["data"]
    assert switched["embedding_model_id"] == "big" and switched["reembed_to"] == {}
    assert {d["id"]: engine.count(new_space, kb["id"], d["id"]) for d in docs} == entries  # no duplicates
    assert all(engine.count(old_space, kb["id"], d["id"]) == 0 for d in docs)  # the old index is gone
    hits = _search(api, kb["id"], "harbour pilot breakwater")
    assert hits and {h["knowledge_id"] for h in hits} <= {d["id"] for d in docs}
    later = api.upload(kb["id"], "later.md", DOC + b"\nLater.\n").json_body["data"]
    runtime.drain(timeout=120)
    assert engine.count(new_space, kb["id"], later["id"]) > 0  # new documents use the new model


def test_every_index_off_is_refused(api: Api) -> None:
    """Issue 24, defect 9."""
    off = {"vector_enabled": False, "keyword_enabled": False, "wiki_enabled": False, "graph_enabled": False}
    created = api.post("/knowledge-bases", {"name": "blind", "indexing_strategy": off})
    assert created.status_code == 400 and created.json_body["error"]["code"] == "no_index_enabled"
    kb = api.create_kb()
    put = _put(api, kb["id"], {"indexing_strategy": {"vector_enabled": False, "keyword_enabled": False}})
    assert put.status_code == 400 and put.json_body["error"]["code"] == "no_index_enabled"
    keyword_only = _put(api, kb["id"], {"indexing_strategy": {"vector_enabled": False}})
    assert keyword_only.status_code == 200
    assert keyword_only.json_body["data"]["indexing_strategy"]["keyword_enabled"] is True


def test_a_change_is_checked_as_at_creation_and_a_refused_one_changes_nothing(api: Api) -> None:
    kb = api.create_kb()
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"enrichment": {"auto_tag_enabled": True}}, 400, "setting_cannot_be_honoured"),  # no chat model
        ({"enrichment": {"caption_language": "English"}}, 400, "setting_cannot_be_honoured"),  # no vision
        ({"indexing_strategy": {"graph_enabled": True}}, 400, "setting_cannot_be_honoured"),
        ({"asr_model_id": "openai/x@http://127.0.0.1:9/v1"}, 400, "unknown_model"),
        ({"apply_to": "everything"}, 400, "invalid_apply_to"),
        ({"chunking_config": {"chunk_size": -5}}, 400, "invalid_chunking_config"),
        ({"embedding_model_id": "no-such-model", "reembed": True}, 400, "unknown_model"),
        (
            {"embedding_model_id": "no-such-model", "reembed": True, "apply_to": "reparse"},
            400,
            "unknown_model",
        ),
    ]
    for body, status, code in cases:
        response = _put(api, kb["id"], body)
        assert (response.status_code, response.json_body["error"]["code"]) == (status, code), body
    unchanged = api.get(f"/knowledge-bases/{kb['id']}").json_body["data"]
    assert (
        unchanged["enrichment"] == kb["enrichment"]
        and unchanged["indexing_strategy"] == kb["indexing_strategy"]
    )
    missing = _put(api, "00000000-0000-0000-0000-000000000000", {"description": "x"})
    assert missing.status_code == 404
    tagged = _put(
        api,
        kb["id"],
        {"summary_model_id": "local/extractive", "enrichment": {"max_tags": 5, "question_count": 4}},
    )
    assert tagged.status_code == 200, tagged.json_body
    data = tagged.json_body["data"]
    assert (
        data["enrichment"]["max_tags"] == 5
        and data["enrichment"]["question_count"] == 4
        and data["summary_model_id"] == "local/extractive"
    )
    assert data["enrichment"]["auto_tag_skip_if_tagged"] is True  # merged over what was there


def test_a_reembed_cannot_come_with_a_reparse(api: Api, two_models: Services) -> None:
    kb = api.create_kb(embedding_model_id="small")
    both = _put(api, kb["id"], {"embedding_model_id": "big", "reembed": True, "apply_to": "reparse"})
    assert both.status_code == 400 and both.json_body["error"]["code"] == "reembed_with_reparse"
    assert api.get(f"/knowledge-bases/{kb['id']}").json_body["data"]["reembed_to"] == {}


def test_search_stays_on_the_old_model_until_the_new_index_is_whole(
    api: Api, runtime: LocalRuntime, two_models: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.stages import lifecycle

    services = two_models
    kb = api.create_kb(embedding_model_id="small")
    docs = [
        api.upload(kb["id"], f"{n}.md", DOC + f"\nCopy {n}.\n".encode()).json_body["data"] for n in range(3)
    ]
    runtime.drain(timeout=120)
    engine = services.engine()
    old_space = IndexSpace.of(services.embedding_model("small"))
    new_space = IndexSpace.of(services.embedding_model("big"))
    entries = [engine.count(old_space, kb["id"], d["id"]) for d in docs]
    monkeypatch.setattr(lifecycle, "SLICE_SECONDS", 0.0)  # one document per delivery
    started = _put(api, kb["id"], {"embedding_model_id": "big", "reembed": True})
    assert started.status_code == 202, started.json_body
    runtime.poller("lifecycle_task").poll_once(wait_time_seconds=0)
    built = [engine.count(new_space, kb["id"], d["id"]) for d in docs]
    assert sorted(built)[:2] == [0, 0] and max(built) > 0  # one document in the new index so far
    assert api.get(f"/knowledge-bases/{kb['id']}").json_body["data"]["embedding_model_id"] == "small"
    assert [engine.count(old_space, kb["id"], d["id"]) for d in docs] == entries
    assert len({h["knowledge_id"] for h in _search(api, kb["id"], "harbour pilot breakwater")}) == 3
    runtime.inject_duplicates(True)  # every message from here on is delivered twice
    runtime.drain(timeout=180)
    runtime.inject_duplicates(None)
    task = api.get(f"/tasks/{started.json_body['data']['task_id']}").json_body["data"]
    assert task["status"] == "completed", task
    assert [engine.count(new_space, kb["id"], d["id"]) for d in docs] == entries  # no duplicates
    assert [engine.count(old_space, kb["id"], d["id"]) for d in docs] == [0, 0, 0]
    assert len({h["knowledge_id"] for h in _search(api, kb["id"], "harbour pilot breakwater")}) == 3
