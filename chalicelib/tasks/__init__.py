"""Durable tasks: what a long request hands to the lifecycle queue, and how a caller reads its progress.

Light on purpose (no engines, models or parsers): the housekeeping schedule re-drives lost deletes with it.
"""

from __future__ import annotations

import uuid
from typing import Any

from chalicelib.domain.errors import NotFound
from chalicelib.domain.types import Knowledge, Task, TaskKind
from chalicelib.ports import Dependencies
from chalicelib.services.ownership import kb_allowed

LIFECYCLE_QUEUE = "lifecycle"


def new_task(tenant_id: str, kind: TaskKind, kb_id: str, items: list[str], **params: Any) -> Task:
    return Task(id=str(uuid.uuid4()), tenant_id=tenant_id, kind=kind, kb_id=kb_id, items=items, params=params)


def start_task(deps: Dependencies, task: Task) -> Task:
    deps.tasks.put(task)
    deps.queue.send_raw(LIFECYCLE_QUEUE, {"task_id": task.id})
    return task


def deliver_again(deps: Dependencies, task_id: str) -> None:
    """One more delivery of a task whose message was lost or dead-lettered (it resumes where it stopped)."""
    deps.queue.send_raw(LIFECYCLE_QUEUE, {"task_id": task_id})


def get_task(deps: Dependencies, tenant_id: str, task_id: str) -> Task:
    task = deps.tasks.get(task_id)
    if task is None or task.tenant_id != tenant_id or not kb_allowed(task.kb_id):
        raise NotFound(f"task {task_id} not found", code="task_not_found")
    return task


def redrive_delete(deps: Dependencies, knowledge: Knowledge) -> Task:
    """Housekeeping's recovery for a row left `deleting`: a fresh delete task for it."""
    return start_task(
        deps, new_task(knowledge.tenant_id, TaskKind.DELETE_KNOWLEDGE, knowledge.kb_id, [knowledge.id])
    )
