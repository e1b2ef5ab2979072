"""A move item done again (a Lambda timeout or a transient error after the item's work, before the task saved
its progress: a move saves it every 10 items) keeps the document's tags in the target. The item removes
every tag relation of the document, then added only the tags missing from the row: after a first delivery
the row had them all, so no relation was written again, the target's tag filter missed the document, and a
delete of the tag left its id on the row. And the task no longer carries every document's tag names (its one
DynamoDB item): each item reads them in the source and keeps them in the files bucket while its row crosses."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateTagRequest, ListKnowledgeQuery, SearchRequest
from chalicelib.domain.tags import Tag
from chalicelib.domain.types import Knowledge, KnowledgeBase, TaskStatus, Tenant
from chalicelib.operations.listing import list_knowledge
from chalicelib.operations.search import hybrid_search
from chalicelib.operations.tags import create_tag, delete_tag
from chalicelib.ports.index import IndexUnavailable
from chalicelib.services.tagging import set_tags
from chalicelib.tasks.move_clone import move_one

from .test_move_clone import TIDES, completed, model, move, new_kb, run_lifecycle  # noqa: F401


def _listed(deps: Services, kb: KnowledgeBase, tag_id: str) -> list[str]:
    page = list_knowledge(deps, kb.tenant_id, kb.id, ListKnowledgeQuery(tag_id=tag_id))
    return [item["id"] for item in page["items"]]


def _tagged(deps: Services, kb: KnowledgeBase, name: str, data: bytes, tag: Tag) -> Knowledge:
    doc = completed(deps, kb, name, data)
    row = deps.knowledge.get(doc.id)
    assert row is not None
    return set_tags(deps, row, [tag.id])


def _target_tag(deps: Services, target: KnowledgeBase, name: str) -> Tag:
    return next(t for t in deps.tags.list_kb(target.id) if t.name == name)


def _deliver_again(deps: Services, task_id: str) -> None:
    """The worker died after the item's work, before it saved its progress: the next delivery redoes it."""
    done = deps.tasks.get(task_id)
    assert done is not None and done.status == TaskStatus.COMPLETED
    deps.tasks._rows[task_id] = replace(done, status=TaskStatus.RUNNING, done=0, succeeded=0)  # type: ignore[attr-defined]
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw("lifecycle", {"task_id": task_id})
    run_lifecycle(deps)


def test_a_redelivered_item_keeps_the_tag_relations_and_a_tag_delete_takes_the_tag_off(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
) -> None:
    target = new_kb(deps, tenant, "archive")
    tag = create_tag(deps, tenant.id, kb.id, CreateTagRequest(name="ocean"))
    doc = _tagged(deps, kb, "tides.md", TIDES, tag)
    task = move(deps, kb, target, [doc.id], "reuse_vectors")
    run_lifecycle(deps)
    ocean = _target_tag(deps, target, "ocean")
    assert _listed(deps, target, ocean.id) == [doc.id]
    _deliver_again(deps, task.id)
    again = deps.tasks.get(task.id)
    assert again is not None and again.status == TaskStatus.COMPLETED, again
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.tag_ids == [ocean.id]
    assert _listed(deps, target, ocean.id) == [doc.id]  # was []: the relation was removed, never written
    delete_tag(deps, tenant.id, target.id, ocean.id)
    run_lifecycle(deps)
    assert deps.tags.get(target.id, ocean.id) is None
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.tag_ids == []  # was [ocean.id]: the delete found no relation to follow


def test_a_transient_index_error_on_a_later_item_keeps_the_earlier_items_tags(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No hand-made task state: the index does not answer once for the third of three documents (an outage
    the queue retries), and the retried message redoes the first two."""
    target = new_kb(deps, tenant, "archive")
    tag = create_tag(deps, tenant.id, kb.id, CreateTagRequest(name="ocean"))
    docs = [_tagged(deps, kb, f"tides-{i}.md", TIDES + f"\nnote {i}\n".encode(), tag) for i in range(3)]
    engine = deps.engine()
    real_move = engine.move_knowledge
    failed: list[str] = []

    def outage_once_on_the_third(space: Any, from_kb: str, to_kb: str, ids: list[str]) -> int:
        if ids == [docs[2].id] and not failed:
            failed.append(ids[0])
            raise IndexUnavailable("timed out")
        return real_move(space, from_kb, to_kb, ids)

    monkeypatch.setattr(engine, "move_knowledge", outage_once_on_the_third)
    task = move(deps, kb, target, [d.id for d in docs], "reuse_vectors")
    run_lifecycle(deps)
    done = deps.tasks.get(task.id)
    assert failed and done is not None and done.status == TaskStatus.COMPLETED, done
    ocean = _target_tag(deps, target, "ocean")
    assert sorted(_listed(deps, target, ocean.id)) == sorted(d.id for d in docs)  # was only the third
    hits = hybrid_search(
        deps,
        tenant.id,
        target.id,
        SearchRequest(query_text="spring tides", match_count=20, tag_ids=[ocean.id]),
    )
    assert {h["knowledge_id"] for h in hits} == {d.id for d in docs}


def test_the_task_holds_no_tag_names_and_a_crash_after_the_row_moved_still_tags_it_in_the_target(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The move clears the row's tag ids: a delivery that dies right after it leaves the names only where the
    item kept them (the files bucket), which its redelivery reads; once used they are deleted."""
    from chalicelib.tasks.move_clone import TAG_NAMES_PREFIX

    target = new_kb(deps, tenant, "archive")
    ocean = create_tag(deps, tenant.id, kb.id, CreateTagRequest(name="ocean"))
    tides = create_tag(deps, tenant.id, kb.id, CreateTagRequest(name="tides"))
    doc = completed(deps, kb, "tides.md", TIDES)
    row = deps.knowledge.get(doc.id)
    assert row is not None
    set_tags(deps, row, [tides.id, ocean.id])
    started = move(deps, kb, target, [doc.id], "reuse_vectors")
    task = deps.tasks.get(started.id)
    assert task is not None and "tags" not in task.params  # was every document's names, in the one item
    real_remove, crashed = deps.tags.remove_knowledge, list[str]()

    def dies_right_after_the_row_moved(knowledge_id: str) -> int:
        if not crashed:
            crashed.append(knowledge_id)
            raise ConnectionError("the worker died")
        return real_remove(knowledge_id)

    monkeypatch.setattr(deps.tags, "remove_knowledge", dies_right_after_the_row_moved)
    with pytest.raises(ConnectionError):
        move_one(deps, task, doc.id)
    moved = deps.knowledge.get(doc.id)
    assert moved is not None and moved.kb_id == target.id and moved.tag_ids == []
    assert len(deps.inbox.list_keys(TAG_NAMES_PREFIX, 10)) == 1  # what the redelivery reads
    move_one(deps, task, doc.id)
    by_name = {t.name: t.id for t in deps.tags.list_kb(target.id)}
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.tag_ids == [by_name["tides"], by_name["ocean"]]
    assert _listed(deps, target, by_name["ocean"]) == [doc.id]
    assert deps.inbox.list_keys(TAG_NAMES_PREFIX, 10) == []


def test_a_failed_item_keeps_nothing_in_the_files_bucket(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
) -> None:
    """The item read and kept the names, then the move found the content in the target already."""
    from chalicelib.tasks.move_clone import TAG_NAMES_PREFIX

    target = new_kb(deps, tenant, "archive")
    tag = create_tag(deps, tenant.id, kb.id, CreateTagRequest(name="ocean"))
    doc = _tagged(deps, kb, "tides.md", TIDES, tag)
    completed(deps, target, "tides.md", TIDES)  # the same content, live in the target
    task = move(deps, kb, target, [doc.id], "reuse_vectors")
    run_lifecycle(deps)
    done = deps.tasks.get(task.id)
    assert done is not None and done.status == TaskStatus.FAILED and doc.id in done.errors
    assert deps.inbox.list_keys(TAG_NAMES_PREFIX, 10) == []
    row = deps.knowledge.get(doc.id)
    assert row is not None and row.kb_id == kb.id and row.tag_ids == [tag.id]
