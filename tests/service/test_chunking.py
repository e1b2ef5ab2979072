"""The chunking stage on the fakes: deterministic chunk ids, idempotent under redelivery, per attempt."""

from __future__ import annotations

from chalicelib.adapters.memory import MemoryFileStore, MemoryKnowledgeRepo, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, ReparseRequest
from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.ids import chunk_id, content_hash
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.domain.types import ChunkType, KnowledgeBase, ParseStatus, Tenant
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.stages import chunking
from chalicelib.tasks.reparse import reparse

from .conftest import deliver, message, upload

LONG = "# Guide\n\n" + "\n\n".join(
    f"Paragraph {i} is about tides, moons and harbour lights." for i in range(40)
)


def small_chunks_kb(deps: Services, tenant: Tenant, **chunking_config: object) -> KnowledgeBase:
    config = {"chunk_size": 120, "chunk_overlap": 0, **chunking_config}
    return create_kb(deps, tenant.id, CreateKnowledgeBase(name="small", chunking_config=config))


def test_chunk_ids_are_deterministic_per_knowledge_attempt_and_sequence(
    deps: Services, tenant: Tenant, queue: MemoryTaskQueue
) -> None:
    kb = small_chunks_kb(deps, tenant)
    created = upload(deps, kb, "guide.md", LONG.encode())
    deliver(deps, "docreader")
    deliver(deps, "chunking")
    chunks = deps.chunks.list(created.id)
    assert len(chunks) > 5
    assert [c.id for c in chunks] == [chunk_id(created.id, 1, seq) for seq in range(len(chunks))]
    assert all(c.content_hash == content_hash(c.content) and c.metadata == {"attempt": 1} for c in chunks)
    assert all(len(c.content) <= 120 for c in chunks)
    assert [c.next_chunk_id for c in chunks[:-1]] == [c.id for c in chunks[1:]]
    assert [c.pre_chunk_id for c in chunks[1:]] == [c.id for c in chunks[:-1]]
    assert queue.bodies("embedding") == [message(created)]


def test_a_redelivered_chunking_message_does_not_duplicate_chunks(
    deps: Services, tenant: Tenant, queue: MemoryTaskQueue
) -> None:
    kb = small_chunks_kb(deps, tenant)
    created = upload(deps, kb, "guide.md", LONG.encode())
    deliver(deps, "docreader")
    event = queue.receive("chunking")
    chunking.handle(deps, event, None)
    first = deps.chunks.list(created.id)
    chunking.handle(deps, event, None)  # the same message again (at-least-once delivery)
    second = deps.chunks.list(created.id)
    assert [c.id for c in second] == [c.id for c in first]
    assert [c.content for c in second] == [c.content for c in first]


def test_a_rerun_that_splits_differently_leaves_no_stale_chunks(
    deps: Services, tenant: Tenant, queue: MemoryTaskQueue
) -> None:
    """The write replaces the knowledge's chunks: a redelivery after the settings changed keeps only the
    chunks of the run that won, never a mix of both."""
    kb = small_chunks_kb(deps, tenant)
    created = upload(deps, kb, "guide.md", LONG.encode())
    deliver(deps, "docreader")
    event = queue.receive("chunking")
    chunking.handle(deps, event, None)
    first = len(deps.chunks.list(created.id))
    kb.chunking_config.chunk_size = 400
    deps.kbs.put(kb)
    chunking.handle(deps, event, None)
    second = deps.chunks.list(created.id)
    assert 0 < len(second) < first
    assert [c.id for c in second] == [chunk_id(created.id, 1, seq) for seq in range(len(second))]


def test_a_reparse_with_other_settings_replaces_the_chunks_of_the_old_attempt(
    deps: Services, tenant: Tenant, files: MemoryFileStore
) -> None:
    kb = small_chunks_kb(deps, tenant)
    created = upload(deps, kb, "guide.md", LONG.encode())
    deliver(deps, "docreader")
    deliver(deps, "chunking")
    before = len(deps.chunks.list(created.id))
    reparse(deps, kb.tenant_id, created.id, ReparseRequest(process_config={"chunking": {"chunk_size": 400}}))
    deliver(deps, "docreader")
    deliver(deps, "chunking")
    after = deps.chunks.list(created.id)
    assert 0 < len(after) < before
    assert {c.metadata["attempt"] for c in after} == {2} and after[0].id == chunk_id(created.id, 2, 0)


def test_parent_child_chunking_links_children_to_stored_parents(deps: Services, tenant: Tenant) -> None:
    kb = small_chunks_kb(deps, tenant, enable_parent_child=True, parent_chunk_size=400, child_chunk_size=100)
    created = upload(deps, kb, "guide.md", LONG.encode())
    deliver(deps, "docreader")
    deliver(deps, "chunking")
    chunks = deps.chunks.list(created.id)
    parents = [c for c in chunks if c.chunk_type == ChunkType.PARENT_TEXT]
    children = [c for c in chunks if c.chunk_type == ChunkType.TEXT]
    assert parents and len(children) > len(parents)
    assert chunks[: len(parents)] == parents  # parents list first
    assert {c.parent_chunk_id for c in children} == {p.id for p in parents}
    assert all(p.id == chunk_id(created.id, 1, p.seq, parent=True) for p in parents)


def test_a_superseded_chunking_message_is_dropped(
    deps: Services, tenant: Tenant, queue: MemoryTaskQueue
) -> None:
    kb = small_chunks_kb(deps, tenant)
    created = upload(deps, kb, "guide.md", LONG.encode())
    deliver(deps, "docreader")
    reparse(deps, kb.tenant_id, created.id, ReparseRequest())
    response = deliver(deps, "chunking")  # attempt 1's message arrives after the reparse
    assert response["batchItemFailures"] == []
    assert deps.chunks.list(created.id) == [] and queue.waiting("embedding") == []


def test_markdown_that_yields_no_chunks_fails_permanently(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, rows: MemoryKnowledgeRepo
) -> None:
    created = upload(deps, kb)
    deliver(deps, "docreader")
    files.save(parsed_markdown_key(kb.tenant_id, created.id, 1), b"  \n\n ")
    deliver(deps, "chunking")
    failed = rows.get(created.id)
    assert failed is not None and failed.parse_status == ParseStatus.FAILED
    assert failed.error_code == SpanErrorCode.CHUNKING_FAILED
