"""A document indexed before its knowledge base's indexing was switched off ('for new documents only') keeps
its index entries. Moved, they go with it or are removed, whatever either knowledge base indexes now: a move
that checked only that left them under the source's id, where no later delete of the document looks."""

from __future__ import annotations

from typing import Any

import pytest
from scripted_llm import CHAT

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, IndexingStrategySettings
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus, TaskStatus, Tenant
from chalicelib.ports import IndexSpace

from .conftest import drain, upload
from .test_move_clone import move, new_kb, run_lifecycle
from .test_no_index_kb import WIKI_AND_GRAPH, llm  # noqa: F401  (the fixture)

pytestmark = pytest.mark.usefixtures("llm")  # the source's summary model
OFF = {"vector_enabled": False, "keyword_enabled": False, "wiki_enabled": True}


def _entries(deps: Services, kb_id: str, knowledge_id: str) -> int:
    return deps.engine().count(IndexSpace.of(deps.embedding_model()), kb_id, knowledge_id)


def _no_index_kb(deps: Services, tenant_id: str, name: str = "wiki and graph") -> KnowledgeBase:
    from chalicelib.operations.knowledge_bases import create_kb

    settings = IndexingStrategySettings(**WIKI_AND_GRAPH)  # type: ignore[arg-type]
    request = CreateKnowledgeBase(name=name, summary_model_id=CHAT, indexing_strategy=settings)
    return create_kb(deps, tenant_id, request)


def _indexed_then_switched_off(deps: Services, kb: KnowledgeBase) -> tuple[Knowledge, KnowledgeBase]:
    """A completed document with entries in `kb`, whose indexing is then switched off."""
    from chalicelib.commands import UpdateKnowledgeBase
    from chalicelib.operations.knowledge_bases import update_kb

    created = upload(deps, kb)
    drain(deps)
    doc = deps.knowledge.write_fields(created.id, parse_status=ParseStatus.COMPLETED)  # type: ignore[attr-defined]
    assert _entries(deps, kb.id, doc.id) > 0
    update_kb(deps, kb.tenant_id, kb.id, UpdateKnowledgeBase(summary_model_id=CHAT, indexing_strategy=OFF))
    source = deps.kbs.get(kb.id)
    assert source is not None and not source.indexing_strategy.needs_embedding
    return doc, source


def _deleted(deps: Services, doc: Knowledge) -> None:
    from chalicelib.operations.knowledge_changes import delete_knowledge

    delete_knowledge(deps, doc.tenant_id, doc.id)
    drain(deps, ("lifecycle",))
    assert deps.knowledge.get(doc.id) is None


def test_reused_entries_go_with_the_document_into_a_knowledge_base_without_an_index(
    deps: Services,
    kb: KnowledgeBase,
) -> None:
    doc, source = _indexed_then_switched_off(deps, kb)
    before = _entries(deps, source.id, doc.id)
    target = _no_index_kb(deps, kb.tenant_id)
    task = move(deps, source, target, [doc.id], "reuse_vectors")  # allowed: both index nothing
    run_lifecycle(deps)
    done = deps.tasks.get(task.id)
    assert done is not None and done.status == TaskStatus.COMPLETED
    # on HEAD: they stayed under the source's id (the target indexes nothing now)
    assert (_entries(deps, source.id, doc.id), _entries(deps, target.id, doc.id)) == (0, before)
    _deleted(deps, doc)
    assert _entries(deps, source.id, doc.id) + _entries(deps, target.id, doc.id) == 0


def test_a_move_that_reparses_removes_the_source_entries(
    deps: Services,
    kb: KnowledgeBase,
    tenant: Tenant,
) -> None:
    doc, source = _indexed_then_switched_off(deps, kb)
    target = new_kb(deps, tenant, "indexed target")
    move(deps, source, target, [doc.id], "reparse")
    run_lifecycle(deps)
    drain(deps)
    moved = deps.knowledge.get(doc.id)
    assert moved is not None and moved.kb_id == target.id
    assert _entries(deps, source.id, doc.id) == 0  # on HEAD: left, as the source indexes nothing now
    assert _entries(deps, target.id, doc.id) > 0


def test_a_delete_during_a_move_leaves_no_entry_in_the_source(
    deps: Services,
    kb: KnowledgeBase,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The row moved, its delete landed in the target (which takes the target's entries), and the worker
    died before carrying the source's: the redelivery finds no row and removes what the move left."""
    from chalicelib.tasks import move_clone
    from chalicelib.tasks.delete import delete_one

    doc, source = _indexed_then_switched_off(deps, kb)
    target = _no_index_kb(deps, kb.tenant_id)
    real_remove, real_repoint, fired = deps.tags.remove_knowledge, move_clone._repoint, list[str]()

    def delete_lands(knowledge_id: str) -> int:
        if knowledge_id == doc.id and not fired:  # the move's first step after the row moved
            fired.append(knowledge_id)
            delete_one(deps, doc.id)
        return real_remove(knowledge_id)

    def worker_dies(*args: Any) -> None:
        if len(fired) == 1:
            fired.append("crash")
            raise ConnectionError("the worker died")
        real_repoint(*args)

    monkeypatch.setattr(deps.tags, "remove_knowledge", delete_lands)
    monkeypatch.setattr(move_clone, "_repoint", worker_dies)
    task = move(deps, source, target, [doc.id], "reuse_vectors")
    run_lifecycle(deps)
    assert fired == [doc.id, "crash"] and deps.knowledge.get(doc.id) is None
    done = deps.tasks.get(task.id)
    assert done is not None and done.status == TaskStatus.FAILED
    # on HEAD: the source's entries stayed (it indexes nothing now)
    assert _entries(deps, source.id, doc.id) + _entries(deps, target.id, doc.id) == 0


def test_entries_follow_a_document_a_later_move_took_on(
    deps: Services,
    kb: KnowledgeBase,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first move's worker died after moving the row, before carrying its entries; a second move took
    the row on from there; the first move's redelivery carries the entries where the row is now."""
    from chalicelib.tasks import move_clone

    doc, source = _indexed_then_switched_off(deps, kb)
    before = _entries(deps, source.id, doc.id)
    middle, last = _no_index_kb(deps, kb.tenant_id, "middle"), _no_index_kb(deps, kb.tenant_id, "last")
    first = move(deps, source, middle, [doc.id], "reuse_vectors")
    real_repoint = move_clone._repoint

    def worker_dies(*args: Any) -> None:
        raise ConnectionError("the worker died")

    monkeypatch.setattr(move_clone, "_repoint", worker_dies)
    with pytest.raises(ConnectionError):
        move_clone.move_one(deps, first, doc.id)
    monkeypatch.setattr(move_clone, "_repoint", real_repoint)
    at_middle = deps.kbs.get(middle.id)
    assert at_middle is not None
    second = move(deps, at_middle, last, [doc.id], "reuse_vectors")
    move_clone.move_one(deps, second, doc.id)  # ahead of the first move's redelivery
    run_lifecycle(deps)
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == last.id
    # on HEAD: left under the first source's id, which indexes nothing now
    assert _entries(deps, source.id, doc.id) == 0
    assert _entries(deps, last.id, doc.id) == before
    _deleted(deps, doc)
    assert sum(_entries(deps, k.id, doc.id) for k in (source, middle, last)) == 0


def test_entries_carried_after_a_later_move_reparsed_the_document_go(
    deps: Services,
    kb: KnowledgeBase,
    tenant: Tenant,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The row moved into the middle knowledge base, and a second move (reparse) took it on before the
    first carried the entries there: those entries belong to no attempt any more and go."""
    from chalicelib.tasks import move_clone

    doc, source = _indexed_then_switched_off(deps, kb)
    middle, last = _no_index_kb(deps, kb.tenant_id, "middle"), new_kb(deps, tenant, "last")
    real_remove, fired = deps.tags.remove_knowledge, list[str]()

    def second_move_lands(knowledge_id: str) -> int:
        if knowledge_id == doc.id and not fired:  # the first move's first step after the row moved
            fired.append(knowledge_id)
            at_middle = deps.kbs.get(middle.id)
            assert at_middle is not None
            second = move(deps, at_middle, last, [doc.id], "reparse")
            move_clone.move_one(deps, second, doc.id)
            second.done, second.status = 1, TaskStatus.COMPLETED  # its one delivery ended here
            assert deps.tasks.save_progress(second)
        return real_remove(knowledge_id)

    monkeypatch.setattr(deps.tags, "remove_knowledge", second_move_lands)
    move(deps, source, middle, [doc.id], "reuse_vectors")
    run_lifecycle(deps)
    drain(deps)
    row = deps.knowledge.get(doc.id)
    assert fired and row is not None and row.kb_id == last.id
    # on HEAD: left under the middle knowledge base's id, which indexes nothing
    assert _entries(deps, source.id, doc.id) + _entries(deps, middle.id, doc.id) == 0
    assert _entries(deps, last.id, doc.id) > 0
