"""A task's progress is saved only while it is open (helper alo3, item 2 of the at-least-once holes).

`save_progress` was conditional on `done` only: two first deliveries of a batch reparse (SQS handing its
message over twice) both saved the items' attempts at done 0 and both reparsed the first item, the second
throwing away the attempt the first had just begun (and paying for it again); and a delivery still working on
a task that ended meanwhile (failed by housekeeping) wrote its progress over the end, the task open again and
announced a second time with another outcome."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import BatchReparseRequest
from chalicelib.domain.types import Knowledge, KnowledgeBase, TaskStatus
from chalicelib.operations.knowledge_changes import batch_reparse
from chalicelib.services.events import task_finished
from chalicelib.stages import lifecycle

from .test_event_redelivery import published
from .test_move_clone import TIDES, completed, run_lifecycle


def _two_documents(deps: Services, kb: KnowledgeBase) -> list[Knowledge]:
    return [completed(deps, kb, "tides.md", TIDES), completed(deps, kb, "waves.md", TIDES + b"\nWaves.\n")]


def test_two_first_deliveries_of_a_batch_reparse_reparse_its_first_item_once(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two deliveries of the task's one message at the same moment (threads on the fakes): both read it
    queued and read its items' attempts; then both save them and both reach the first item's reparse before
    either resets the row. Now the second save is refused (the task is no longer queued) and its delivery
    stops, so the row is reparsed once (attempt 2, not 3)."""
    docs = _two_documents(deps, kb)
    task = batch_reparse(deps, kb.tenant_id, BatchReparseRequest(kb_id=kb.id, ids=[d.id for d in docs]))
    both_read = threading.Barrier(2, timeout=10)
    arrived, ended = [0], [0]
    gate = threading.Condition()

    real_get_many = deps.knowledge.get_many

    def get_many(ids: Any, **kwargs: Any) -> Any:
        both_read.wait()  # both deliveries read the task queued, with no attempts recorded
        return real_get_many(ids, **kwargs)

    real_reset = deps.knowledge.reset_for_reparse

    def reset_for_reparse(knowledge_id: str, *args: Any, **kwargs: Any) -> Any:
        if knowledge_id == docs[0].id:  # the first item: both read its attempt before either resets it
            with gate:
                arrived[0] += 1
                gate.notify_all()
                assert gate.wait_for(lambda: arrived[0] == 2 or ended[0] > 0, timeout=10)
        return real_reset(knowledge_id, *args, **kwargs)

    monkeypatch.setattr(deps.knowledge, "get_many", get_many)
    monkeypatch.setattr(deps.knowledge, "reset_for_reparse", reset_for_reparse)
    errors: list[BaseException] = []

    def delivery() -> None:
        try:
            lifecycle.run(deps, task.id)
        except BaseException as error:  # raised again on the test's thread
            errors.append(error)
        finally:
            with gate:
                ended[0] += 1
                gate.notify_all()

    workers = [threading.Thread(target=delivery) for _ in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(20)
    assert errors == [] and not any(w.is_alive() for w in workers)

    rows = [deps.knowledge.get(d.id) for d in docs]
    assert [row.attempt if row else None for row in rows] == [2, 2]
    stored = deps.tasks.get(task.id)
    assert stored is not None and stored.status == TaskStatus.COMPLETED and stored.done == 2
    assert stored.failed == 0, stored.errors


def test_a_delivery_still_working_when_its_task_is_failed_leaves_the_failure_as_it_is(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Housekeeping gives the task up (failed, announced) while a slow delivery is on its first item: that
    delivery's saves are refused and it stops. It used to save its progress over the failure (the task
    `running` again, back in the open index) and finish it `completed`, announced after `Task Failed`."""
    docs = _two_documents(deps, kb)
    task = batch_reparse(deps, kb.tenant_id, BatchReparseRequest(kb_id=kb.id, ids=[d.id for d in docs]))
    real_reset = deps.knowledge.reset_for_reparse

    def reset_for_reparse(knowledge_id: str, *args: Any, **kwargs: Any) -> Any:
        if knowledge_id == docs[0].id:  # housekeeping's give-up lands while the item is reparsed
            stored = deps.tasks.get(task.id)
            assert stored is not None
            given_up = replace(stored, status=TaskStatus.FAILED, errors={"task": "given up"})
            assert deps.tasks.save_progress(given_up)
            task_finished(deps, given_up)
        return real_reset(knowledge_id, *args, **kwargs)

    monkeypatch.setattr(deps.knowledge, "reset_for_reparse", reset_for_reparse)
    run_lifecycle(deps)

    stored = deps.tasks.get(task.id)
    assert stored is not None and stored.status == TaskStatus.FAILED and stored.done == 0
    assert [e.detail["status"] for e in published(deps, "Task Failed")] == ["failed"]
    assert published(deps, "Task Completed") == []
    assert deps.tasks.stale_open("9999", 10) == []  # not open again: housekeeping never re-sends it
    second = deps.knowledge.get(docs[1].id)
    assert second is not None and second.attempt == 1  # the delivery stopped at the refused save


def test_a_task_that_ended_refuses_every_save_and_one_begun_refuses_a_second_beginning(
    deps: Services, kb: KnowledgeBase
) -> None:
    """The fake's side of the condition (the DynamoDB adapter's is tests/e2e/test_task_saves_while_open.py)."""
    docs = _two_documents(deps, kb)
    task = batch_reparse(deps, kb.tenant_id, BatchReparseRequest(kb_id=kb.id, ids=[d.id for d in docs]))
    queued_only = frozenset({TaskStatus.QUEUED})
    assert deps.tasks.save_progress(replace(task, status=TaskStatus.RUNNING), only_from=queued_only)
    assert not deps.tasks.save_progress(replace(task, status=TaskStatus.RUNNING), only_from=queued_only)
    assert deps.tasks.save_progress(replace(task, status=TaskStatus.RUNNING, done=1))
    assert deps.tasks.save_progress(replace(task, status=TaskStatus.COMPLETED, done=2))
    for late in (TaskStatus.RUNNING, TaskStatus.FAILED, TaskStatus.COMPLETED):
        assert not deps.tasks.save_progress(replace(task, status=late, done=2))
    stored = deps.tasks.get(task.id)
    assert stored is not None and stored.status == TaskStatus.COMPLETED
