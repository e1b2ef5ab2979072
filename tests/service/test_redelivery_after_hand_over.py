"""Messages delivered again after the embedding handed the attempt over to the state machine (the row stays
`processing` while enrichment runs), and an attempt superseded by a reparse while it embedded (found by an
audit): nothing enrichment added may be lost, no stale entry may stay, and the new attempt keeps its place
at the tenant's door."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from chalicelib.adapters.memory import MemoryTaskQueue, MemoryWorkflow
from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, ReparseRequest
from chalicelib.domain.ids import execution_name
from chalicelib.domain.types import (
    Chunk,
    ChunkType,
    EnableStatus,
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    Tenant,
)
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.services.indexing import write_extra_chunks
from chalicelib.stages import chunking, embedding
from chalicelib.tasks.reparse import reparse

from .conftest import chunked, deliver, drain, failed_ids, index_count, upload

LEDGER = "# Ledger\n\n" + "\n\n".join(
    f"## Entry {i}\n\nCargo {i} was weighed at dock {i % 7} and signed for by clerk {i % 13}."
    for i in range(400)
)


class EmbeddingWithAHook(HashingEmbedding):
    """Runs `before_next` once, inside the next embedding call (a reparse landing mid-window)."""

    def __init__(self) -> None:
        super().__init__(64)
        self.before_next: Callable[[], None] | None = None

    def embed(self, texts: Sequence[str]) -> Any:
        if self.before_next is not None:
            hook, self.before_next = self.before_next, None
            hook()
        return super().embed(texts)


def ledger(
    deps: Services, tenant: Tenant, *, slice_texts: int = 10_000, paragraphs: int = 400
) -> tuple[KnowledgeBase, Knowledge]:
    kb = create_kb(
        deps,
        tenant.id,
        CreateKnowledgeBase(name="ledger", chunking_config={"chunk_size": 110, "chunk_overlap": 0}),
    )
    deps.settings = replace(
        deps.settings, embed_slice_max_texts=slice_texts, embed_batch_size=16, embed_fanout_texts=100_000
    )
    text = "# Ledger\n\n" + "\n\n".join(LEDGER.split("\n\n")[1 : paragraphs + 1])
    return kb, chunked(deps, kb, "ledger.md", text)


def ocr_chunk(row: Knowledge, kb: KnowledgeBase) -> Chunk:
    """What the state machine's multimodal step adds to an indexed document."""
    return Chunk(
        id=f"{row.id}-a{row.attempt}-ocr0000",
        tenant_id=row.tenant_id,
        kb_id=kb.id,
        knowledge_id=row.id,
        seq=100_000,
        content="lighthouse chart OCR text",
        chunk_type=ChunkType.IMAGE_OCR,
        metadata={"attempt": row.attempt},
    )


def test_an_embedding_message_again_after_the_hand_over_keeps_what_enrichment_added(
    deps: Services, tenant: Tenant, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    deps.replace_embedding_model(HashingEmbedding(64))
    kb, created = ledger(deps, tenant)
    first = queue.receive("embedding")  # kept: SQS may deliver it again
    assert embedding.handle(deps, first, None)["batchItemFailures"] == []
    texts = index_count(deps, kb, created.id)
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.PROCESSING
    assert write_extra_chunks(deps, row, kb, [ocr_chunk(row, kb)])
    deps.knowledge.update_fields(
        created.id, {"enable_status": EnableStatus.DISABLED}
    )  # switched off meanwhile

    assert embedding.handle(deps, first, None)["batchItemFailures"] == []
    assert index_count(deps, kb, created.id) == texts + 1  # the OCR entry stays
    after = deps.knowledge.get(created.id)
    assert after is not None and after.enable_status.value == "disabled"  # not switched back on
    assert len(workflow.start_calls) == 1  # its execution runs: not started again


def test_a_late_duplicate_start_loses_no_entry(
    deps: Services, tenant: Tenant, queue: MemoryTaskQueue
) -> None:
    """The first message comes again when its chain is five parts of seven in: the duplicate's start must
    not delete what the chain wrote, as its own continuation is dropped once the chain has handed over,
    before it could write those texts again."""
    deps.replace_embedding_model(HashingEmbedding(64))
    kb, created = ledger(deps, tenant, slice_texts=32)
    first = queue.receive("embedding")
    embedding.handle(deps, first, None)  # texts 0-31, its continuation queued
    while index_count(deps, kb, created.id) < 160:  # the chain goes on, one part at a time
        part = queue.receive("embedding", max_messages=1)
        queue.settle(part, embedding.handle(deps, part, None))
    embedding.handle(deps, first, None)  # the duplicate: texts 0-31 again, its own continuation queued
    drain(deps, ["embedding"])  # the chain hands over two parts later; the duplicate's rest is dropped
    row = deps.knowledge.get(created.id)
    assert row is not None and row.processed_at is not None
    texts = sum(1 for c in deps.chunks.list(created.id) if c.chunk_type == ChunkType.TEXT)
    assert 192 < texts <= 224 and index_count(deps, kb, created.id) == texts


def test_a_chunking_message_again_after_the_hand_over_changes_nothing(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    created = upload(deps, kb)
    deliver(deps, "docreader")
    event = queue.receive("chunking")
    assert chunking.handle(deps, event, None)["batchItemFailures"] == []
    deliver(deps, "embedding")
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.PROCESSING
    ocr = ocr_chunk(row, kb)
    assert write_extra_chunks(deps, row, kb, [ocr])
    entries = index_count(deps, kb, created.id)

    assert chunking.handle(deps, event, None)["batchItemFailures"] == []
    assert ocr.id in {c.id for c in deps.chunks.list(created.id)}
    assert not queue.waiting("embedding")  # not queued once more
    drain(deps)
    assert index_count(deps, kb, created.id) == entries and len(workflow.start_calls) == 1


def test_a_window_of_an_attempt_superseded_meanwhile_is_taken_back(
    deps: Services, tenant: Tenant, queue: MemoryTaskQueue
) -> None:
    """A reparse lands while attempt 1 embeds a window, and attempt 2 indexes before that window is
    written: the window's entries (attempt 1's chunk ids) would stay in the index for good."""
    model = EmbeddingWithAHook()
    deps.replace_embedding_model(model)
    kb, created = ledger(deps, tenant, paragraphs=100)
    stale = queue.receive("embedding")

    def reparse_meanwhile() -> None:
        reparse(deps, tenant.id, created.id, ReparseRequest())
        deliver(deps, "docreader")
        deliver(deps, "chunking")
        deliver(deps, "embedding")

    model.before_next = reparse_meanwhile
    assert embedding.handle(deps, stale, None)["batchItemFailures"] == []
    row = deps.knowledge.get(created.id)
    assert row is not None and row.attempt == 2
    texts = sum(1 for c in deps.chunks.list(created.id) if c.chunk_type == ChunkType.TEXT)
    assert index_count(deps, kb, created.id) == texts


def test_an_attempt_superseded_meanwhile_leaves_the_new_attempt_its_place(
    deps: Services, tenant: Tenant, queue: MemoryTaskQueue
) -> None:
    model = EmbeddingWithAHook()
    deps.replace_embedding_model(model)
    _, created = ledger(deps, tenant, paragraphs=100)
    stale = queue.receive("embedding")

    def holders() -> set[str]:
        return {p.knowledge_id for p in deps.tenants.pipeline_door(tenant.id).live(0)}

    def reparse_meanwhile() -> None:
        reparse(deps, tenant.id, created.id, ReparseRequest())
        deliver(deps, "docreader")  # attempt 2 is in the pipeline, in the document's place
        assert created.id in holders()

    model.before_next = reparse_meanwhile
    embedding.handle(deps, stale, None)  # attempt 1 stops: superseded
    row = deps.knowledge.get(created.id)
    assert row is not None and row.attempt == 2 and row.parse_status == ParseStatus.PROCESSING
    assert created.id in holders()


def test_a_hand_over_that_died_before_the_state_machine_started_is_finished_by_the_retry(
    deps: Services, tenant: Tenant, queue: MemoryTaskQueue, workflow: MemoryWorkflow, monkeypatch: Any
) -> None:
    deps.replace_embedding_model(HashingEmbedding(64))
    _, created = ledger(deps, tenant, paragraphs=20)
    started = workflow.start

    def dies(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("the Lambda died here")

    monkeypatch.setattr(workflow, "start", dies)
    event = queue.receive("embedding")
    # the batch's one record failed: SQS brings it back
    assert failed_ids(embedding.handle(deps, event, None)) == [event["Records"][0]["messageId"]]
    row = deps.knowledge.get(created.id)
    assert row is not None and row.processed_at is not None and workflow.start_calls == []
    monkeypatch.setattr(workflow, "start", started)
    assert embedding.handle(deps, event, None)["batchItemFailures"] == []
    assert workflow.start_calls == [execution_name(created.id, 1)]
