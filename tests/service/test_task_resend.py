"""A task of any kind whose lifecycle message was lost (a send that failed, a request that died after writing
the task) no longer stays `queued` for good: housekeeping sends again the open tasks that saved no progress
for the threshold, claiming each first (two sweeps send it once), and fails one sent 3 times without
progress, with its reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import BatchReparseRequest, CreateTagRequest
from chalicelib.domain.types import KnowledgeBase, Task, TaskKind, TaskStatus
from chalicelib.ports import ServiceUnreachable

from .conftest import drain, upload
from .test_move_clone import run_lifecycle

LATER = timedelta(hours=3)  # past the 2h10m threshold


def _unsent(queue: MemoryTaskQueue, start: Any) -> None:
    """`start` writes its task, and its send fails."""
    queue.make_unavailable("lifecycle")
    with pytest.raises(ServiceUnreachable):
        start()
    queue.make_unavailable("lifecycle", False)
    assert not queue.waiting("lifecycle")


def _only_task(deps: Services, kind: TaskKind) -> Task:
    found = [t for t in deps.tasks._rows.values() if t.kind == kind]  # type: ignore[attr-defined]
    assert len(found) == 1
    return found[0]


def test_a_tag_delete_and_a_batch_reparse_whose_sends_were_lost_are_sent_again_and_finish(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    from chalicelib.operations.knowledge_changes import batch_reparse
    from chalicelib.operations.tags import create_tag, delete_tag
    from chalicelib.stages import housekeeping

    doc = upload(deps, kb)
    drain(deps)
    tag = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="Red"))
    _unsent(queue, lambda: delete_tag(deps, kb.tenant_id, kb.id, tag.id))
    _unsent(queue, lambda: batch_reparse(deps, kb.tenant_id, BatchReparseRequest(kb_id=kb.id, ids=[doc.id])))
    untag, reparse = _only_task(deps, TaskKind.DELETE_TAG), _only_task(deps, TaskKind.REPARSE)

    assert housekeeping.sweep(deps).tasks_resent == []  # before the threshold: it may be queued behind others
    report = housekeeping.sweep(deps, datetime.now(UTC) + LATER)
    assert sorted(report.tasks_resent) == sorted([untag.id, reparse.id])
    assert sorted(queue.bodies("lifecycle"), key=str) == sorted(
        [{"task_id": untag.id}, {"task_id": reparse.id}], key=str
    )
    # its wait restarted: the next sweep does not send it again
    assert housekeeping.sweep(deps, datetime.now(UTC) + LATER).tasks_resent == []
    run_lifecycle(deps)
    drain(deps)
    assert deps.tasks.get(untag.id).status == TaskStatus.COMPLETED  # type: ignore[union-attr]
    assert deps.tasks.get(reparse.id).status == TaskStatus.COMPLETED  # type: ignore[union-attr]
    assert deps.tags.get(kb.id, tag.id) is None
    assert deps.knowledge.get(doc.id).attempt == 2  # type: ignore[union-attr]


def test_a_running_task_that_saves_progress_is_not_sent_again(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    from chalicelib.operations.knowledge_changes import retry_failed
    from chalicelib.stages import housekeeping

    task = retry_failed(deps, kb.tenant_id, kb.id)
    queue.purge("lifecycle")  # its worker holds the message while it runs
    running = deps.tasks.get(task.id)
    assert running is not None
    running.status = TaskStatus.RUNNING
    running.updated_at = datetime.now(UTC) + LATER - timedelta(minutes=1)  # its last save, a minute ago
    assert deps.tasks.save_progress(running)
    assert housekeeping.sweep(deps, datetime.now(UTC) + LATER).tasks_resent == []
    assert not queue.waiting("lifecycle")


def test_two_sweeps_at_once_send_a_task_once(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.operations.knowledge_changes import retry_failed
    from chalicelib.stages import housekeeping

    _unsent(queue, lambda: retry_failed(deps, kb.tenant_id, kb.id))
    claim = deps.tasks.claim_stale
    later = datetime.now(UTC) + LATER
    other: list[housekeeping.SweepReport] = []

    def claim_after_another_sweep(task: Task, now_iso: str) -> int | None:
        if not other:  # the other sweep read the same stale task, and claims it first
            monkeypatch.setattr(deps.tasks, "claim_stale", claim)
            other.append(housekeeping.sweep(deps, later))
        return claim(task, now_iso)

    monkeypatch.setattr(deps.tasks, "claim_stale", claim_after_another_sweep)
    first = housekeeping.sweep(deps, later)
    assert len(other[0].tasks_resent) == 1 and first.tasks_resent == []
    assert len(queue.waiting("lifecycle")) == 1


def test_a_task_sent_its_most_times_without_progress_is_failed_with_its_reason(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    from chalicelib.operations.tags import create_tag, delete_tag
    from chalicelib.stages import housekeeping

    tag = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="Red"))
    _unsent(queue, lambda: delete_tag(deps, kb.tenant_id, kb.id, tag.id))
    task = _only_task(deps, TaskKind.DELETE_TAG)
    now = datetime.now(UTC)
    for sweep in range(
        1, housekeeping.MAX_TASK_RESENDS + 1
    ):  # each re-send lost again (a poison message its worker never finishes)
        now += LATER
        assert housekeeping.sweep(deps, now).tasks_resent == [task.id], sweep
        queue.purge("lifecycle")
    now += LATER
    report = housekeeping.sweep(deps, now)
    assert report.tasks_resent == [] and report.tasks_failed == [task.id]
    failed = deps.tasks.get(task.id)
    assert failed is not None and failed.status == TaskStatus.FAILED
    assert f"no progress after {housekeeping.MAX_TASK_RESENDS} re-sends" in failed.errors["task"]
    assert not queue.waiting("lifecycle")
    # finished: never sent again
    assert housekeeping.sweep(deps, now + LATER).tasks_resent == []


def test_progress_between_re_sends_starts_the_count_again(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    from chalicelib.operations.tags import create_tag, delete_tag
    from chalicelib.stages import housekeeping

    tag = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="Red"))
    _unsent(queue, lambda: delete_tag(deps, kb.tenant_id, kb.id, tag.id))
    task = _only_task(deps, TaskKind.DELETE_TAG)
    now = datetime.now(UTC)
    for sweep in range(6):
        now += LATER
        assert housekeeping.sweep(deps, now).tasks_resent == [task.id], sweep
        queue.purge("lifecycle")
        if sweep == 2:  # a delivery that got somewhere, then lost its continuation
            alive = deps.tasks.get(task.id)
            assert alive is not None
            alive.status, alive.updated_at = TaskStatus.RUNNING, now
            assert deps.tasks.save_progress(alive)


def test_an_faq_import_is_sent_again_on_its_own_queue(deps: Services, queue: MemoryTaskQueue) -> None:
    from chalicelib.stages import housekeeping

    task = Task(id="an-import", tenant_id="a-tenant", kind=TaskKind.FAQ_IMPORT, kb_id="a-kb")
    deps.tasks.put(task)  # its request died before the send
    assert housekeeping.sweep(deps, datetime.now(UTC) + LATER).tasks_resent == [task.id]
    assert queue.bodies("faq-import") == [{"task_id": task.id}] and not queue.waiting("lifecycle")
