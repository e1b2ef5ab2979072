"""One big document must not hold the embedding stage for everyone.

Regression (issue 9): a 3.6 MB spreadsheet became 31,617 chunks and tied the embedding worker up for over
25 minutes while every other tenant's documents sat in `processing` (a canary timed out at 300 s). The
embedding stage now works on one document for at most one slice (time and text count), then hands the
rest to a fresh message at the back of the queue, so other documents are served between slices."""

from __future__ import annotations

from dataclasses import replace

from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api


def _big_document(paragraphs: int) -> bytes:
    body = "\n\n".join(
        f"Paragraph {i} of the long manual describes valve {i} and its pressure limits in detail. " * 4
        for i in range(paragraphs)
    )
    return f"# Long manual\n\n{body}\n".encode()


def test_a_canary_completes_while_a_big_document_is_embedding(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    services.settings = replace(services.settings, embed_slice_max_texts=64, embed_batch_size=16)
    services.replace_embedding_model(HashingEmbedding(64))
    kb = api.create_kb()
    big = api.upload(kb["id"], "manual.md", _big_document(900)).json_body["data"]

    def embedding_started(knowledge_id: str) -> bool:
        trace = api.get(f"/knowledge/{knowledge_id}/spans").json_body["data"]["trace"]
        return any(s["span_id"] == "embedding" and s["status"] == "running" for s in trace)

    for _ in range(50):
        runtime.poll_once()
        if embedding_started(big["id"]):
            break
    assert embedding_started(big["id"])

    canary = api.upload(kb["id"], "canary.md", b"# Canary\n\nA short note about the canary.").json_body[
        "data"
    ]
    for _ in range(200):
        runtime.poll_once()
        if api.knowledge(canary["id"])["parse_status"] == "completed":
            break
    assert api.knowledge(canary["id"])["parse_status"] == "completed"
    still_big = api.knowledge(big["id"])
    assert still_big["parse_status"] == "processing" and still_big["enable_status"] == "disabled"

    runtime.drain(timeout=300)
    done = api.knowledge(big["id"])
    assert done["parse_status"] == "completed" and done["chunk_count"] > 5 * 64
    outputs = next(
        s
        for s in api.get(f"/knowledge/{big['id']}/spans").json_body["data"]["trace"]
        if s["span_id"] == "embedding"
    )["outputs"]
    assert outputs["entries_indexed"] == outputs["texts_total"] == done["chunk_count"]
    assert outputs["texts_embedded"] == done["chunk_count"]  # counted across slices, none embedded twice
    hits = api.post(f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "valve 850 pressure limits"})
    assert any(h["knowledge_id"] == big["id"] for h in hits.json_body["data"])


def test_one_upload_cannot_make_unbounded_work(api: Api, runtime: LocalRuntime) -> None:
    """A tiny chunk size on a normal document would make tens of thousands of chunks (and embedding calls):
    the upload fails with a reason a user can act on, before any embedding."""
    kb = api.create_kb()
    text = "".join(f"Tide {i} rises.\n" for i in range(5000)).encode()
    config = '{"chunking": {"chunk_size": 1, "chunk_overlap": 0}}'
    created = api.upload(kb["id"], "tides.txt", text, {"process_config": config}).json_body["data"]
    runtime.drain(timeout=120)
    row = api.knowledge(created["id"])
    assert row["parse_status"] == "failed" and row["error_code"] == "chunking_failed"
    assert "use a larger chunk_size" in row["error_message"]
