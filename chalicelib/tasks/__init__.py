"""Durable tasks: what a long request hands to the lifecycle queue, and how a caller reads its progress.

Light on purpose (no engines, models or parsers): the housekeeping schedule re-drives lost deletes and
re-sends tasks whose message was lost with it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from chalicelib.domain.errors import NotFound
from chalicelib.domain.types import OPEN_TASK_STATUSES, Knowledge, KnowledgeBase, Task, TaskKind
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


def send_again(deps: Dependencies, task: Task, *, give_up: bool = False) -> None:
    """Housekeeping's re-send of an open task that made no progress: on the queue its kind runs on. An FAQ
    import given up is ended by its own worker (`give_up`): its last result, its objects and its lease."""
    if task.kind == TaskKind.FAQ_IMPORT:
        body: dict[str, Any] = {"task_id": task.id, "give_up": True} if give_up else {"task_id": task.id}
        deps.queue.send_raw(FAQ_IMPORT_QUEUE, body)
    else:
        deliver_again(deps, task.id)


def get_task(deps: Dependencies, tenant_id: str, task_id: str) -> Task:
    """The tenant's task, when the request's key may name every knowledge base it works on: a move's or a
    clone's source too (its params and errors name the source's documents), not only its target."""
    task = deps.tasks.get(task_id)
    if task is None or task.tenant_id != tenant_id or not all(map(kb_allowed, _kbs_of(task))):
        raise NotFound(f"task {task_id} not found", code="task_not_found")
    return task


def _kbs_of(task: Task) -> list[str]:
    source = task.params.get("source_kb_id")
    return [task.kb_id, str(source)] if source else [task.kb_id]


#: generations of a subject's own task looked at before a fresh uuid4 one (each needs the one before ended)
MAX_TASK_GENERATIONS = 50


def generation_task_id(namespace: uuid.UUID, subject: str, generation: int) -> str:
    """A subject's own task id (uuid5): the first generation's is the subject's own (as it always was)."""
    return str(uuid.uuid5(namespace, subject if generation == 0 else f"{subject}#{generation}"))


def current_own_task(deps: Dependencies, namespace: uuid.UUID, subject: str) -> Task | None:
    """The subject's own task that has not ended, or None: its generations are read in order, and the
    first one absent or still open ends the walk."""
    for generation in range(MAX_TASK_GENERATIONS):
        task = deps.tasks.get(generation_task_id(namespace, subject, generation))
        if task is None or task.status in OPEN_TASK_STATUSES:
            return task
    return None


def own_task(deps: Dependencies, namespace: uuid.UUID, subject: str, make: Callable[[str], Task]) -> Task:
    """The subject's (a document's, a knowledge base's) open task of one kind, written by `make` under the
    first free generation's id if every earlier one ended: requests at once and repeated, and housekeeping,
    all land on the same open task, never one each (a uuid4 per call once the first had ended)."""
    for generation in range(MAX_TASK_GENERATIONS):
        task_id = generation_task_id(namespace, subject, generation)
        task = deps.tasks.get(task_id)
        if task is None:
            try:
                fresh = make(task_id)
                deps.tasks.put(fresh)
                return fresh
            except TaskExists:  # another caller wrote it a moment ago
                task = deps.tasks.get(task_id)
        if task is not None and task.status in OPEN_TASK_STATUSES:
            return task
    fresh = make(str(uuid.uuid4()))  # a subject with that many ended tasks: as before, one of its own
    deps.tasks.put(fresh)
    return fresh


def kb_delete_task_id(kb_id: str, generation: int = 0) -> str:
    return generation_task_id(_KB_DELETE_TASK_IDS, kb_id, generation)


def kb_delete_task(deps: Dependencies, kb: KnowledgeBase) -> Task:
    """The knowledge base's open delete task (own_task), written before it is marked `deleting` unless
    there is one: a DELETE repeated finds it, and housekeeping re-sends it while it is open (its work marks
    the knowledge base `deleting` if the request died before)."""
    return own_task(
        deps,
        _KB_DELETE_TASK_IDS,
        kb.id,
        lambda task_id: Task(
            id=task_id, tenant_id=kb.tenant_id, kind=TaskKind.DELETE_KB, kb_id=kb.id, items=[]
        ),
    )


def open_kb_delete_task(deps: Dependencies, kb_id: str) -> Task | None:
    task = current_own_task(deps, _KB_DELETE_TASK_IDS, kb_id)
    return task if task is not None and task.status in OPEN_TASK_STATUSES else None


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


# ---------------------------------------------------------------- a document's own delete task
# (here, not in tasks.delete: housekeeping and recovery drive deletes without importing what deleting runs)

#: the namespace of a document's own delete task id (uuid5 of the knowledge id): a DELETE repeated finds it
_DELETE_TASK_IDS = uuid.UUID("5f0c4a52-3f36-4d37-9a39-6c1f0d2c8b41")


def delete_task_id(knowledge_id: str, generation: int = 0) -> str:
    return generation_task_id(_DELETE_TASK_IDS, knowledge_id, generation)


def own_delete_task(deps: Dependencies, knowledge: Knowledge) -> Task:
    """The document's own open delete task, written unless there is one (tasks `own_task`): one at a time
    per document, whoever asks (its DELETE, housekeeping, the local stack's recovery)."""
    return own_task(
        deps,
        _DELETE_TASK_IDS,
        knowledge.id,
        lambda task_id: Task(
            id=task_id,
            tenant_id=knowledge.tenant_id,
            kind=TaskKind.DELETE_KNOWLEDGE,
            kb_id=knowledge.kb_id,
            items=[knowledge.id],
        ),
    )


def own_delete_under_way(deps: Dependencies, knowledge: Knowledge) -> bool:
    """The document's own delete task is queued or running: housekeeping re-sends it while it makes no
    progress (and the local stack's snapshot restored its message), so driving the row again would only
    drive the delete twice. A row a batch, knowledge base or move task deletes has none until it is driven
    again (the row does not record that task)."""
    own = current_own_task(deps, _DELETE_TASK_IDS, knowledge.id)
    return own is not None and own.status in OPEN_TASK_STATUSES


def start_delete(deps: Dependencies, knowledge: Knowledge) -> Task:
    """DELETE /knowledge/{id}: the row turns `deleting` at once and one task deletes it. A document has one
    open task of its own at a time, whose id follows from its own: a DELETE of a document already being
    deleted answers that task while it runs and starts no other (DELETE_FROM: a no-op), and of two DELETEs
    at once the second answers the first's task. Either marks the row and sends the task again (both
    idempotent), so a DELETE repeated after one that failed between its writes finishes them. One being
    deleted by another task (a batch, its knowledge base's, a move's) gets its own on the first DELETE; the
    work is idempotent. Once that task ended with the row still there (an object that could not be
    deleted), a DELETE starts the next."""
    return start_deleting(deps, own_delete_task(deps, knowledge), [knowledge])


def redrive_delete(deps: Dependencies, knowledge: Knowledge) -> Task:
    """The recovery of a row left `deleting` with no own task under way: its own next one, sent."""
    return start_deleting(deps, own_delete_task(deps, knowledge), [])


def start_deleting(deps: Dependencies, task: Task, rows: Sequence[Knowledge]) -> Task:
    """After the task is written: the rows turn `deleting` at once (stages drop their queued work, search
    stops returning them) and the task is sent."""
    for row in rows:
        deps.knowledge.mark_deleting(row.id)
    deps.queue.send_raw(LIFECYCLE_QUEUE, {"task_id": task.id})
    return task
