"""A clone racing a change to the source document (audit a5): a chunk edited or switched, or the document
switched, after the copy read the source's chunks and before it copied their index entries. The copy's chunks
and its entries must say the same thing (the copy is made again from the source as it stands), and a source
that never stops changing fails its item instead of being copied forever."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.commands import EditChunkRequest, EditKnowledgeRequest
from chalicelib.domain.types import (
    Chunk,
    ChunkType,
    EnableStatus,
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    TaskStatus,
    Tenant,
)
from chalicelib.operations.chunks import edit_chunk

from .test_move_clone import TIDES, clone, completed, model, run_lifecycle, search, space  # noqa: F401

ZEBRAS = "Zebras gallop across savannah grassland."


def _text_chunk(deps: Services, knowledge_id: str) -> Chunk:
    return next(c for c in deps.chunks.list(knowledge_id) if c.chunk_type == ChunkType.TEXT)


def _between_chunks_and_entries(
    deps: Services, monkeypatch: pytest.MonkeyPatch, source: Knowledge, change: Callable[[], None]
) -> list[int]:
    """Runs `change` when a copy of `source` writes its chunk rows (read before), before it copies the
    entries; returns the list the calls are counted in."""
    real = deps.chunks.replace_all
    calls: list[int] = []

    def copy_writes_chunks(knowledge_id: str, chunks: Sequence[Chunk]) -> None:
        if knowledge_id != source.id:
            calls.append(1)
            change()
        real(knowledge_id, chunks)

    monkeypatch.setattr(deps.chunks, "replace_all", copy_writes_chunks)
    return calls


def _the_copy(deps: Services, started: dict[str, Any]) -> tuple[KnowledgeBase, Knowledge]:
    task = deps.tasks.get(started["task_id"])
    assert task is not None
    assert task.status == TaskStatus.COMPLETED and task.succeeded == 1, task.errors
    target = deps.kbs.get(started["target_kb_id"])
    assert target is not None
    [copy] = deps.knowledge.page_by_kb(target.id, limit=10)
    assert copy.parse_status == ParseStatus.COMPLETED
    return target, copy


def test_a_chunk_edited_mid_clone_leaves_the_copy_with_the_edited_text_in_chunks_and_entries(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    doc = completed(deps, kb, "tides.md", TIDES)
    chunk = _text_chunk(deps, doc.id)

    def edit() -> None:
        monkeypatch.undo()  # once
        edit_chunk(deps, tenant.id, doc.id, chunk.id, EditChunkRequest(content=ZEBRAS))

    calls = _between_chunks_and_entries(deps, monkeypatch, doc, edit)
    started = clone(deps, kb)
    run_lifecycle(deps)
    assert calls == [1]
    target, copy = _the_copy(deps, started)
    copied = _text_chunk(deps, copy.id)
    entries = {e.chunk_id: e for e in deps.engine().entries_of(space(deps), target.id, copy.id)}
    assert ZEBRAS in copied.content and ZEBRAS in entries[copied.id].content
    assert [h["knowledge_id"] for h in search(deps, target, "zebras gallop savannah")][:1] == [copy.id]
    assert [h["content"] for h in search(deps, target, "zebras gallop savannah")][:1] == [copied.content]


def test_a_chunk_switched_off_mid_clone_is_off_in_the_copy_and_its_entries(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    doc = completed(deps, kb, "tides.md", TIDES)
    chunk = _text_chunk(deps, doc.id)

    def switch_off() -> None:
        monkeypatch.undo()
        edit_chunk(deps, tenant.id, doc.id, chunk.id, EditChunkRequest(is_enabled=False))

    _between_chunks_and_entries(deps, monkeypatch, doc, switch_off)
    started = clone(deps, kb)
    run_lifecycle(deps)
    target, copy = _the_copy(deps, started)
    copied = _text_chunk(deps, copy.id)
    entries = {e.chunk_id: e for e in deps.engine().entries_of(space(deps), target.id, copy.id)}
    assert copied.is_enabled is False and entries[copied.id].is_enabled is False


def test_a_document_switched_off_mid_clone_is_off_in_the_copy_and_its_entries(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.operations.knowledge_changes import edit

    doc = completed(deps, kb, "tides.md", TIDES)

    def switch_off() -> None:
        monkeypatch.undo()
        edit(deps, tenant.id, doc.id, EditKnowledgeRequest(enable_status="disabled"))

    _between_chunks_and_entries(deps, monkeypatch, doc, switch_off)
    started = clone(deps, kb)
    run_lifecycle(deps)
    target, copy = _the_copy(deps, started)
    entries = deps.engine().entries_of(space(deps), target.id, copy.id)
    assert copy.enable_status == EnableStatus.DISABLED
    assert entries and not any(e.is_enabled for e in entries)
    assert search(deps, target, "spring tides full moon") == []


def test_a_source_edited_under_every_copy_fails_its_item_instead_of_copying_forever(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.tasks.clone import MAX_SOURCE_CHANGES, SOURCE_KEPT_CHANGING

    doc = completed(deps, kb, "tides.md", TIDES)
    chunk = _text_chunk(deps, doc.id)
    edits: list[int] = []

    def edit_again() -> None:
        edits.append(1)
        edit_chunk(
            deps, tenant.id, doc.id, chunk.id, EditChunkRequest(content=f"{ZEBRAS} Edit {len(edits)}.")
        )

    calls = _between_chunks_and_entries(deps, monkeypatch, doc, edit_again)
    started = clone(deps, kb)
    run_lifecycle(deps)
    assert len(calls) == MAX_SOURCE_CHANGES
    task = deps.tasks.get(started["task_id"])
    assert task is not None
    assert task.status == TaskStatus.FAILED and task.failed == 1
    assert task.errors == {f"copy:{doc.id}": SOURCE_KEPT_CHANGING}
    assert deps.knowledge.page_by_kb(started["target_kb_id"], limit=10) == []
    assert deps.engine().count(space(deps), started["target_kb_id"]) == 0
