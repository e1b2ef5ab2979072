"""A chunk edit racing a move of its document, on the in-memory adapters. With reuse_vectors the move carries
the index entries it finds and repoints the chunk rows; the edit writes its entry and row in the knowledge
base it read. Wherever the move lands (while the edit embeds, right after its index write, after its row
write, or its row switched before and its carry after the edit), the edit follows the document and stands
(200): the chunk row and the document row name the same knowledge base, the entry there holds the row's
text, nothing of the chunk stays in the old one, and the graph refresh is queued for the edited text. A move
that reparses in the target supersedes the edit's attempt: 409 and nothing of the edit stays."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import chalicelib.operations.chunks as chunks_module
from chalicelib.bootstrap import Services
from chalicelib.commands import EditChunkRequest
from chalicelib.domain.errors import AppError
from chalicelib.domain.types import Chunk, Knowledge, KnowledgeBase, Tenant
from chalicelib.ports import IndexEntry
from chalicelib.stages import enrichment
from chalicelib.tasks.move_clone import rekey

from .conftest import MAIN_STAGES, drain
from .test_move_clone import TIDES, completed, model, move, new_kb, run_lifecycle, search, space  # noqa: F401

EDITED = "Zebras gallop across savannah grassland."


def _entries(deps: Services, kb: KnowledgeBase, knowledge_id: str) -> dict[str, IndexEntry]:
    return {e.id: e for e in deps.engine().entries_of(space(deps), kb.id, knowledge_id)}


def _text_chunk(deps: Services, doc: Knowledge) -> Chunk:
    return next(c for c in deps.chunks.list(doc.id) if c.chunk_type.value == "text")


def _edit(deps: Services, doc: Knowledge, chunk: Chunk) -> dict[str, Any]:
    request = EditChunkRequest(content=EDITED)
    return chunks_module.edit_chunk(deps, doc.tenant_id, doc.id, chunk.id, request)


def _once_at(
    monkeypatch: pytest.MonkeyPatch, name: str, meanwhile: Callable[[], None], *, after: bool
) -> None:
    """`meanwhile` runs once, when the edit calls `name` (before the call, or right after it)."""
    real = getattr(chunks_module, name)

    def racing(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(chunks_module, name, real)
        if not after:
            meanwhile()
        out = real(*args, **kwargs)
        if after:
            meanwhile()
        return out

    monkeypatch.setattr(chunks_module, name, racing)


#: where the whole move lands within the edit: (the edit's call, after it?)
LANDINGS = {
    "while_embedding": ("embed_for_api", False),  # after the edit read the row, before any write
    "after_index_write": ("write_entries", True),  # the move carries the edit's new entry
    "after_row_write": ("kept_after_write", False),  # the move carries the entry and repoints the new row
}


def _graph_messages(deps: Services) -> list[dict[str, Any]]:
    return [m for m in deps.queue.bodies("enrichment") if m["subtask"]["kind"] == enrichment.GRAPH_CHUNK]  # type: ignore[attr-defined]


def _assert_the_edit_followed(
    deps: Services, doc: Knowledge, chunk: Chunk, source: KnowledgeBase, target: KnowledgeBase
) -> None:
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == target.id
    stored = deps.chunks.get_many([(doc.id, chunk.id)])[(doc.id, chunk.id)]
    assert stored.content == EDITED
    assert all(c.kb_id == row.kb_id for c in deps.chunks.list(doc.id))  # the edited chunk's too
    entry = _entries(deps, target, doc.id)[chunk.id]
    assert entry.kb_id == target.id and entry.content.endswith(stored.content)
    assert _entries(deps, source, doc.id) == {}  # nothing of the document stays in the old one
    assert [
        h["content"] for h in search(deps, target, "zebras gallop savannah") if h["chunk_id"] == chunk.id
    ] == [EDITED]
    [message] = _graph_messages(deps)  # for the edited text, at the row's attempt
    assert (message["knowledge_id"], message["attempt"]) == (doc.id, row.attempt)
    assert (message["subtask"]["chunk_id"], message["subtask"]["content_hash"]) == (
        chunk.id,
        stored.content_hash,
    )


@pytest.mark.parametrize("landing", sorted(LANDINGS))
def test_an_edit_a_reuse_vectors_move_overtook_follows_the_document(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    landing: str,
) -> None:
    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    chunk = _text_chunk(deps, doc)

    def whole_move() -> None:
        move(deps, kb, target, [doc.id], "reuse_vectors")
        run_lifecycle(deps)

    name, after = LANDINGS[landing]
    _once_at(monkeypatch, name, whole_move, after=after)
    answered = _edit(deps, doc, chunk)
    assert answered["content"] == EDITED and answered["kb_id"] == target.id
    _assert_the_edit_followed(deps, doc, chunk, kb, target)


def test_an_edit_between_a_moves_row_switch_and_its_carry_follows_the_document(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    chunk = _text_chunk(deps, doc)

    def row_switched() -> None:  # the move's first write; its carry runs after the edit
        move(deps, kb, target, [doc.id], "reuse_vectors")
        assert deps.knowledge.move_to_kb(doc.id, kb.id, target.id, rekey(doc.dedupe_key, target.id))

    _once_at(monkeypatch, "embed_for_api", row_switched, after=False)
    assert _edit(deps, doc, chunk)["kb_id"] == target.id
    run_lifecycle(deps)  # the move finishes: it carries the rest, and finds the edited chunk there already
    _assert_the_edit_followed(deps, doc, chunk, kb, target)


@pytest.mark.parametrize("landing", sorted(LANDINGS))
def test_an_edit_a_reparsing_move_overtook_leaves_nothing(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    landing: str,
) -> None:
    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    chunk = _text_chunk(deps, doc)

    def whole_move() -> None:
        move(deps, kb, target, [doc.id], "reparse")
        run_lifecycle(deps)

    name, after = LANDINGS[landing]
    _once_at(monkeypatch, name, whole_move, after=after)
    with pytest.raises(AppError) as refused:
        _edit(deps, doc, chunk)
    assert (refused.value.status, refused.value.code) == (409, "knowledge_changed")
    assert _graph_messages(deps) == []  # the edit does not stand: no refresh for it
    drain(deps, MAIN_STAGES)  # the new attempt is processed in the target
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == target.id
    for where in (kb, target):
        assert not [e for e in _entries(deps, where, doc.id).values() if "Zebras" in e.content]
    assert not [c for c in deps.chunks.list(doc.id) if "Zebras" in c.content]
    assert all(c.kb_id == target.id for c in deps.chunks.list(doc.id))


def test_an_edit_between_a_reparsing_moves_row_switch_and_its_reparse_is_replaced_by_the_reparse(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    chunk = _text_chunk(deps, doc)

    def row_switched() -> None:  # the move's first write; its reparse runs after the edit
        move(deps, kb, target, [doc.id], "reparse")
        assert deps.knowledge.move_to_kb(doc.id, kb.id, target.id, rekey(doc.dedupe_key, target.id))

    _once_at(monkeypatch, "embed_for_api", row_switched, after=False)
    assert _edit(deps, doc, chunk)["kb_id"] == target.id  # made, at the attempt the move then reparses
    run_lifecycle(deps)
    drain(deps, MAIN_STAGES)
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == target.id and row.attempt > doc.attempt
    for where in (kb, target):
        assert not [e for e in _entries(deps, where, doc.id).values() if "Zebras" in e.content]
    assert not [c for c in deps.chunks.list(doc.id) if "Zebras" in c.content]
    assert all(c.kb_id == target.id for c in deps.chunks.list(doc.id))
