"""Issue 10 through the public path: delete (one, a batch, a knowledge base), cancel, edit, enable/disable,
publish, batch reparse and retry-failed, each a durable task where it is long, scoped to the tenant."""

from __future__ import annotations

from typing import Any

import boto3

from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api, hold_in_finalizing
from .stored import stored_keys

DOC = b"# Sourdough\n\nA sourdough starter is flour and water fermented by wild yeast.\n\n![crumb](data:image/png;base64,{png})\n"
TIDES = b"# Tides\n\nSpring tides happen at full and new moon, when the sun and moon pull together.\n"


def _png() -> bytes:
    import base64
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (96, 96), (200, 120, 40)).save(buffer, "PNG")
    return base64.b64encode(buffer.getvalue())


def _search(api: Api, kb_id: str, query: str) -> list[dict[str, Any]]:
    response = api.post(f"/knowledge-bases/{kb_id}/hybrid-search", {"query_text": query, "match_count": 20})
    assert response.status_code == 200, response.json_body
    return list(response.json_body["data"])


def _task(api: Api, task_id: str) -> dict[str, Any]:
    response = api.get(f"/tasks/{task_id}")
    assert response.status_code == 200, response.json_body
    return dict(response.json_body["data"])


def test_upload_delete_search_has_nothing_storage_is_empty_and_the_file_uploads_again(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = api.create_kb()
    body = DOC.replace(b"{png}", _png())
    created = api.upload(kb["id"], "bread.md", body).json_body["data"]
    runtime.drain(timeout=120)
    assert any(h["knowledge_id"] == created["id"] for h in _search(api, kb["id"], "sourdough starter yeast"))
    stored = services.knowledge.get(created["id"])
    assert stored is not None and stored.storage_size > 0
    used_before = services.tenants.get(created["tenant_id"]).storage_used  # type: ignore[union-attr]
    assert used_before >= stored.storage_size
    tenant_prefix = f"{created['tenant_id']}/"
    before = stored_keys(services.files, tenant_prefix)
    assert services.files.key_of(stored.file_path) in before  # the listing sees what the delete must remove
    assert f"{created['tenant_id']}/{created['id']}/parsed/attempt-1.md" in before
    assert any(key.startswith(f"{tenant_prefix}exports/") for key in before)  # the extracted image

    deleted = api.client.http.delete(f"/api/v1/knowledge/{created['id']}", headers={"X-API-Key": api.api_key})
    assert deleted.status_code == 202 and deleted.json_body["message"] == "Delete task submitted"
    assert api.get(f"/knowledge/{created['id']}").json_body["data"]["parse_status"] == "deleting"
    runtime.drain(timeout=120)

    task = _task(api, deleted.json_body["data"]["task_id"])
    assert task["status"] == "completed" and (task["total"], task["done"], task["succeeded"]) == (1, 1, 1)
    assert api.get(f"/knowledge/{created['id']}").status_code == 404
    assert _search(api, kb["id"], "sourdough starter yeast") == []
    assert services.chunks.list(created["id"]) == [] and services.spans.list(created["id"], 1) == []
    assert stored_keys(services.files, tenant_prefix) == []  # source, Markdown, manifest and images
    tenant = services.tenants.get(created["tenant_id"])
    assert tenant is not None and tenant.storage_used == used_before - stored.storage_size
    again = api.upload(kb["id"], "bread.md", body)
    assert again.status_code == 200, again.json_body  # the dedupe claim was released: not a 409


def test_an_object_that_cannot_be_deleted_keeps_the_row_deleting_until_a_retry_removes_everything(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """A deleted document leaves nothing behind unrecorded: while its image cannot be deleted the row stays
    `deleting` and the task comes back; once the store answers, the row and every object go."""
    from unittest.mock import patch

    from botocore.exceptions import EndpointConnectionError

    from chalicelib.adapters.storage import S3FileStore

    kb = api.create_kb()
    created = api.upload(kb["id"], "bread.md", DOC.replace(b"{png}", _png())).json_body["data"]
    runtime.drain(timeout=120)
    tenant_prefix = f"{created['tenant_id']}/"
    assert any(
        key.startswith(f"{tenant_prefix}exports/") for key in stored_keys(services.files, tenant_prefix)
    )
    real_delete, refused = S3FileStore.delete, []

    def flaky_delete(store: S3FileStore, url: str) -> None:
        if "/exports/" in url and len(refused) < 2:  # the image's store does not answer, twice
            refused.append(url)
            raise EndpointConnectionError(endpoint_url="http://s3.invalid")
        real_delete(store, url)

    with patch.object(S3FileStore, "delete", flaky_delete):
        deleted = api.client.http.delete(
            f"/api/v1/knowledge/{created['id']}", headers={"X-API-Key": api.api_key}
        )
        assert deleted.status_code == 202
        runtime.drain(timeout=120)
    assert len(refused) == 2  # tried, came back, tried again
    assert api.get(f"/knowledge/{created['id']}").status_code == 404
    assert stored_keys(services.files, tenant_prefix) == []  # the image too
    task = _task(api, deleted.json_body["data"]["task_id"])
    assert task["status"] == "completed" and task["succeeded"] == 1


def test_a_delete_during_embedding_leaves_nothing_behind_and_nothing_resurrects(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """A late embedding slice that writes after the delete removed the entries must undo its write."""
    from dataclasses import replace

    services.settings = replace(services.settings, embed_slice_max_texts=64)
    services.replace_embedding_model(HashingEmbedding(64))
    kb = api.create_kb()
    text = "\n\n".join(f"Paragraph {i} about harbour cranes and their load limits. " * 3 for i in range(400))
    created = api.upload(kb["id"], "cranes.md", f"# Cranes\n\n{text}".encode()).json_body["data"]
    for _ in range(60):  # until the embedding stage has indexed its first slice
        runtime.poll_once()
        trace = api.get(f"/knowledge/{created['id']}/spans").json_body["data"]["trace"]
        if any(s["span_id"] == "embedding" and s["status"] == "running" for s in trace):
            break
    space_count = services.engine().count
    from chalicelib.ports import IndexSpace

    space = IndexSpace.of(services.embedding_model(""))
    assert space_count(space, kb["id"], created["id"]) > 0  # some entries are in the index already
    api.client.http.delete(f"/api/v1/knowledge/{created['id']}", headers={"X-API-Key": api.api_key})
    runtime.drain(timeout=180)
    assert space_count(space, kb["id"], created["id"]) == 0
    assert services.chunks.list(created["id"]) == []
    assert api.get(f"/knowledge/{created['id']}").status_code == 404
    assert _search(api, kb["id"], "harbour cranes load limits") == []


def test_deleting_a_knowledge_base_of_20_documents(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = api.create_kb()
    ids = [
        api.upload(
            kb["id"], f"note-{i}.md", f"# Note {i}\n\nlighthouse keeper log entry {i}".encode()
        ).json_body["data"]["id"]
        for i in range(20)
    ]
    runtime.drain(timeout=300)
    response = api.client.http.delete(
        f"/api/v1/knowledge-bases/{kb['id']}", headers={"X-API-Key": api.api_key}
    )
    assert response.status_code == 202
    assert api.get(f"/knowledge-bases/{kb['id']}").json_body["error"]["code"] == "kb_deleting"
    runtime.drain(timeout=300)
    task = _task(api, response.json_body["data"]["task_id"])
    assert task["status"] == "completed" and task["done"] == task["succeeded"] == 20
    assert api.get(f"/knowledge-bases/{kb['id']}").status_code == 404
    assert all(services.knowledge.get(i) is None for i in ids)
    assert all(services.chunks.list(i) == [] for i in ids)


def test_batch_delete_checks_every_id_and_another_tenant_gets_404(
    api: Api, other_api: Api, runtime: LocalRuntime
) -> None:
    kb = api.create_kb()
    a = api.upload(kb["id"], "a.md", b"# A\n\nalpha").json_body["data"]
    b = api.upload(kb["id"], "b.md", b"# B\n\nbravo").json_body["data"]
    runtime.drain(timeout=120)
    foreign = other_api.post("/knowledge/batch-delete", {"kb_id": kb["id"], "ids": [a["id"]]})
    assert foreign.status_code == 404
    assert (
        other_api.client.http.delete(
            f"/api/v1/knowledge/{a['id']}", headers={"X-API-Key": other_api.api_key}
        ).status_code
        == 404
    )
    unknown = api.post("/knowledge/batch-delete", {"kb_id": kb["id"], "ids": [a["id"], "nope"]})
    assert unknown.status_code == 404 and api.knowledge(a["id"])["parse_status"] == "completed"
    too_many = api.post("/knowledge/batch-delete", {"kb_id": kb["id"], "ids": [f"x{i}" for i in range(201)]})
    assert too_many.status_code == 400 and too_many.json_body["error"]["code"] == "invalid_ids"
    response = api.post("/knowledge/batch-delete", {"kb_id": kb["id"], "ids": [a["id"], b["id"]]})
    assert response.status_code == 202
    runtime.drain(timeout=120)
    assert _task(api, response.json_body["data"]["task_id"])["succeeded"] == 2
    assert other_api.get(f"/tasks/{response.json_body['data']['task_id']}").status_code == 404


def test_cancel_during_parsing_keeps_it_cancelled_and_reparse_starts_a_new_attempt(
    api: Api, runtime: LocalRuntime
) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "tides.md", TIDES).json_body["data"]
    runtime.poll_once()  # the docreader has run; chunking is queued
    cancelled = api.post(f"/knowledge/{created['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json_body["data"]["parse_status"] == "cancelled"
    assert api.post(f"/knowledge/{created['id']}/cancel").status_code == 200  # idempotent
    runtime.drain(timeout=120)
    row = api.knowledge(created["id"])
    assert row["parse_status"] == "cancelled" and row["pending_subtasks_count"] == 0
    spans = api.get(f"/knowledge/{created['id']}/spans").json_body["data"]
    assert spans["root"]["status"] == "cancelled"
    assert all(s["status"] != "running" for s in spans["trace"])
    again = api.post(f"/knowledge/{created['id']}/reparse")
    assert again.status_code == 200 and again.json_body["data"]["attempt"] == 2
    runtime.drain(timeout=120)
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    assert api.post(f"/knowledge/{created['id']}/cancel").json_body["error"]["code"] == "invalid_state"


def test_cancel_during_enrichment_zeroes_the_count_and_stops_the_execution(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = api.create_kb(summary_model_id="local/extractive")
    created = api.upload(kb["id"], "tides.md", TIDES * 20).json_body["data"]
    hold_in_finalizing(api, runtime, created["id"])
    cancelled = api.post(f"/knowledge/{created['id']}/cancel").json_body["data"]
    assert cancelled["parse_status"] == "cancelled" and cancelled["pending_subtasks_count"] == 0
    runtime.drain(timeout=120)
    row = api.knowledge(created["id"])
    assert row["parse_status"] == "cancelled" and row["pending_subtasks_count"] == 0
    sfn = boto3.client("stepfunctions")
    arn = services.workflow.state_machine_arn  # type: ignore[attr-defined]
    executions = sfn.list_executions(stateMachineArn=arn)["executions"]
    mine = [e for e in executions if e["name"].startswith(created["id"])]
    assert mine and all(e["status"] != "RUNNING" for e in mine)
    assert any(h["knowledge_id"] == created["id"] for h in _search(api, kb["id"], "spring tides full moon"))


def test_disable_hides_from_search_and_enable_brings_it_back_without_embedding(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    model = HashingEmbedding(64)
    services.replace_embedding_model(model)
    kb = api.create_kb()
    created = api.upload(kb["id"], "tides.md", TIDES).json_body["data"]
    runtime.drain(timeout=120)
    calls = len(model.calls)
    assert _search(api, kb["id"], "spring tides full moon")
    off = api.client.http.put(
        f"/api/v1/knowledge/{created['id']}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body='{"enable_status": "disabled", "title": "Tides (archived)", "metadata": {"shelf": "B"}}',
    )
    assert off.status_code == 200 and off.json_body["data"]["enable_status"] == "disabled"
    assert off.json_body["data"]["title"] == "Tides (archived)"
    assert _search(api, kb["id"], "spring tides full moon") == []
    on = api.client.http.put(
        f"/api/v1/knowledge/{created['id']}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body='{"enable_status": "enabled"}',
    )
    assert on.status_code == 200
    assert [h["knowledge_id"] for h in _search(api, kb["id"], "spring tides full moon")][:1] == [
        created["id"]
    ]
    # one query embedding (the same query again comes from the embedding cache): no chunk was embedded again
    assert len(model.calls) == calls + 1


def test_edit_a_draft_then_publish_it_and_edit_the_published_text(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    draft = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/manual",
        {"title": "Kiln", "content": "# Kiln\n\nfirst", "status": "draft"},
    ).json_body["data"]
    assert draft["parse_status"] == "draft"
    headers = {"X-API-Key": api.api_key, "Content-Type": "application/json"}
    edited = api.client.http.put(
        f"/api/v1/knowledge/{draft['id']}",
        headers=headers,
        body='{"content": "# Kiln\\n\\nbisque firing at 950 C"}',
    )
    assert edited.status_code == 200 and edited.json_body["data"]["parse_status"] == "draft"
    runtime.drain(timeout=30)
    assert api.knowledge(draft["id"])["parse_status"] == "draft"  # a draft is not ingested
    published = api.post(f"/knowledge/{draft['id']}/publish")
    assert published.status_code == 200 and published.json_body["data"]["parse_status"] == "pending"
    runtime.drain(timeout=120)
    assert api.knowledge(draft["id"])["parse_status"] == "completed"
    assert any(h["knowledge_id"] == draft["id"] for h in _search(api, kb["id"], "bisque firing"))
    again = api.client.http.put(
        f"/api/v1/knowledge/{draft['id']}",
        headers=headers,
        body='{"content": "# Kiln\\n\\nglaze firing at 1240 C"}',
    )
    assert again.status_code == 200 and again.json_body["data"]["attempt"] == 2
    runtime.drain(timeout=120)
    hits = _search(api, kb["id"], "glaze firing 1240")
    assert hits and hits[0]["knowledge_id"] == draft["id"] and "1240" in hits[0]["content"]
    assert not any("950" in h["content"] for h in hits)
    assert api.post(f"/knowledge/{draft['id']}/publish").json_body["error"]["code"] == "invalid_state"
    not_manual = api.upload(kb["id"], "t.md", TIDES).json_body["data"]
    bad = api.client.http.put(
        f"/api/v1/knowledge/{not_manual['id']}", headers=headers, body='{"content": "x"}'
    )
    assert bad.status_code == 400 and bad.json_body["error"]["code"] == "not_manual"


def test_batch_reparse_of_three_failed_rows_and_retry_failed(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    from chalicelib.ports import ReadRequest, ReadResult

    class FlakyReader:
        def __init__(self, inner: Any) -> None:
            self.inner, self.broken = inner, True

        def read(self, request: ReadRequest) -> ReadResult:
            if self.broken:
                from chalicelib.domain.errors import PermanentStageError

                raise PermanentStageError("the parser is misconfigured")
            return self.inner.read(request)  # type: ignore[no-any-return]

        def engines(self) -> list[dict[str, Any]]:
            return list(self.inner.engines())

    reader = FlakyReader(services.docreader())
    services.replace_docreader(reader)
    kb = api.create_kb()
    ids = [
        api.upload(kb["id"], f"f{i}.md", f"# F{i}\n\nferry timetable {i}".encode()).json_body["data"]["id"]
        for i in range(5)
    ]
    runtime.drain(timeout=120)
    assert all(api.knowledge(i)["parse_status"] == "failed" for i in ids)
    reader.broken = False
    batch = api.post("/knowledge/batch-reparse", {"kb_id": kb["id"], "ids": ids[:3]})
    assert batch.status_code == 202
    runtime.drain(timeout=120)
    assert _task(api, batch.json_body["data"]["task_id"])["succeeded"] == 3
    assert [api.knowledge(i)["parse_status"] for i in ids] == ["completed"] * 3 + ["failed"] * 2
    retry = api.post(f"/knowledge-bases/{kb['id']}/retry-failed")
    assert retry.status_code == 202
    runtime.drain(timeout=120)
    task = _task(api, retry.json_body["data"]["task_id"])
    assert task["status"] == "completed" and task["succeeded"] == 2
    assert all(api.knowledge(i)["parse_status"] == "completed" for i in ids)


def test_a_reparse_removes_the_previous_attempts_parsed_markdown(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "tides.md", TIDES).json_body["data"]
    runtime.drain(timeout=120)
    parsed = f"{created['tenant_id']}/{created['id']}/parsed/"
    assert stored_keys(services.files, parsed) == [f"{parsed}attempt-1.images.json", f"{parsed}attempt-1.md"]
    api.post(f"/knowledge/{created['id']}/reparse")
    runtime.drain(timeout=120)
    assert stored_keys(services.files, parsed) == [f"{parsed}attempt-2.images.json", f"{parsed}attempt-2.md"]


def test_housekeeping_drives_again_a_delete_whose_task_was_lost(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """Accepted work is never lost: a row left `deleting` (its task message gone) is deleted by a new task."""
    from datetime import UTC, datetime, timedelta

    from chalicelib.domain.clock import to_iso

    kb = api.create_kb()
    created = api.upload(kb["id"], "tides.md", TIDES).json_body["data"]
    runtime.drain(timeout=120)
    assert services.knowledge.mark_deleting(created["id"]) is not None  # ... and no task was queued
    m = services.knowledge.model  # type: ignore[attr-defined]
    m(created["id"]).update(actions=[m.updated_at.set(to_iso(datetime.now(UTC) - timedelta(hours=3)))])
    fired = runtime.tick(datetime.now(UTC) + timedelta(minutes=6))
    assert fired[0].error is None
    runtime.drain(timeout=120)
    assert api.get(f"/knowledge/{created['id']}").status_code == 404
    assert _search(api, kb["id"], "spring tides full moon") == []


def test_a_big_documents_switch_is_answered_at_once_and_its_entries_follow_in_a_task(
    api: Api, runtime: LocalRuntime, services: Services, monkeypatch: Any
) -> None:
    from chalicelib.operations import knowledge_changes
    from chalicelib.ports import IndexSpace

    kb = api.create_kb()
    created = api.upload(kb["id"], "tides.md", TIDES).json_body["data"]
    runtime.drain(timeout=120)
    monkeypatch.setattr(knowledge_changes, "INLINE_CHUNKS", 0)  # every document counts as big
    engine: Any = services.engine()
    space = IndexSpace.of(services.embedding_model())

    def entries() -> dict[str, bool]:
        return {e.chunk_id: e.is_enabled for e in engine.entries_of(space, kb["id"], created["id"])}

    # a chunk kept out of search on its own (a summary that repeats a short body) stays out
    own = {chunk.id: chunk.is_enabled for chunk in services.chunks.list(created["id"])}
    assert entries() == own and True in own.values()

    off = api.client.http.put(
        f"/api/v1/knowledge/{created['id']}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body='{"enable_status": "disabled"}',
    )
    assert off.status_code == 200 and off.json_body["data"]["enable_status"] == "disabled"
    # search follows the row at once, whether or not the task (on the lifecycle queue) has run yet
    assert _search(api, kb["id"], "spring tides full moon") == []
    runtime.drain(timeout=120)
    assert set(entries().values()) == {False}
    on = api.client.http.put(
        f"/api/v1/knowledge/{created['id']}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body='{"enable_status": "enabled"}',
    )
    assert on.status_code == 200
    runtime.drain(timeout=120)
    assert entries() == own
    assert [h["knowledge_id"] for h in _search(api, kb["id"], "spring tides full moon")][:1] == [
        created["id"]
    ]
