"""A knowledge base's delete run to its end while a reuse_vectors move carries a document's index entries
(`move_knowledge`: after the row moved, before its chunks are repointed). The source's delete no longer
lists the document, so the target keeps it searchable; the target's delete takes the document with it, and
no entry of it stays in either index, even when the move's worker dies after the carry and its redelivery
finds the target gone."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

import chalicelib.stages.lifecycle as lifecycle
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, ParseStatus, TaskStatus, Tenant
from chalicelib.operations.knowledge_changes import delete_kb
from chalicelib.ports import IndexSpace

from .test_move_clone import CRANES, TIDES, completed, model, move, new_kb, run_lifecycle, search  # noqa: F401


def _space(deps: Services) -> IndexSpace:
    return IndexSpace.of(deps.embedding_model(""))


def _delete_kb_during_the_carry(
    deps: Services, monkeypatch: pytest.MonkeyPatch, doomed: KnowledgeBase
) -> list[bool]:
    """The whole delete of `doomed` runs (another invocation) when the move's carry begins."""
    engine = deps.engine()
    real_move: Callable[..., int] = engine.move_knowledge  # type: ignore[assignment]
    ran: list[bool] = []

    def carry(space: IndexSpace, src_kb_id: str, dst_kb_id: str, knowledge_ids: Sequence[str]) -> int:
        if not ran:
            ran.append(True)
            task = delete_kb(deps, doomed.tenant_id, doomed.id)
            lifecycle.run(deps, task.id)
            assert deps.kbs.get(doomed.id) is None  # finished before the carry reads anything
        return real_move(space, src_kb_id, dst_kb_id, knowledge_ids)

    monkeypatch.setattr(engine, "move_knowledge", carry)
    return ran


def test_the_source_deleted_during_the_carry_leaves_the_moved_document_searchable_in_the_target(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = new_kb(deps, tenant, "keep")
    doc = completed(deps, kb, "tides.md", TIDES)
    other = completed(deps, kb, "cranes.md", CRANES)
    ran = _delete_kb_during_the_carry(deps, monkeypatch, kb)
    task = move(deps, kb, target, [doc.id], "reuse_vectors")
    run_lifecycle(deps)

    assert ran
    assert deps.knowledge.get(other.id) is None
    kept = deps.knowledge.get(doc.id)
    assert kept is not None and kept.kb_id == target.id and kept.parse_status == ParseStatus.COMPLETED
    chunks = deps.chunks.list(doc.id)
    assert chunks and {c.kb_id for c in chunks} == {target.id}
    space = _space(deps)
    assert deps.engine().count(space, target.id, doc.id) == len([c for c in chunks if c.content])
    assert deps.engine().count(space, kb.id) == 0  # nothing of the deleted knowledge base is left
    assert any(hit["knowledge_id"] == doc.id for hit in search(deps, target, "spring tides full moon"))
    done = deps.tasks.get(task.id)
    assert done is not None and done.status == TaskStatus.COMPLETED and done.succeeded == 1, done


def test_the_target_deleted_during_the_carry_leaves_no_entry_of_the_document(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = new_kb(deps, tenant, "doomed")
    doc = completed(deps, kb, "tides.md", TIDES)
    stays = completed(deps, kb, "cranes.md", CRANES)
    ran = _delete_kb_during_the_carry(deps, monkeypatch, target)
    task = move(deps, kb, target, [doc.id], "reuse_vectors")
    run_lifecycle(deps)

    assert ran
    assert deps.knowledge.get(doc.id) is None  # in the target when it was deleted: it went with it
    assert deps.chunks.list(doc.id) == []
    space = _space(deps)
    assert deps.engine().count(space, target.id) == 0
    assert deps.engine().count(space, kb.id, doc.id) == 0
    assert deps.engine().count(space, kb.id, stays.id) > 0  # the source's other document is untouched
    done = deps.tasks.get(task.id)
    assert done is not None and done.status == TaskStatus.FAILED and "deleted" in done.errors[doc.id]


def test_a_move_redelivered_after_its_target_was_deleted_during_the_carry_removes_what_it_carried(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worker dies after the carry and the wiki pages' (any transient error before its check: here the
    graph store does not answer the source's retraction); the redelivery finds the target knowledge base gone
    and the row with it, and had failed the item there, leaving the carried index entries and page records
    in the deleted target for good."""
    from chalicelib.ports import WikiPageRecord

    target = new_kb(deps, tenant, "doomed")
    doc = completed(deps, kb, "tides.md", TIDES)
    chunk = deps.chunks.list(doc.id)[0]
    deps.wiki.put_pages(kb.id, doc.id, [WikiPageRecord(doc.id, "Tides", "Spring tides", chunk.id)])
    ran = _delete_kb_during_the_carry(deps, monkeypatch, target)
    real_retract = deps.graph.delete_knowledge
    crashes: list[bool] = []

    def graph_does_not_answer(kb_id: str, knowledge_id: str) -> int:
        if kb_id == kb.id and not crashes:  # the move's retraction from the source
            crashes.append(True)
            raise ConnectionError("the graph store did not answer")
        return real_retract(kb_id, knowledge_id)

    monkeypatch.setattr(deps.graph, "delete_knowledge", graph_does_not_answer)
    task = move(deps, kb, target, [doc.id], "reuse_vectors")
    run_lifecycle(deps)

    assert ran and crashes
    assert deps.knowledge.get(doc.id) is None and deps.kbs.get(target.id) is None
    space = _space(deps)
    assert deps.engine().count(space, target.id) == 0  # on HEAD: the carried entry
    assert deps.engine().count(space, kb.id, doc.id) == 0
    assert deps.chunks.list(doc.id) == []
    assert deps.wiki.pages(target.id) == [] and deps.wiki.pages(kb.id) == []
    done = deps.tasks.get(task.id)
    assert done is not None and done.status == TaskStatus.FAILED and "deleted" in done.errors[doc.id]
