"""A knowledge base's delete and a move out of it, interleaved (the delete lists its rows lazily, page by
page): a document the move took out after the listing stays where it went, and a move whose source is
already being deleted is refused with a stable reason, never reported moved while the delete takes it."""

from __future__ import annotations

from typing import Any

import pytest

import chalicelib.stages.lifecycle as lifecycle
from chalicelib.bootstrap import Services
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus, TaskStatus, Tenant
from chalicelib.operations.knowledge_changes import delete_kb
from chalicelib.tasks.move_clone import SOURCE_DELETED

from .test_move_clone import CRANES, TIDES, completed, model, move, new_kb, run_lifecycle, search  # noqa: F401


def test_a_document_moved_out_after_the_kb_delete_listed_it_stays_in_its_new_kb(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = new_kb(deps, tenant, "keep")
    keep = completed(deps, kb, "tides.md", TIDES)
    dropped = completed(deps, kb, "cranes.md", CRANES)
    moving = move(deps, kb, target, [keep.id], "reuse_vectors")
    real_move_to_kb = deps.knowledge.move_to_kb
    real_delete_one = lifecycle.delete_one
    landed: list[Knowledge | None] = []

    def delete_begins_between_check_and_move(
        knowledge_id: str, from_kb_id: str, to_kb_id: str, dedupe_key: str
    ) -> Knowledge | None:
        # the move found its source open; now the source's delete starts and lists its rows (both) ...
        deleting = delete_kb(deps, tenant.id, kb.id)

        def move_lands_after_the_listing(d: Any, knowledge_id_: str, **kwargs: Any) -> None:
            if not landed:  # ... the move's write lands (another invocation) before the delete's first
                landed.append(real_move_to_kb(knowledge_id, from_kb_id, to_kb_id, dedupe_key))
            real_delete_one(d, knowledge_id_, **kwargs)

        monkeypatch.setattr(lifecycle, "delete_one", move_lands_after_the_listing)
        lifecycle.run(deps, deleting.id)
        monkeypatch.setattr(lifecycle, "delete_one", real_delete_one)
        assert deps.tasks.get(deleting.id).status == TaskStatus.COMPLETED  # type: ignore[union-attr]
        return landed[0]

    monkeypatch.setattr(deps.knowledge, "move_to_kb", delete_begins_between_check_and_move)
    lifecycle.run(deps, moving.id)
    monkeypatch.setattr(deps.knowledge, "move_to_kb", real_move_to_kb)
    run_lifecycle(deps)

    assert landed and landed[0] is not None  # the interleaving happened
    assert deps.kbs.get(kb.id) is None  # the source is deleted, with what was still in it
    assert deps.knowledge.get(dropped.id) is None
    kept = deps.knowledge.get(keep.id)
    assert kept is not None and kept.kb_id == target.id and kept.parse_status == ParseStatus.COMPLETED
    assert deps.chunks.list(keep.id)
    assert deps.files.exists(kept.file_path)
    assert any(hit["knowledge_id"] == keep.id for hit in search(deps, target, "spring tides full moon"))
    task = deps.tasks.get(moving.id)
    assert task is not None and task.status == TaskStatus.COMPLETED and task.succeeded == 1, task


def test_a_move_out_of_a_kb_being_deleted_is_refused_not_reported_moved(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = new_kb(deps, tenant, "keep")
    doc = completed(deps, kb, "tides.md", TIDES)
    completed(deps, kb, "cranes.md", CRANES)
    moving = move(deps, kb, target, [doc.id], "reuse_vectors")  # accepted before the delete
    deleting = delete_kb(deps, tenant.id, kb.id)
    real_delete_one = lifecycle.delete_one
    ran: list[bool] = []

    def move_runs_after_the_listing(d: Any, knowledge_id: str, **kwargs: Any) -> None:
        if not ran:  # the delete listed the rows; the move's slice runs now (another invocation)
            ran.append(True)
            lifecycle.run(deps, moving.id)
        real_delete_one(d, knowledge_id, **kwargs)

    monkeypatch.setattr(lifecycle, "delete_one", move_runs_after_the_listing)
    lifecycle.run(deps, deleting.id)
    monkeypatch.setattr(lifecycle, "delete_one", real_delete_one)
    run_lifecycle(deps)

    assert ran
    task = deps.tasks.get(moving.id)
    assert task is not None and task.status == TaskStatus.FAILED and task.succeeded == 0, task
    assert task.errors == {doc.id: SOURCE_DELETED}
    assert deps.knowledge.get(doc.id) is None  # deleted with its knowledge base, as the user was told
    assert deps.kbs.get(kb.id) is None
    assert deps.knowledge.page_by_kb(target.id, limit=100) == []
    assert search(deps, target, "spring tides full moon") == []
