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
