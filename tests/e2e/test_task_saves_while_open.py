"""The DynamoDB task adapter's side of "saved only while open" (helper alo3, item 2; the fakes' side and the
races it closes are tests/service/test_task_saves_while_open.py): the status is kept beside the JSON body so
a save can be conditional on it, and an item saved before it was kept is taken as open until its next save."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace

from chalicelib.adapters.dynamo.tasks import TASK_TTL_SECONDS, DynamoTaskRepo, open_shard, task_to_body
from chalicelib.bootstrap import Services
from chalicelib.domain.clock import to_iso
from chalicelib.domain.types import Task, TaskKind, TaskStatus

QUEUED_ONLY = frozenset({TaskStatus.QUEUED})


def _task() -> Task:
    return Task(id=str(uuid.uuid4()), tenant_id="t1", kind=TaskKind.REPARSE, kb_id="kb", items=["a", "b"])


def test_a_task_that_ended_refuses_a_late_save_and_one_begun_refuses_a_second_beginning(
    module_services: Services,
) -> None:
    tasks = module_services.tasks
    assert isinstance(tasks, DynamoTaskRepo)
    task = _task()
    tasks.put(task)
    running = replace(task, status=TaskStatus.RUNNING, params={"attempts": {"a": 1}})
    assert tasks.save_progress(running, only_from=QUEUED_ONLY)  # the first delivery begins it
    assert not tasks.save_progress(replace(running, params={"attempts": {"a": 2}}), only_from=QUEUED_ONLY)
    assert tasks.save_progress(replace(running, done=1))
    failed = replace(running, done=1, status=TaskStatus.FAILED, errors={"task": "given up"})
    assert tasks.save_progress(failed)  # housekeeping gives it up
    for late in (TaskStatus.RUNNING, TaskStatus.COMPLETED):  # a delivery still working on it
        assert not tasks.save_progress(replace(running, done=2, status=late))
    stored = tasks.get(task.id)
    assert stored is not None and stored.status == TaskStatus.FAILED and stored.done == 1
    assert stored.params == {"attempts": {"a": 1}}
    assert tasks.model.get(task.id, consistent_read=True).open_shard is None  # not back in the open index


def test_a_task_saved_before_its_status_was_kept_is_taken_as_open_and_then_kept(
    module_services: Services,
) -> None:
    tasks = module_services.tasks
    assert isinstance(tasks, DynamoTaskRepo)
    task = replace(_task(), status=TaskStatus.RUNNING)
    tasks.model(  # as the adapter wrote it before: no `status` beside the body
        task.id,
        tenant_id=task.tenant_id,
        done=0,
        body=task_to_body(task),
        expires_at=int(time.time()) + TASK_TTL_SECONDS,
        open_shard=open_shard(task),
        wait_from=to_iso(task.updated_at),
    ).save()
    assert tasks.save_progress(replace(task, done=1))
    assert tasks.model.get(task.id, consistent_read=True).status == TaskStatus.RUNNING.value
    assert tasks.save_progress(replace(task, done=2, status=TaskStatus.COMPLETED))
    assert not tasks.save_progress(replace(task, done=2))
