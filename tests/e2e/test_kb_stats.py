"""Issue 25: a knowledge base at a glance, GET /knowledge-bases/{id}/stats: its documents by state, their
chunks and bytes, its cost, and the document waiting longest with its queue."""

from __future__ import annotations

from chalicelib.local.runtime import LocalRuntime

from .conftest import Api

TEXT = b"# Harbour\n\n" + b"The pilot boards the ship at the breakwater before the tide turns.\n\n" * 30


def test_stats_count_the_documents_by_state_while_they_wait_and_once_done(
    api: Api, runtime: LocalRuntime
) -> None:
    kb = api.create_kb()
    empty = api.get(f"/knowledge-bases/{kb['id']}/stats")
    assert empty.status_code == 200, empty.json_body
    assert empty.json_body["data"]["documents"] == 0 and empty.json_body["data"]["oldest_waiting"] is None

    ids = [
        api.upload(kb["id"], f"pilot-{n}.md", TEXT + f"\n\nberth {n}\n".encode()).json_body["data"]["id"]
        for n in range(3)
    ]
    draft = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/manual", {"content": "# draft", "status": "draft"}
    )
    assert draft.status_code == 200, draft.json_body
    waiting = api.get(f"/knowledge-bases/{kb['id']}/stats").json_body["data"]
    assert waiting["documents"] == 4
    assert waiting["parse_status"] == {"draft": 1, "pending": 3}
    oldest = waiting["oldest_waiting"]
    assert oldest["knowledge_id"] == ids[0] and oldest["queue"] == "docreader"
    assert oldest["file_name"] == "pilot-0.md" and oldest["waited_seconds"] >= 0

    runtime.drain(timeout=180)
    done = api.get(f"/knowledge-bases/{kb['id']}/stats").json_body["data"]
    assert done["parse_status"] == {"completed": 3, "draft": 1}
    assert done["enable_status"]["enabled"] == 3
    assert done["oldest_waiting"] is None
    rows = [api.knowledge(i) for i in [*ids, draft.json_body["data"]["id"]]]
    assert done["chunks"] == sum(r["chunk_count"] for r in rows) > 0
    assert done["bytes"] == sum(r["file_size"] for r in rows) > 0
    assert done["cost"]["currency"] == "USD" and done["cost"]["aws_dollars"] > 0


def test_stats_of_another_tenants_knowledge_base_are_a_404(api: Api, other_api: Api) -> None:
    kb = api.create_kb()
    hidden = other_api.get(f"/knowledge-bases/{kb['id']}/stats")
    assert (hidden.status_code, hidden.json_body["error"]["code"]) == (404, "kb_not_found")
