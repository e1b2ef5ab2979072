"""A whole-knowledge-base task's item ids outgrow one DynamoDB item (400 KB): the task repo pages them
(moto enforces the item size as DynamoDB does)."""

from __future__ import annotations

import uuid

import pytest

from chalicelib.adapters.dynamo.tasks import ITEMS_PER_PAGE, DynamoTaskRepo
from chalicelib.bootstrap import Services
from chalicelib.domain.types import Task, TaskKind, TaskStatus
from chalicelib.ports import TaskExists


def _ids(n: int) -> list[str]:
    return [f"copy:{uuid.uuid4()}" for _ in range(n)]


def test_a_task_of_twenty_thousand_items_saves_and_reads_back_whole(module_services: Services) -> None:
    tasks = module_services.tasks
    assert isinstance(tasks, DynamoTaskRepo)
    task = Task(id=str(uuid.uuid4()), tenant_id="t1", kind=TaskKind.CLONE_KB, kb_id="kb", items=_ids(10))
    tasks.put(task)
    for _ in range(4):  # a clone appends its copies as it goes, saving after each batch
        task.items += _ids(5_000)
        task.done = len(task.items) - 3
        task.status = TaskStatus.RUNNING
        assert tasks.save_progress(task)
    again = DynamoTaskRepo.__new__(DynamoTaskRepo)  # another container: nothing cached
    again.model, again._written = tasks.model, set()
    stored = again.get(task.id)
    assert stored is not None and stored.items == task.items and stored.done == task.done
    assert len(task.items) == 20_010 > 20 * ITEMS_PER_PAGE


def test_a_worker_behind_that_paged_its_ids_differently_leaves_the_saved_task_whole(
    module_services: Services,
) -> None:
    tasks = module_services.tasks
    assert isinstance(tasks, DynamoTaskRepo)
    start = _ids(ITEMS_PER_PAGE - 10)
    task = Task(id=str(uuid.uuid4()), tenant_id="t1", kind=TaskKind.DELETE_KB, kb_id="kb", items=list(start))
    tasks.put(task)
    ahead = Task(**{**task.__dict__, "items": [*start, *_ids(30)], "done": 25})
    behind = Task(**{**task.__dict__, "items": [*start, *_ids(20)], "done": 5})
    assert tasks.save_progress(ahead)
    assert not tasks.save_progress(behind)  # its full page holds other ids: written beside, never over
    stored = tasks.get(task.id)
    assert stored is not None and stored.items == ahead.items and stored.done == 25


def test_a_task_id_written_already_is_refused_as_task_exists(module_services: Services) -> None:
    tasks = module_services.tasks
    task = Task(id=str(uuid.uuid4()), tenant_id="t1", kind=TaskKind.DELETE_KNOWLEDGE, kb_id="kb", items=["k"])
    tasks.put(task)
    with pytest.raises(TaskExists):  # a document's own delete task, written by a concurrent DELETE
        tasks.put(Task(**{**task.__dict__, "items": ["other"]}))
    stored = tasks.get(task.id)
    assert stored is not None and stored.items == ["k"]
