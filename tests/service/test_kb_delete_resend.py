"""A knowledge base's delete whose lifecycle message was never sent is finished: by the DELETE repeated, which
sends its task again under the same id, and, with no client's retry, by housekeeping's re-send of open tasks
that made no progress (tests/service/test_task_resend.py). The DELETE writes its task before it marks the
knowledge base, so a request that died between the two leaves an open task (whose work marks the knowledge
base itself), never a knowledge base `deleting` without one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import Conflict
from chalicelib.domain.types import KnowledgeBase, TaskKind, TaskStatus
from chalicelib.ports import ServiceUnreachable

from .conftest import drain, upload
from .test_move_clone import run_lifecycle

LATER = timedelta(hours=3)  # past the 2h10m threshold


class Died(Exception):
    """The request's Lambda ended here (a timeout, a crash)."""


def _dies(*args: Any, **kwargs: Any) -> None:
    raise Died


def _delete_unsent(deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue) -> None:
    from chalicelib.operations.knowledge_changes import delete_kb

    queue.make_unavailable("lifecycle")
    with pytest.raises(ServiceUnreachable):
        delete_kb(deps, kb.tenant_id, kb.id)
    queue.make_unavailable("lifecycle", False)
    assert deps.kbs.get(kb.id).status == "deleting"  # type: ignore[union-attr]
    assert not queue.waiting("lifecycle")


def test_the_delete_repeated_sends_the_same_task_again_and_finishes(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    from chalicelib.operations.knowledge_changes import delete_kb

    doc = upload(deps, kb)
    drain(deps)
    _delete_unsent(deps, kb, queue)
    first = delete_kb(deps, kb.tenant_id, kb.id)  # was 409 kb_deleting, and nothing drove the task
    again = delete_kb(deps, kb.tenant_id, kb.id)
    assert first.id == again.id and first.kind == TaskKind.DELETE_KB
    run_lifecycle(deps)
    assert deps.kbs.get(kb.id) is None and deps.knowledge.get(doc.id) is None
    assert deps.tasks.get(first.id).status == TaskStatus.COMPLETED  # type: ignore[union-attr]


def test_housekeeping_sends_again_a_delete_whose_message_was_never_sent(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    from chalicelib.stages import housekeeping
    from chalicelib.tasks import kb_delete_task_id

    doc = upload(deps, kb)
    drain(deps)
    _delete_unsent(deps, kb, queue)
    assert housekeeping.sweep(deps).tasks_resent == []  # before the threshold: it may be queued behind others
    assert housekeeping.sweep(deps, datetime.now(UTC) + LATER).tasks_resent == [kb_delete_task_id(kb.id)]
    assert housekeeping.sweep(deps, datetime.now(UTC) + LATER).tasks_resent == []  # once per threshold
    assert len(queue.waiting("lifecycle")) == 1
    run_lifecycle(deps)
    assert deps.kbs.get(kb.id) is None and deps.knowledge.get(doc.id) is None


@pytest.mark.parametrize("dies_at", ["the mark", "the send"])
def test_a_delete_whose_request_died_after_writing_its_task_is_finished_by_housekeeping(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch, dies_at: str
) -> None:
    from chalicelib.operations.knowledge_changes import delete_kb
    from chalicelib.stages import housekeeping
    from chalicelib.tasks import kb_delete_task_id

    doc = upload(deps, kb)
    drain(deps)
    if dies_at == "the mark":  # the task written, the knowledge base not yet marked
        monkeypatch.setattr(deps.kbs, "update", _dies)
    else:  # marked, the message not yet sent
        monkeypatch.setattr(queue, "send_raw", _dies)
    with pytest.raises(Died):
        delete_kb(deps, kb.tenant_id, kb.id)
    monkeypatch.undo()
    task = deps.tasks.get(kb_delete_task_id(kb.id))
    assert task is not None and task.status == TaskStatus.QUEUED and not queue.waiting("lifecycle")
    expected = "active" if dies_at == "the mark" else "deleting"
    assert deps.kbs.get(kb.id).status == expected  # type: ignore[union-attr]

    assert housekeeping.sweep(deps, datetime.now(UTC) + LATER).tasks_resent == [task.id]
    run_lifecycle(deps)
    assert deps.kbs.get(kb.id) is None and deps.knowledge.get(doc.id) is None
    assert deps.tasks.get(task.id).status == TaskStatus.COMPLETED  # type: ignore[union-attr]


def test_a_delete_still_working_is_not_sent_again(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    from chalicelib.operations.knowledge_changes import delete_kb
    from chalicelib.stages import housekeeping

    task = delete_kb(deps, kb.tenant_id, kb.id)
    assert len(queue.waiting("lifecycle")) == 1
    saved = deps.tasks.get(task.id)
    assert saved is not None
    saved.status = TaskStatus.RUNNING
    saved.updated_at = datetime.now(UTC) + LATER  # it saved progress after the cutoff
    deps.tasks.save_progress(saved)
    assert housekeeping.sweep(deps, datetime.now(UTC) + LATER).tasks_resent == []
    assert len(queue.waiting("lifecycle")) == 1


def test_a_delete_refused_as_the_knowledge_base_kept_changing_is_not_carried_out_later(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.operations.knowledge_changes import delete_kb
    from chalicelib.stages import housekeeping
    from chalicelib.tasks import kb_delete_task_id

    monkeypatch.setattr(deps.kbs, "update", lambda changed: None)  # every mark loses its race
    with pytest.raises(Conflict):
        delete_kb(deps, kb.tenant_id, kb.id)
    monkeypatch.undo()
    task = deps.tasks.get(kb_delete_task_id(kb.id))
    assert task is not None and task.status == TaskStatus.FAILED
    assert housekeeping.sweep(deps, datetime.now(UTC) + LATER).tasks_resent == []
    assert deps.kbs.get(kb.id).status == "active"  # type: ignore[union-attr]
    assert not queue.waiting("lifecycle")
    # a DELETE made again starts a fresh task
    again = delete_kb(deps, kb.tenant_id, kb.id)
    assert again.id != task.id
    run_lifecycle(deps)
    assert deps.kbs.get(kb.id) is None


def _open_kb_deletes(deps: Services, kb: KnowledgeBase) -> list[str]:
    rows = deps.tasks._rows.values()  # type: ignore[attr-defined]
    return [
        t.id
        for t in rows
        if t.kind == TaskKind.DELETE_KB
        and t.kb_id == kb.id
        and t.status in (TaskStatus.QUEUED, TaskStatus.RUNNING)
    ]


def test_a_refused_delete_closing_the_task_a_second_delete_answered_has_the_next_one_sent(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev_alo2 2: request A (refused, 409) read the knowledge base active, then B marked it and answered
    the same task, then A failed that task: `deleting` with no open task, and nothing to drive it."""
    from chalicelib.operations import knowledge_changes
    from chalicelib.operations.knowledge_changes import delete_kb

    doc = upload(deps, kb)
    drain(deps)
    real_update, real_get_task = deps.kbs.update, deps.tasks.get
    real_close = knowledge_changes._close_unmarked_kb_delete
    closing: list[bool] = []
    monkeypatch.setattr(deps.kbs, "update", lambda changed: None)  # request A loses every mark

    def close(deps_: Any, kb_id: str) -> None:
        closing.append(True)
        real_close(deps_, kb_id)

    def get_task(task_id: str) -> Any:
        if closing == [True]:  # A's close read the knowledge base (active); B's DELETE marks it now
            closing.append(True)
            monkeypatch.setattr(deps.kbs, "update", real_update)
            delete_kb(deps, kb.tenant_id, kb.id)
        return real_get_task(task_id)

    monkeypatch.setattr(knowledge_changes, "_close_unmarked_kb_delete", close)
    monkeypatch.setattr(deps.tasks, "get", get_task)
    with pytest.raises(Conflict):
        delete_kb(deps, kb.tenant_id, kb.id)
    monkeypatch.undo()
    assert len(_open_kb_deletes(deps, kb)) == 1
    run_lifecycle(deps)
    assert deps.kbs.get(kb.id) is None and deps.knowledge.get(doc.id) is None


def test_a_delete_whose_task_a_refused_delete_closed_before_its_mark_sends_the_next_one(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev_alo2 2, the other order: B got the open task, A (refused) closed it and found the knowledge base
    still active, then B's mark landed. B reads the task after its mark and sends the next one."""
    from chalicelib.operations.knowledge_changes import delete_kb

    doc = upload(deps, kb)
    drain(deps)
    real_update = deps.kbs.update

    def mark_after_a_refused_delete(changed: Any) -> Any:
        monkeypatch.setattr(deps.kbs, "update", lambda _: None)  # request A loses every mark
        with pytest.raises(Conflict):
            delete_kb(deps, kb.tenant_id, kb.id)
        monkeypatch.setattr(deps.kbs, "update", real_update)
        return real_update(changed)

    monkeypatch.setattr(deps.kbs, "update", mark_after_a_refused_delete)
    answered = delete_kb(deps, kb.tenant_id, kb.id)
    monkeypatch.undo()
    assert answered.status == TaskStatus.QUEUED and _open_kb_deletes(deps, kb) == [answered.id]
    run_lifecycle(deps)
    assert deps.kbs.get(kb.id) is None and deps.knowledge.get(doc.id) is None


def test_deletes_repeated_after_a_refused_one_answer_one_task(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev_alo2 3: once the first (deterministic) task had ended, every DELETE wrote a uuid4 task of its own,
    each re-sent by housekeeping and each announcing its end."""
    from chalicelib.operations.knowledge_changes import delete_kb

    monkeypatch.setattr(deps.kbs, "update", lambda changed: None)
    with pytest.raises(Conflict):
        delete_kb(deps, kb.tenant_id, kb.id)
    monkeypatch.undo()
    answered = {delete_kb(deps, kb.tenant_id, kb.id).id for _ in range(3)}  # a client's retries
    assert len(answered) == 1 and _open_kb_deletes(deps, kb) == sorted(answered)
    run_lifecycle(deps)
    assert deps.kbs.get(kb.id) is None


def test_a_documents_deletes_repeated_after_its_task_ended_answer_one_task(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """rev_alo2 3, the same get-or-create for a document's own delete task (tasks/delete.py)."""
    from dataclasses import replace

    from chalicelib.operations.knowledge_changes import delete_knowledge

    doc = upload(deps, kb)
    drain(deps)
    first = delete_knowledge(deps, kb.tenant_id, doc.id)
    # it ended with the row still there (an object that could not be deleted), its message consumed
    assert deps.tasks.save_progress(replace(first, status=TaskStatus.FAILED, done=1, failed=1))
    queue.purge("lifecycle")
    answered = {delete_knowledge(deps, kb.tenant_id, doc.id).id for _ in range(3)}
    assert len(answered) == 1 and first.id not in answered
    rows = deps.tasks._rows.values()  # type: ignore[attr-defined]
    assert len([t for t in rows if doc.id in t.items]) == 2
    run_lifecycle(deps)
    assert deps.knowledge.get(doc.id) is None


def test_a_refused_delete_does_not_fail_the_task_a_worker_began_meanwhile(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused DELETE closes its task only while it is still queued: one read queued that a worker began
    before the close is left to that worker (it was failed over it: found by a review)."""
    from chalicelib.operations import knowledge_changes
    from chalicelib.tasks import kb_delete_task_id, open_kb_delete_task

    read_queued: list[Any] = []

    def worker_begins_after_the_read(deps_: Any, kb_id: str) -> Any:
        task = open_kb_delete_task(deps_, kb_id)
        if task is not None and task.status == TaskStatus.QUEUED:
            read_queued.append(task)
            began = deps_.tasks.get(task.id)
            began.status = TaskStatus.RUNNING
            assert deps_.tasks.save_progress(began)
        return task

    monkeypatch.setattr(deps.kbs, "update", lambda changed: None)  # every mark loses its race
    monkeypatch.setattr(knowledge_changes, "open_kb_delete_task", worker_begins_after_the_read)
    with pytest.raises(Conflict):
        knowledge_changes.delete_kb(deps, kb.tenant_id, kb.id)
    assert read_queued
    task = deps.tasks.get(kb_delete_task_id(kb.id))
    assert task is not None and task.status == TaskStatus.RUNNING
