"""Durable tasks: what a long request hands to the lifecycle queue, and how a caller reads its progress.

Light on purpose (no engines, models or parsers): the housekeeping schedule re-drives lost deletes and
re-sends tasks whose message was lost with it.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from chalicelib.domain.errors import NotFound
from chalicelib.domain.types import Knowledge, KnowledgeBase, Task, TaskKind, TaskStatus
from chalicelib.ports import Dependencies, TaskExists
from chalicelib.services.ownership import kb_allowed

LIFECYCLE_QUEUE = "lifecycle"
#: where an FAQ import runs (chalicelib/faq/importing.py QUEUE, which imports this module): its own queue
FAQ_IMPORT_QUEUE = "faq-import"

#: the namespace of a knowledge base's delete task id (uuid5 of its id): a DELETE repeated finds it
_KB_DELETE_TASK_IDS = uuid.UUID("0d7f3c2e-9b1a-4e65-8f0e-2a6c5b1d9e47")


def new_task(tenant_id: str, kind: TaskKind, kb_id: str, items: list[str], **params: Any) -> Task:
    return Task(id=str(uuid.uuid4()), tenant_id=tenant_id, kind=kind, kb_id=kb_id, items=items, params=params)


def start_task(deps: Dependencies, task: Task) -> Task:
    deps.tasks.put(task)
    deps.queue.send_raw(LIFECYCLE_QUEUE, {"task_id": task.id})
    return task


def deliver_again(deps: Dependencies, task_id: str) -> None:
    """One more delivery of a task whose message was lost or dead-lettered (it resumes where it stopped)."""
    deps.queue.send_raw(LIFECYCLE_QUEUE, {"task_id": task_id})


def send_again(deps: Dependencies, task: Task) -> None:
    """Housekeeping's re-send of an open task that made no progress: on the queue its kind runs on."""
    if task.kind == TaskKind.FAQ_IMPORT:
        deps.queue.send_raw(FAQ_IMPORT_QUEUE, {"task_id": task.id})
    else:
        deliver_again(deps, task.id)


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


def kb_delete_task_id(kb_id: str) -> str:
    return str(uuid.uuid5(_KB_DELETE_TASK_IDS, kb_id))


def kb_delete_task(deps: Dependencies, kb: KnowledgeBase) -> Task:
    """The knowledge base's open delete task, written (before it is marked `deleting`) under an id that
    follows from the knowledge base unless there is one: a DELETE repeated finds it, and housekeeping
    re-sends it while it is open (its work marks the knowledge base `deleting` if the request died before)."""
    task = deps.tasks.get(kb_delete_task_id(kb.id))
    if task is not None and task.status in (TaskStatus.QUEUED, TaskStatus.RUNNING):
        return task
    fresh = Task(
        id=kb_delete_task_id(kb.id) if task is None else str(uuid.uuid4()),
        tenant_id=kb.tenant_id,
        kind=TaskKind.DELETE_KB,
        kb_id=kb.id,
        items=[],
    )
    try:
        deps.tasks.put(fresh)
    except TaskExists:  # another DELETE wrote it a moment ago
        return deps.tasks.get(fresh.id) or fresh
    return fresh


def drive_kb_delete(deps: Dependencies, kb: KnowledgeBase) -> Task:
    """A `deleting` knowledge base's task, written if it has none open, then sent (again): a DELETE repeated
    finishes a delete whose message was never sent. A second delivery of a running task only repeats
    idempotent work (progress is saved forward only)."""
    task = kb_delete_task(deps, kb)
    deliver_again(deps, task.id)
    return task


def mark_kb_deleting(deps: Dependencies, kb_id: str) -> bool:
    """Its delete task's first step: the knowledge base `deleting` (a DELETE that died between writing the
    task and marking it left it active). False while it keeps changing under the write."""
    for _ in range(5):
        kb = deps.kbs.get(kb_id, consistent=True)
        if kb is None or kb.status == "deleting":
            return True
        if deps.kbs.update(replace(kb, status="deleting")) is not None:
            return True
    return False
