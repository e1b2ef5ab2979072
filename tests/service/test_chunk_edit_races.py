"""A chunk edit against what happens to its document meanwhile, on the in-memory adapters: a delete or a
reparse that lands while the edit embeds its new text takes back what the edit wrote (404 / 409, nothing
of the document or of the old attempt comes back); a disable that lands then leaves the entry off; an
index that refuses the new text answers 503 `index_refused` without the engine's words; and a document
being deleted is gone from the chunk routes and its download links at once."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import chalicelib.operations.chunks as chunks_module
import chalicelib.operations.file_links as file_links
from chalicelib.bootstrap import Services
from chalicelib.commands import ChunkListQuery, EditChunkRequest, EditKnowledgeRequest, FileUrlQuery
from chalicelib.domain.errors import AppError
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus
from chalicelib.ports import IndexEntry, IndexSpace, IndexWriteError

from .conftest import MAIN_STAGES, drain, upload


def _completed(deps: Services, kb: KnowledgeBase) -> Knowledge:
    created = upload(deps, kb)
    drain(deps, MAIN_STAGES)
    row = deps.knowledge.settle_plan(created.id, created.attempt, 0, {"planned": [], "not_planned": {}})
    assert row is not None and row.parse_status == ParseStatus.COMPLETED
    return row


def _entries(deps: Services, kb: KnowledgeBase, knowledge: Knowledge) -> dict[str, IndexEntry]:
    space = IndexSpace.of(deps.embedding_model(kb.embedding_model_id))
    return {e.id: e for e in deps.engine(kb.retrieval_engine).entries_of(space, kb.id, knowledge.id)}


def _edit(deps: Services, knowledge: Knowledge, chunk_id: str, **body: Any) -> dict[str, Any]:
    return chunks_module.edit_chunk(
        deps, knowledge.tenant_id, knowledge.id, chunk_id, EditChunkRequest(**body)
    )


def _while_embedding(monkeypatch: pytest.MonkeyPatch, meanwhile: Any) -> None:
    """`meanwhile` runs while the edit embeds its new text: after its checks, before its writes."""
    real = chunks_module.embed_for_api

    def racing(*args: Any, **kwargs: Any) -> Any:
        meanwhile()
        return real(*args, **kwargs)

    monkeypatch.setattr(chunks_module, "embed_for_api", racing)


def _refused(call: Any) -> AppError:
    with pytest.raises(AppError) as refused:
        call()
    return refused.value


def test_an_edit_that_a_finished_delete_overtook_takes_its_writes_back(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.operations.knowledge_changes import delete_knowledge

    knowledge = _completed(deps, kb)
    first = deps.chunks.list(knowledge.id)[0]

    def delete() -> None:
        delete_knowledge(deps, knowledge.tenant_id, knowledge.id)
        drain(deps, ("lifecycle",))  # the delete task runs to the end
        assert deps.knowledge.get(knowledge.id) is None

    _while_embedding(monkeypatch, delete)
    error = _refused(lambda: _edit(deps, knowledge, first.id, content="Edited while it was deleted."))
    assert (error.status, error.code) == (404, "knowledge_not_found")
    assert _entries(deps, kb, knowledge) == {}
    assert deps.chunks.list(knowledge.id) == []


def test_an_edit_that_a_reparse_overtook_leaves_nothing_of_the_old_attempt(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.commands import ReparseRequest
    from chalicelib.operations.knowledge_changes import reparse

    knowledge = _completed(deps, kb)
    first = deps.chunks.list(knowledge.id)[0]
    _while_embedding(monkeypatch, lambda: reparse(deps, knowledge.tenant_id, knowledge.id, ReparseRequest()))
    error = _refused(lambda: _edit(deps, knowledge, first.id, content="ZEBRA text of the old attempt."))
    assert (error.status, error.code) == (409, "knowledge_changed")
    assert first.id not in _entries(deps, kb, knowledge)
    assert deps.chunks.get_many([(knowledge.id, first.id)]) == {}
    monkeypatch.undo()
    drain(deps, MAIN_STAGES)  # attempt 2 is processed: none of its text is the lost edit's
    assert not [e for e in _entries(deps, kb, knowledge).values() if "ZEBRA" in e.content]
    assert not [c for c in deps.chunks.list(knowledge.id) if "ZEBRA" in c.content]


def test_a_document_disabled_while_a_chunk_is_edited_keeps_the_entry_off(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.operations.knowledge_changes import edit

    knowledge = _completed(deps, kb)
    first = deps.chunks.list(knowledge.id)[0]
    disable = EditKnowledgeRequest(enable_status="disabled")
    _while_embedding(monkeypatch, lambda: edit(deps, knowledge.tenant_id, knowledge.id, disable))
    edited = _edit(deps, knowledge, first.id, content="New words written while it was switched off.")
    assert edited["is_enabled"] is True  # the chunk's own switch stays on
    entry = _entries(deps, kb, knowledge)[first.id]
    assert entry.content.endswith("New words written while it was switched off.")
    assert entry.is_enabled is False


def test_an_edit_the_index_refuses_is_a_503_without_the_engines_words(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    knowledge = _completed(deps, kb)
    first = deps.chunks.list(knowledge.id)[0]
    before = _entries(deps, kb, knowledge)[first.id]
    engine = deps.engine(kb.retrieval_engine)

    def refuse(*_: Any) -> None:  # as OpenSearchEngine._bulk raised it for a mapping's refusal
        raise IndexWriteError(
            "bulk: 1 of 1 actions failed; first index x: 400 {'type': 'mapper_parsing_exception', "
            "'reason': 'SERVER-SAID failed to parse field [content]'}"
        )

    monkeypatch.setattr(engine, "batch_index", refuse)
    with caplog.at_level(logging.DEBUG):
        error = _refused(lambda: _edit(deps, knowledge, first.id, content="Text the index refuses."))
    assert (error.status, error.code) == (503, "index_refused")
    assert "SERVER-SAID" not in error.message
    assert not [r for r in caplog.records if "SERVER-SAID" in r.getMessage()]
    stored = deps.chunks.get_many([(knowledge.id, first.id)])[(knowledge.id, first.id)]
    assert stored.content == first.content  # nothing changed: the same request later makes the edit
    assert _entries(deps, kb, knowledge)[first.id] == before


def test_a_document_being_deleted_is_gone_from_the_chunk_routes_and_its_links(
    deps: Services, kb: KnowledgeBase
) -> None:
    from chalicelib.operations.knowledge_changes import delete_knowledge

    knowledge = _completed(deps, kb)
    first = deps.chunks.list(knowledge.id)[0]
    delete_knowledge(deps, knowledge.tenant_id, knowledge.id)  # the delete task has not run yet
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.parse_status == ParseStatus.DELETING
    tenant, kid = knowledge.tenant_id, knowledge.id
    calls = [
        lambda: chunks_module.list_chunks(deps, tenant, kid, ChunkListQuery()),
        lambda: chunks_module.get_chunk(deps, tenant, kid, first.id),
    ]
    for kind in ("original", "parsed"):
        query = FileUrlQuery.model_validate({"kind": kind})
        calls.append(lambda q=query: file_links.file_url(deps, tenant, kid, q, "https://api.test/v1"))
    for call in calls:
        error = _refused(call)
        assert (error.status, error.code) == (404, "knowledge_not_found")
    edit = _refused(lambda: _edit(deps, knowledge, first.id, content="Too late."))
    assert (edit.status, edit.code) == (400, "invalid_state")  # as every write to a document being deleted
