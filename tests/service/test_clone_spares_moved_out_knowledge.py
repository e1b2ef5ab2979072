"""A clone into an existing knowledge base deletes the target's documents the source does not have; one the
user moves out of the target after the clone planned its deletes stays where it went."""

from __future__ import annotations

from typing import Any

import pytest

import chalicelib.stages.lifecycle as lifecycle
import chalicelib.tasks.clone as clone_task
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, ParseStatus, TaskStatus, Tenant

from .test_move_clone import CRANES, TIDES, clone, completed, model, move, new_kb, run_lifecycle  # noqa: F401


def test_a_document_moved_out_of_the_target_after_the_clone_planned_its_delete_stays(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    completed(deps, kb, "tides.md", TIDES)
    target = new_kb(deps, tenant, "mirror")
    elsewhere = new_kb(deps, tenant, "elsewhere")
    extra = completed(deps, target, "cranes.md", CRANES)  # not in the source: the clone deletes it
    real_delete_one = clone_task.delete_one
    moved: list[str] = []

    def moved_out_first(d: Any, knowledge_id: str, **kwargs: Any) -> None:
        if not moved:  # the user moves it out (another invocation) after the clone planned its delete
            moved.append(knowledge_id)
            lifecycle.run(deps, move(deps, target, elsewhere, [extra.id], "reuse_vectors").id)
        real_delete_one(d, knowledge_id, **kwargs)

    monkeypatch.setattr(clone_task, "delete_one", moved_out_first)
    started = clone(deps, kb, target_kb_id=target.id)
    run_lifecycle(deps)

    assert moved == [extra.id]
    task = deps.tasks.get(started["task_id"])
    assert task is not None and task.status == TaskStatus.COMPLETED, task.errors
    kept = deps.knowledge.get(extra.id)
    assert kept is not None and kept.kb_id == elsewhere.id and kept.parse_status == ParseStatus.COMPLETED
    assert deps.chunks.list(extra.id)
    assert [r.file_name for r in deps.knowledge.page_by_kb(target.id, limit=100)] == ["tides.md"]
