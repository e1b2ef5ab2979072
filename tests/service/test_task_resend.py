"""A task of any kind whose lifecycle message was lost (a send that failed, a request that died after writing
the task) no longer stays `queued` for good: housekeeping sends again the open tasks that saved no progress
for the threshold, claiming each first (two sweeps send it once), and fails one sent 3 times without
progress, with its reason."""

from __future__ import annotations

import time
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

    def claim_after_another_sweep(task_id: str, cutoff_iso: str, now_iso: str) -> int | None:
        if not other:  # the other sweep read the same stale task, and claims it first
            monkeypatch.setattr(deps.tasks, "claim_stale", claim)
            other.append(housekeeping.sweep(deps, later))
        return claim(task_id, cutoff_iso, now_iso)

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


def test_a_re_send_leaves_the_tasks_progress_time_so_a_dead_re_embed_holds_nothing(
    deps: Services, tenant: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev_alo2 1: the claim wrote its time into updated_at, which `reembed_running` reads as progress, so
    each re-send of a dead-lettered re-embed held its knowledge base (409 reembed_running) a threshold more."""
    from chalicelib.adapters.models.hashing import HashingEmbedding
    from chalicelib.stages import housekeeping
    from chalicelib.tasks.reembed import reembed_running

    from .test_move_clone import CRANES, TIDES, completed, move, new_kb
    from .test_reembed_dead import NEW, age, dead_lettered_half_way

    deps._embedders[NEW] = HashingEmbedding(32)
    source, target = new_kb(deps, tenant, "harbour"), new_kb(deps, tenant, "archive")
    tides = completed(deps, source, "tides.md", TIDES)
    completed(deps, source, "cranes.md", CRANES)
    dead = dead_lettered_half_way(deps, source, monkeypatch)
    age(deps, dead, deps.settings.stale_after_seconds + 60)
    progress = deps.tasks.get(dead.id).updated_at  # type: ignore[union-attr]

    assert housekeeping.sweep(deps).tasks_resent == [dead.id]
    assert deps.tasks.get(dead.id).updated_at == progress  # type: ignore[union-attr]  # GET /tasks too
    assert housekeeping.sweep(deps).tasks_resent == []  # its wait restarted all the same
    assert not reembed_running(deps, deps.kbs.get(source.id))  # type: ignore[arg-type]
    move(deps, source, target, [tides.id], "reuse_vectors")  # not 409 reembed_running


def test_a_lost_document_delete_is_driven_by_its_own_task_alone(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """rev_alo2 4: one sweep re-sent the document's own open delete task and wrote a fresh one beside it, and
    each threshold added another. Now the row waits for its own task while that is open; once it was given
    up, the row's next own task drives it: one open task, one message per sweep at most."""
    from chalicelib.operations.knowledge_changes import delete_knowledge
    from chalicelib.stages import housekeeping
    from chalicelib.tasks import delete_task_id, deliver_again

    doc = upload(deps, kb)
    drain(deps)
    _unsent(queue, lambda: delete_knowledge(deps, kb.tenant_id, doc.id))
    now = datetime.now(UTC)
    report = housekeeping.sweep(deps, now + LATER)
    assert report.deletes_redriven == [] and report.tasks_resent == [delete_task_id(doc.id)]
    for _ in range(housekeeping.MAX_TASK_RESENDS + 3):  # a poison delete: every send lost
        # one task sent (the test's clock, hours ahead, may send a task it just wrote a second time)
        assert len({str(body["task_id"]) for body in queue.bodies("lifecycle")}) <= 1
        queue.purge("lifecycle")
        now += LATER
        housekeeping.sweep(deps, now)
        tasks = [t for t in deps.tasks._rows.values() if doc.id in t.items]  # type: ignore[attr-defined]
        assert len([t for t in tasks if t.status in (TaskStatus.QUEUED, TaskStatus.RUNNING)]) <= 1
    assert len(tasks) == 2  # the first given up, the next one its own too
    (open_one,) = [t for t in tasks if t.status == TaskStatus.QUEUED]
    assert open_one.id == delete_task_id(doc.id, 1)
    deliver_again(deps, open_one.id)  # a send that is not lost
    run_lifecycle(deps)
    assert deps.knowledge.get(doc.id) is None


def test_an_faq_import_given_up_ends_as_its_own_failures_do(
    deps: Services, faq_kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """rev_alo2 5: housekeeping failed an FAQ import itself, past the import's own end: no last result, the
    source and plan objects left, errors under "task". Now its worker is sent the give-up and ends it."""
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import LEASE_SECONDS, start_import
    from chalicelib.stages import housekeeping

    from .test_faq import drain as drain_imports
    from .test_faq import entry

    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=[entry("ok")]))
    queue.purge("faq-import")  # its message lost (the request died after the put, or a killed last try)
    now = datetime.now(UTC)
    for _ in range(housekeeping.MAX_TASK_RESENDS):
        now += LATER
        assert housekeeping.sweep(deps, now).tasks_resent == [task.id]
        queue.purge("faq-import")  # each re-send lost too
    report = housekeeping.sweep(deps, now + LATER)
    assert report.tasks_failed == [task.id]
    assert queue.bodies("faq-import") == [{"task_id": task.id, "give_up": True}]
    drain_imports(deps)

    ended = deps.tasks.get(task.id)
    assert ended is not None and ended.status == TaskStatus.FAILED
    assert list(ended.errors) == ["import"] and "given up" in ended.errors["import"]
    assert ended.progress["status"] == "failed"
    last = deps.faq.get_last_import(faq_kb.id)
    assert last is not None and last["task_id"] == task.id and last["status"] == "failed"
    assert not deps.inbox.exists(str(ended.params["source"]))
    assert deps.faq.acquire_lease(faq_kb.id, "another-import", time.time(), LEASE_SECONDS) is None
