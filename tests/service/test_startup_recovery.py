"""The local stack's recovery on start: a delete whose own task is still queued (the snapshot put its message
back) is not driven a second time; one whose own task ended, or deleted by a batch task, is."""

from __future__ import annotations

from dataclasses import replace

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, TaskStatus
from chalicelib.operations.recovery import recover_after_restart
from chalicelib.tasks import delete_task_id, start_delete

from .conftest import upload


def test_a_delete_whose_own_task_is_queued_gets_no_second_task(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    doc = upload(deps, kb)
    start_delete(deps, doc)
    assert queue.bodies("lifecycle") == [{"task_id": delete_task_id(doc.id)}]

    assert recover_after_restart(deps).deletes_redriven == []
    assert queue.bodies("lifecycle") == [{"task_id": delete_task_id(doc.id)}]


def test_a_delete_whose_own_task_is_running_gets_no_second_task(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    doc = upload(deps, kb)
    task = start_delete(deps, doc)
    assert deps.tasks.save_progress(replace(task, status=TaskStatus.RUNNING))

    assert recover_after_restart(deps).deletes_redriven == []
    assert len(queue.waiting("lifecycle")) == 1


def test_a_delete_whose_own_task_ended_is_driven_again(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    doc = upload(deps, kb)
    task = start_delete(deps, doc)
    # it ended with the row still there (an object that could not be deleted), its message consumed
    assert deps.tasks.save_progress(replace(task, status=TaskStatus.FAILED, done=1, failed=1))
    queue.receive("lifecycle")

    assert recover_after_restart(deps).deletes_redriven == [doc.id]
    (body,) = queue.bodies("lifecycle")
    assert body["task_id"] != delete_task_id(doc.id)
    redriven = deps.tasks.get(body["task_id"])
    assert redriven is not None and redriven.items == [doc.id]


def test_a_delete_by_a_batch_task_is_driven_again_as_before(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """Its row records no task to look at: it is driven again, as it always was."""
    from chalicelib.commands import BatchDeleteRequest
    from chalicelib.operations.knowledge_changes import batch_delete

    docs = [upload(deps, kb, f"d{n}.md", f"# D{n}\n\nEntry {n}.\n".encode()) for n in range(2)]
    batch_delete(deps, kb.tenant_id, BatchDeleteRequest(kb_id=kb.id, ids=[d.id for d in docs]))

    assert sorted(recover_after_restart(deps).deletes_redriven) == sorted(d.id for d in docs)
    assert len(queue.waiting("lifecycle")) == 1 + 2
