"""A copy of a chunking or embedding message that runs alongside another (SQS standard queues deliver a message
twice, sometimes at once) and writes after the other copy indexed the attempt and handed it over: from then on
a person may switch the document off, switch a chunk off or edit its text, and enrichment adds chunks; the late
copy's stale writes must not undo any of it (nor queue the embedding again)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import (
    ChunkingSettings,
    CreateKnowledgeBase,
    EditChunkRequest,
    EditKnowledgeRequest,
    SearchRequest,
)
from chalicelib.domain.ids import chunk_id
from chalicelib.domain.types import (
    Chunk,
    ChunkType,
    EnableStatus,
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    Tenant,
)
from chalicelib.operations.chunks import edit_chunk
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.knowledge_changes import edit
from chalicelib.operations.search import hybrid_search
from chalicelib.ports import IndexEntry, IndexSpace
from chalicelib.services.indexing import write_extra_chunks
from chalicelib.stages import chunking, embedding
from chalicelib.stages.messages import StageMessageModel

from .conftest import drain, upload
from .faq_support import CountingEmbedding


def _ledger(entries: int) -> bytes:
    return (
        "# Ledger\n\n"
        + "\n\n".join(
            f"## Entry {i}\n\nCargo {i} was weighed at dock {i % 7} and signed for by clerk {i % 13}."
            for i in range(entries)
        )
    ).encode()


def _ledger_kb(deps: Services, tenant: Tenant) -> KnowledgeBase:
    settings = ChunkingSettings(chunk_size=110, chunk_overlap=0)
    return create_kb(deps, tenant.id, CreateKnowledgeBase(name="ledger", chunking_config=settings))


def _message(deps: Services, queue: str) -> Any:
    (body,) = deps.queue.bodies(queue)  # type: ignore[attr-defined]
    return StageMessageModel.model_validate(body).to_domain()


def _texts(deps: Services, knowledge: Knowledge) -> list[Chunk]:
    chunks = (c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.TEXT)
    return sorted(chunks, key=lambda c: c.seq)


def _entries(deps: Services, kb: KnowledgeBase, knowledge: Knowledge) -> dict[str, IndexEntry]:
    space = IndexSpace.of(deps.embedding_model(kb.embedding_model_id))
    return {e.chunk_id: e for e in deps.engine(kb.retrieval_engine).entries_of(space, kb.id, knowledge.id)}


def _found(deps: Services, tenant: Tenant, kb: KnowledgeBase, query: str) -> list[str]:
    hits = hybrid_search(deps, tenant.id, kb.id, SearchRequest(query_text=query, match_count=20))
    return [h["chunk_id"] for h in hits]


def _completes(deps: Services, knowledge: Knowledge) -> None:
    """Nothing planned: the plan completes the document (a person may edit its chunks from then on)."""
    assert deps.knowledge.settle_plan(
        knowledge.id, knowledge.attempt, 0, {"planned": [], "not_planned": {}}, summary_pending=False
    )
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.parse_status == ParseStatus.COMPLETED


def _first_embed_runs(model: CountingEmbedding, before: Callable[[], None]) -> None:
    """`before` runs when the copy under test asks for its first vectors (the other copy's calls go through)."""
    real = model.embed
    fired: list[bool] = []

    def embed(texts: Any) -> Any:
        if not fired:
            fired.append(True)
            before()
        return real(texts)

    model.embed = embed  # type: ignore[method-assign]


def test_a_late_window_does_not_switch_a_disabled_document_back_on(
    deps: Services, tenant: Tenant, model: CountingEmbedding
) -> None:
    kb = _ledger_kb(deps, tenant)
    knowledge = upload(deps, kb, "ledger.md", _ledger(150))
    drain(deps, ("docreader", "chunking"))
    message = _message(deps, "embedding")

    def other_copy_then_disable() -> None:
        embedding.run(deps, message)  # the other copy runs the whole stage while this one embeds
        assert deps.knowledge.settle_plan(
            knowledge.id,
            knowledge.attempt,
            1,
            {"planned": ["summary"], "not_planned": {}},
            summary_pending=True,
        )
        edit(deps, tenant.id, knowledge.id, EditKnowledgeRequest(enable_status="disabled"))

    _first_embed_runs(model, other_copy_then_disable)
    embedding.run(deps, message)

    row = deps.knowledge.get(knowledge.id)
    assert row is not None
    assert row.parse_status == ParseStatus.FINALIZING and row.enable_status == EnableStatus.DISABLED
    entries = _entries(deps, kb, knowledge)
    assert entries and not [e for e in entries.values() if e.is_enabled]


def test_a_late_window_keeps_a_chunk_switched_off_and_an_edited_text(
    deps: Services, tenant: Tenant, model: CountingEmbedding
) -> None:
    kb = _ledger_kb(deps, tenant)
    knowledge = upload(deps, kb, "ledger.md", _ledger(150))
    drain(deps, ("docreader", "chunking"))
    message = _message(deps, "embedding")
    texts = _texts(deps, knowledge)
    off = next(c for c in texts if "Cargo 120 " in c.content)
    edited = next(c for c in texts if "Cargo 130 " in c.content)

    def other_copy_then_edits() -> None:
        embedding.run(deps, message)
        _completes(deps, knowledge)
        edit_chunk(deps, tenant.id, knowledge.id, off.id, EditChunkRequest(is_enabled=False))
        edit_chunk(
            deps, tenant.id, knowledge.id, edited.id, EditChunkRequest(content="Zanzibar harbourmaster.")
        )

    _first_embed_runs(model, other_copy_then_edits)
    embedding.run(deps, message)

    entries = _entries(deps, kb, knowledge)
    assert not entries[off.id].is_enabled
    assert "Zanzibar" in entries[edited.id].content
    assert off.id not in _found(deps, tenant, kb, "Cargo 120 weighed")
    assert edited.id in _found(deps, tenant, kb, "Zanzibar harbourmaster")


def test_a_duplicate_slice_during_the_hand_over_keeps_a_chunk_switched_off(
    deps: Services, tenant: Tenant, model: CountingEmbedding
) -> None:
    deps.settings = replace(deps.settings, embed_fanout_texts=16, embed_fanout_parallel=2, embed_batch_size=8)
    kb = _ledger_kb(deps, tenant)
    knowledge = upload(deps, kb, "ledger.md", _ledger(60))
    drain(deps, ("docreader", "chunking"))
    embedding.run(deps, _message(deps, "embedding"))  # the planner queues the slices
    slice0 = next(b for b in deps.queue.bodies("embedding") if b.get("slice_index") == 0)  # type: ignore[attr-defined]
    copy = StageMessageModel.model_validate(slice0).to_domain()
    off = _texts(deps, knowledge)[2]

    def every_slice_then_switch() -> None:
        drain(deps, ("embedding",))  # every slice (slice 0's other copy too); the last one hands over
        _completes(deps, knowledge)
        edit_chunk(deps, tenant.id, knowledge.id, off.id, EditChunkRequest(is_enabled=False))

    _first_embed_runs(model, every_slice_then_switch)
    embedding.run(deps, copy)  # slice 0's copy, which read the row while slices were pending

    assert not _entries(deps, kb, knowledge)[off.id].is_enabled
    assert off.id not in _found(deps, tenant, kb, off.content)


def test_a_hand_over_between_the_last_check_and_the_write_is_written_over_as_the_chunks_are_now(
    deps: Services, tenant: Tenant, model: CountingEmbedding, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other copy hands over in the milliseconds between this copy's last read of the row and its index
    write: the stale write lands, and is written over from the chunks as they are then."""
    kb = _ledger_kb(deps, tenant)
    knowledge = upload(deps, kb, "ledger.md", _ledger(150))
    drain(deps, ("docreader", "chunking"))
    message = _message(deps, "embedding")
    texts = _texts(deps, knowledge)
    off, edited = texts[3], texts[5]  # both in the first window
    engine = deps.engine(kb.retrieval_engine)
    real = engine.batch_index
    fired: list[bool] = []

    def batch_index(space: IndexSpace, entries: Any) -> Any:
        if not fired:
            fired.append(True)
            embedding.run(deps, message)
            _completes(deps, knowledge)
            edit_chunk(deps, tenant.id, knowledge.id, off.id, EditChunkRequest(is_enabled=False))
            edit_chunk(
                deps, tenant.id, knowledge.id, edited.id, EditChunkRequest(content="Zanzibar corrected.")
            )
        return real(space, entries)

    monkeypatch.setattr(engine, "batch_index", batch_index)
    embedding.run(deps, message)

    entries = _entries(deps, kb, knowledge)
    assert not entries[off.id].is_enabled
    assert entries[edited.id].content.endswith("Zanzibar corrected.")
    assert off.id not in _found(deps, tenant, kb, off.content)
    assert edited.id in _found(deps, tenant, kb, "Zanzibar corrected")


def test_a_late_chunking_copy_keeps_enrichment_chunks_and_chunk_edits(
    deps: Services, tenant: Tenant, model: CountingEmbedding, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = _ledger_kb(deps, tenant)
    knowledge = upload(deps, kb, "ledger.md", _ledger(20))
    drain(deps, ("docreader",))
    message = _message(deps, "chunking")
    summary_id = f"{knowledge.id}-a{knowledge.attempt}-summary"
    state: dict[str, str] = {}
    real_build = chunking.build_chunks

    def build(*args: Any) -> Any:
        built = real_build(*args)
        if not state:  # this copy has chunked; the other copy's chain runs to the end first
            state["fired"] = "yes"
            chunking.run(deps, message)
            drain(deps, ("embedding",))
            _completes(deps, knowledge)
            row = deps.knowledge.get(knowledge.id)
            assert row is not None
            summary = Chunk(
                id=summary_id,
                tenant_id=row.tenant_id,
                kb_id=row.kb_id,
                knowledge_id=row.id,
                seq=999_999,
                content="A ledger of cargo weighed at the docks.",
                chunk_type=ChunkType.SUMMARY,
                metadata={"attempt": row.attempt},
            )
            assert write_extra_chunks(deps, row, kb, [summary])
            texts = _texts(deps, row)
            state["off"], state["edited"] = texts[3].id, texts[5].id
            edit_chunk(deps, tenant.id, row.id, texts[3].id, EditChunkRequest(is_enabled=False))
            edit_chunk(deps, tenant.id, row.id, texts[5].id, EditChunkRequest(content="Zanzibar corrected."))
        return built

    monkeypatch.setattr(chunking, "build_chunks", build)
    chunking.run(deps, message)

    stored = {c.id: c for c in deps.chunks.list(knowledge.id)}
    assert summary_id in stored
    assert stored[state["off"]].is_enabled is False
    assert stored[state["edited"]].content == "Zanzibar corrected."
    assert not deps.queue.waiting("embedding")  # type: ignore[attr-defined]


def test_chunking_again_removes_its_own_earlier_chunks_and_no_chunk_enrichment_added(
    deps: Services, tenant: Tenant, model: CountingEmbedding
) -> None:
    """A try of the attempt's chunking that made other chunks (a changed setting, say): the chunker's ids it
    does not make again go, text and parent; the ids enrichment gives its chunks stay."""
    kb = _ledger_kb(deps, tenant)
    knowledge = upload(deps, kb, "ledger.md", _ledger(20))
    drain(deps, ("docreader", "chunking"))
    made = deps.chunks.list(knowledge.id)
    base = made[0]
    kid, attempt = knowledge.id, knowledge.attempt

    def extra(cid: str, chunk_type: ChunkType) -> Chunk:
        return replace(base, id=cid, chunk_type=chunk_type, seq=0, content="x")

    earlier = [
        extra(chunk_id(kid, attempt, 900), ChunkType.TEXT),
        extra(chunk_id(kid, attempt, 123_456), ChunkType.TEXT),
        extra(chunk_id(kid, attempt, 7, parent=True), ChunkType.PARENT_TEXT),
    ]
    enrichment = [
        extra(f"{kid}-a{attempt}-summary", ChunkType.SUMMARY),
        extra(f"{kid}-a{attempt}-table001", ChunkType.TEXT),
        extra(f"{kid}-a{attempt}-ocr0001", ChunkType.IMAGE_OCR),
        extra(f"{kid}-a{attempt}-cap0001", ChunkType.IMAGE_CAPTION),
        extra(f"{kid}-a{attempt}-wiki01", ChunkType.TEXT),
    ]
    other_attempt = [extra(chunk_id(kid, attempt + 1, 900), ChunkType.TEXT)]
    deps.chunks.put_many(earlier + enrichment + other_attempt)

    chunking.write_chunks(deps, knowledge, made)

    ids = {c.id for c in deps.chunks.list(knowledge.id)}
    assert ids == {c.id for c in made + enrichment + other_attempt}
