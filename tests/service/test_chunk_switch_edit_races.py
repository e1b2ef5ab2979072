"""A chunk's text edit and switches against each other and against its document's switch, and what search
shows of them (in-memory adapters).

- An edit writes the row only while it is the one it read (`ChunkRepo.put_unchanged`): a switch-off
  answered while a text edit embedded is kept (the edit is made again on top of it, its vectors reused);
  two text edits keep the last one answered in the row and the index alike.
- A document switched on while one of its chunks is switched off leaves that chunk's entry off (the switch
  reads the chunks again after its write); search takes the chunk row as the truth all the same, and a
  switch-off sent again puts an entry left on back off.
- Parent-child retrieval: once a child's text is edited or a child is switched off, its parent's text no
  longer stands for its children, and a child's hit shows the child's own text (never the switched-off or
  edited-away text).
- An edit whose try wrote the index and lost the row's put, and which then fails (403, 409 after its
  tries), puts the chunk's entries back as the row that won says (its text, its questions, its switch).
- An edit following a move whose try lost its put to the move's repoint keeps counting the growth its
  first try wrote (the move carried it): the document counts what is stored."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

import chalicelib.operations.chunks as chunks_module
from chalicelib.bootstrap import Services
from chalicelib.commands import (
    CreateKnowledgeBase,
    EditChunkRequest,
    EditKnowledgeRequest,
    SearchRequest,
    validate,
)
from chalicelib.domain.errors import AppError
from chalicelib.domain.ids import question_entry_id
from chalicelib.domain.types import Chunk, ChunkType, Knowledge, KnowledgeBase, ParseStatus, Tenant
from chalicelib.operations.chunks import edit_chunk
from chalicelib.operations.knowledge_changes import edit
from chalicelib.operations.search import hybrid_search
from chalicelib.ports import IndexEntry, IndexSpace
from chalicelib.tasks.move_clone import rekey

from .conftest import MAIN_STAGES, drain, upload
from .test_move_clone import TIDES, completed, model, move, new_kb, run_lifecycle  # noqa: F401

PARENTED = (
    b"# Vault\n\n"
    b"The harbour office opens at dawn and closes at dusk every weekday.\n\n"
    b"The vault door code is 4471 and it changes every spring.\n\n"
    b"Pilots meet ships past the breakwater when the tide turns.\n"
)


def _kb(deps: Services, tenant: Tenant, **chunking: Any) -> KnowledgeBase:
    from chalicelib.operations.knowledge_bases import create_kb

    return create_kb(deps, tenant.id, CreateKnowledgeBase(name="log", chunking_config=chunking))


@pytest.fixture
def small(deps: Services, tenant: Tenant) -> KnowledgeBase:
    """Small chunks: the handbook's fog-horn sentence is a chunk of its own."""
    return _kb(deps, tenant, chunk_size=110, chunk_overlap=0)


@pytest.fixture
def parented(deps: Services, tenant: Tenant) -> KnowledgeBase:
    return _kb(
        deps, tenant, enable_parent_child=True, parent_chunk_size=4096, child_chunk_size=80, chunk_overlap=0
    )


def _completed(deps: Services, kb: KnowledgeBase, data: bytes | None = None) -> Knowledge:
    created = upload(deps, kb) if data is None else upload(deps, kb, "vault.md", data)
    drain(deps, MAIN_STAGES)
    row = deps.knowledge.settle_plan(created.id, created.attempt, 0, {"planned": [], "not_planned": {}})
    assert row is not None and row.parse_status == ParseStatus.COMPLETED
    return row


def _fog(deps: Services, knowledge: Knowledge) -> Chunk:
    return next(c for c in deps.chunks.list(knowledge.id) if "horn" in c.content)


def _row(deps: Services, chunk: Chunk) -> Chunk:
    return deps.chunks.get_many([(chunk.knowledge_id, chunk.id)])[(chunk.knowledge_id, chunk.id)]


def _entries(deps: Services, kb: KnowledgeBase, knowledge: Knowledge) -> dict[str, IndexEntry]:
    space = IndexSpace.of(deps.embedding_model(kb.embedding_model_id))
    return {e.id: e for e in deps.engine(kb.retrieval_engine).entries_of(space, kb.id, knowledge.id)}


def _search(deps: Services, kb: KnowledgeBase, query: str) -> list[dict[str, Any]]:
    request = validate(SearchRequest, {"query_text": query, "match_count": 10, "retriever": "keyword"})
    return hybrid_search(deps, kb.tenant_id, kb.id, request)


def _edit(deps: Services, knowledge: Knowledge, chunk: Chunk, **body: Any) -> dict[str, Any]:
    return edit_chunk(deps, knowledge.tenant_id, knowledge.id, chunk.id, EditChunkRequest(**body))


def _while_embedding(monkeypatch: pytest.MonkeyPatch, meanwhile: Any) -> list[int]:
    """`meanwhile` runs once, while the next edit embeds its new text; the embeddings made are counted."""
    real = chunks_module.embed_for_api
    calls: list[int] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            meanwhile()
        return real(*args, **kwargs)

    monkeypatch.setattr(chunks_module, "embed_for_api", racing)
    return calls


# ---------------------------------------------------------------- a text edit and a switch at once


def test_a_switch_off_answered_while_a_text_edit_embeds_is_kept(
    deps: Services, small: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge = _completed(deps, small)
    fog = _fog(deps, knowledge)
    answers: list[dict[str, Any]] = []
    embeddings = _while_embedding(
        monkeypatch, lambda: answers.append(_edit(deps, knowledge, fog, is_enabled=False))
    )
    shown = _edit(deps, knowledge, fog, content="In fog the horn sounds three times a minute.")
    assert answers[0]["is_enabled"] is False
    row = _row(deps, fog)
    # both stand: the switch-off answered first, the text on top of it (embedded once)
    assert (row.is_enabled, row.content) == (False, "In fog the horn sounds three times a minute.")
    assert shown["is_enabled"] is False and len(embeddings) == 1
    entry = _entries(deps, small, knowledge)[fog.id]
    assert entry.is_enabled is False and entry.content.endswith("three times a minute.")
    assert fog.id not in [h["chunk_id"] for h in _search(deps, small, "horn fog")]


def test_two_text_edits_at_once_keep_the_last_answered_in_the_row_and_the_index(
    deps: Services, small: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge = _completed(deps, small)
    fog = _fog(deps, knowledge)
    _while_embedding(monkeypatch, lambda: _edit(deps, knowledge, fog, content="The horn was sold in May."))
    shown = _edit(deps, knowledge, fog, content="The horn sounds twice in fog.")
    assert shown["content"] == "The horn sounds twice in fog."
    assert _row(deps, fog).content == "The horn sounds twice in fog."
    assert _entries(deps, small, knowledge)[fog.id].content.endswith("The horn sounds twice in fog.")


# ---------------------------------------------------------------- a chunk's switch and its document's


def _enable_while_switching_off(deps: Services, knowledge: Knowledge, fog: Chunk) -> None:
    """The document is switched on; right after its switch listed the chunks, `fog` is switched off."""
    edit(deps, knowledge.tenant_id, knowledge.id, EditKnowledgeRequest(enable_status="disabled"))
    real_list = deps.chunks.list_page
    raced: list[bool] = []

    def listing(knowledge_id: str, **kwargs: Any) -> tuple[Sequence[Chunk], str | None]:
        listed = real_list(knowledge_id, **kwargs)
        if not raced:
            raced.append(True)
            _edit(deps, knowledge, fog, is_enabled=False)
        return listed

    deps.chunks.list_page = listing  # type: ignore[method-assign]
    try:
        edit(deps, knowledge.tenant_id, knowledge.id, EditKnowledgeRequest(enable_status="enabled"))
    finally:
        deps.chunks.list_page = real_list  # type: ignore[method-assign]
    assert raced


def test_a_chunk_switched_off_while_its_document_is_switched_on_stays_off(
    deps: Services, small: KnowledgeBase
) -> None:
    knowledge = _completed(deps, small)
    fog = _fog(deps, knowledge)
    _enable_while_switching_off(deps, knowledge, fog)
    assert _row(deps, fog).is_enabled is False
    assert _entries(deps, small, knowledge)[fog.id].is_enabled is False
    assert fog.id not in [h["chunk_id"] for h in _search(deps, small, "horn sounds fog")]


def test_search_takes_the_chunk_row_as_the_truth_and_a_switch_sent_again_repairs_the_entry(
    deps: Services, small: KnowledgeBase
) -> None:
    knowledge = _completed(deps, small)
    fog = _fog(deps, knowledge)
    _edit(deps, knowledge, fog, is_enabled=False)
    space = IndexSpace.of(deps.embedding_model(small.embedding_model_id))
    engine = deps.engine(small.retrieval_engine)
    engine.set_enabled(space, small.id, [fog.id], True)  # an entry a racing write left on
    assert fog.id not in [h["chunk_id"] for h in _search(deps, small, "horn sounds fog")]
    _edit(deps, knowledge, fog, is_enabled=False)  # sent again: nothing to change in the row
    assert _entries(deps, small, knowledge)[fog.id].is_enabled is False


# ---------------------------------------------------------------- parent-child retrieval


def _vault(deps: Services, knowledge: Knowledge) -> Chunk:
    vault = next(
        c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.TEXT and "4471" in c.content
    )
    assert vault.parent_chunk_id  # a child
    return vault


def test_a_switched_off_childs_text_is_not_shown_by_its_siblings_hits(
    deps: Services, parented: KnowledgeBase
) -> None:
    knowledge = _completed(deps, parented, PARENTED)
    vault = _vault(deps, knowledge)
    assert any(
        "4471" in h["content"] for h in _search(deps, parented, "pilots breakwater tide")
    )  # the parent
    _edit(deps, knowledge, vault, is_enabled=False)
    hits = _search(deps, parented, "pilots breakwater tide")
    assert hits and not any("4471" in h["content"] for h in hits)
    assert any("breakwater" in h["content"] for h in hits)
    _edit(deps, knowledge, vault, is_enabled=True)  # on again: its text is shown again (its own)
    assert any("4471" in h["content"] for h in _search(deps, parented, "vault door code"))


def test_an_edited_childs_hit_shows_its_new_text(deps: Services, parented: KnowledgeBase) -> None:
    knowledge = _completed(deps, parented, PARENTED)
    vault = _vault(deps, knowledge)
    _edit(deps, knowledge, vault, content="The vault door code is kept by the harbour master.")
    hits = _search(deps, parented, "vault door code")
    assert hits and hits[0]["chunk_id"] == vault.id
    assert hits[0]["content"] == "The vault door code is kept by the harbour master."
    assert not any("4471" in h["content"] for h in _search(deps, parented, "pilots breakwater tide"))


# ---------------------------------------------------------------- an edit that lost its row's put, then failed


def test_an_edit_refused_after_losing_its_put_leaves_the_index_as_the_row_that_won(
    deps: Services, tenant: Tenant, small: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge = _completed(deps, small)
    fog = _fog(deps, knowledge)
    used = deps.tenants.get(tenant.id).storage_used
    deps.tenants.set_quotas(tenant.id, storage_quota=used + 60, document_quota=0)
    longer = fog.content + " zebraword zebraword zebraword zebraword zebra"  # +46 bytes: within the quota
    other: list[dict[str, Any]] = []
    _while_embedding(monkeypatch, lambda: other.append(_edit(deps, knowledge, fog, content="tiny quokka")))
    with pytest.raises(AppError) as refused:  # made again on "tiny quokka": past the quota
        _edit(deps, knowledge, fog, content=longer)
    assert refused.value.code == "storage_quota_exceeded" and other[0]["content"] == "tiny quokka"
    assert _row(deps, fog).content == "tiny quokka"
    entry = _entries(deps, small, knowledge)[fog.id]
    assert entry.content.endswith("tiny quokka") and entry.is_enabled
    assert fog.id in [h["chunk_id"] for h in _search(deps, small, "quokka")]
    assert fog.id not in [h["chunk_id"] for h in _search(deps, small, "zebraword")]


def test_an_edit_out_of_tries_puts_back_the_switched_off_rows_text_and_questions(
    deps: Services, small: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge = _completed(deps, small)
    fog = _fog(deps, knowledge)
    question = "How often does the horn sound?"
    deps.chunks.set_metadata(
        knowledge.id, fog.id, "questions", [question], kb_id=small.id, attempt=knowledge.attempt
    )
    asked = question_entry_id(fog.id, 0)
    space = IndexSpace.of(deps.embedding_model(small.embedding_model_id))
    deps.engine(small.retrieval_engine).batch_index(
        space,
        [
            IndexEntry(
                asked, small.id, knowledge.id, fog.id, question, source_id=fog.id, source_type="question"
            )
        ],
    )
    fog = _row(deps, fog)
    monkeypatch.setattr(chunks_module, "EDIT_TRIES", 1)
    _while_embedding(monkeypatch, lambda: _edit(deps, knowledge, fog, is_enabled=False))
    with pytest.raises(AppError) as refused:
        _edit(deps, knowledge, fog, content="The horn was sold in May.")
    assert refused.value.code == "chunk_changed"
    row = _row(deps, fog)
    assert (row.is_enabled, row.content, row.metadata["questions"]) == (False, fog.content, [question])
    entries = _entries(deps, small, knowledge)
    assert fog.content.strip() in entries[fog.id].content and entries[fog.id].is_enabled is False
    assert asked in entries and entries[asked].content.endswith(question) and not entries[asked].is_enabled
    _edit(deps, knowledge, fog, is_enabled=True)
    assert fog.id in [h["chunk_id"] for h in _search(deps, small, "how often horn")]
    assert fog.id not in [h["chunk_id"] for h in _search(deps, small, "sold May")]


# ---------------------------------------------------------------- an edit following a move


def test_an_edit_following_a_move_whose_put_lost_to_the_repoint_keeps_its_growth_counted(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = new_kb(deps, tenant, "archive")
    doc = completed(deps, kb, "tides.md", TIDES)
    chunk = next(c for c in deps.chunks.list(doc.id) if c.chunk_type == ChunkType.TEXT)
    size, used = deps.knowledge.get(doc.id).storage_size, deps.tenants.get(tenant.id).storage_used
    edited = (
        "Zebras gallop across savannah grassland, far longer than the tide sentence ever was, many bytes."
    )
    growth = len(edited.encode()) - len(chunk.content.encode())
    real_kept = chunks_module.kept_after_write

    def moved_then_kept(*args: Any, **kwargs: Any) -> Any:  # the move lands after the edit's first put
        monkeypatch.setattr(chunks_module, "kept_after_write", real_kept)
        move(deps, kb, target, [doc.id], "reuse_vectors")
        assert deps.knowledge.move_to_kb(doc.id, kb.id, target.id, rekey(doc.dedupe_key, target.id))
        return real_kept(*args, **kwargs)

    monkeypatch.setattr(chunks_module, "kept_after_write", moved_then_kept)
    real_put = deps.chunks.put_unchanged
    puts: list[int] = []

    def put(before: Chunk, after: Chunk) -> bool:
        puts.append(1)
        if len(puts) == 2:  # the move's repoint reaches this row just before the following try's put
            deps.chunks.repoint(doc.id, target.id)
        return real_put(before, after)

    monkeypatch.setattr(deps.chunks, "put_unchanged", put)
    answered = _edit(deps, doc, chunk, content=edited)
    assert answered["content"] == edited and answered["kb_id"] == target.id and len(puts) == 3
    run_lifecycle(deps)  # the move finishes
    assert _row(deps, chunk).content == edited and deps.knowledge.get(doc.id).kb_id == target.id
    assert deps.knowledge.get(doc.id).storage_size == size + growth
    assert deps.tenants.get(tenant.id).storage_used == used + growth
