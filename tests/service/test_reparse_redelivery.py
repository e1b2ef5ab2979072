"""A reparse task whose delivery fails on an item with a transient error: its progress is saved every
SAVE_EVERY items, so the redelivery starts again from the last save. The items it reparsed before the error
are not reparsed again (a reviewer's proof: each went one more attempt, its running attempt thrown away and
paid for twice, `reparse_started` announced twice): a batch reparse records its items' attempts before the
first reparse; a sweep (a knowledge base's reparse, retry-failed) skips a row whose attempt began since the
task was made."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import PermanentStageError
from chalicelib.domain.events import EventType
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus, TaskKind, TaskStatus
from chalicelib.tasks import new_task, start_task

from .conftest import ScriptedReader, deliver, drain, upload

STARTED = EventType.KNOWLEDGE_REPARSE_STARTED.value


def _documents(deps: Services, kb: KnowledgeBase, n: int = 4) -> list[Knowledge]:
    docs = [
        upload(deps, kb, f"n{i}.md", f"# Doc {i}\n\nText number {i} about lamps.\n".encode())
        for i in range(n)
    ]
    drain(deps)
    assert all(_row(deps, d).attempt == 1 for d in docs)
    return docs


def _started_ids(deps: Services, doc: Knowledge) -> set[str]:
    return {
        e.event_id
        for e in deps.events.published  # type: ignore[attr-defined]
        if e.type.value == STARTED and e.detail["knowledge_id"] == doc.id
    }


def _row(deps: Services, doc: Knowledge) -> Knowledge:
    row = deps.knowledge.get(doc.id)
    assert row is not None
    return row


def _throttled_once_on_the_last(monkeypatch: pytest.MonkeyPatch, n: int) -> list[str]:
    """The reparse of the n-th distinct document met first fails once with an error that is no AppError (the
    store throttled): the task's message is retried. Returns the documents reparse was called for."""
    from chalicelib.tasks import reparse as reparse_module

    real = reparse_module.reparse
    calls: list[str] = []

    def flaky(deps: Any, tenant_id: str, knowledge_id: str, request: Any) -> Any:
        first = knowledge_id not in calls
        calls.append(knowledge_id)
        if first and len(set(calls)) == n:
            raise RuntimeError("DynamoDB throttled")
        return real(deps, tenant_id, knowledge_id, request)

    monkeypatch.setattr(reparse_module, "reparse", flaky)
    return calls


def _run_task(deps: Services, queue: MemoryTaskQueue, *, pipeline_between: bool) -> None:
    """Every delivery of the task; with `pipeline_between`, the reparsed documents run between them (their new
    attempts begin, or fail, before the redelivery comes)."""
    from chalicelib.stages import lifecycle

    for _ in range(20):
        if not queue.waiting("lifecycle"):
            return
        queue.deliver("lifecycle", lifecycle.handle, deps)
        if pipeline_between:
            drain(deps)
    raise AssertionError("the task never ended")


@pytest.mark.parametrize("pipeline_between", [False, True])
def test_a_retried_batch_reparse_reparses_each_document_once(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    monkeypatch: pytest.MonkeyPatch,
    pipeline_between: bool,
) -> None:
    from chalicelib.commands import BatchReparseRequest
    from chalicelib.operations.knowledge_changes import batch_reparse

    docs = _documents(deps, kb)
    task = batch_reparse(deps, kb.tenant_id, BatchReparseRequest(kb_id=kb.id, ids=[d.id for d in docs]))
    calls = _throttled_once_on_the_last(monkeypatch, len(docs))
    _run_task(deps, queue, pipeline_between=pipeline_between)
    assert [_row(deps, d).attempt for d in docs] == [2, 2, 2, 2]
    # each started once: the redelivery that skips one it reparsed tells its start again, as the same event
    assert all(len(_started_ids(deps, d)) == 1 for d in docs)
    assert calls.count(docs[-1].id) == 2  # the one that failed is tried again
    done = deps.tasks.get(task.id)
    assert done is not None and done.status == TaskStatus.COMPLETED
    assert (done.done, done.succeeded, done.failed) == (4, 4, 0)


def test_a_batch_reparse_still_reparses_a_document_reparsed_before_its_first_delivery(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """The attempts are those the documents have when the task begins: a reparse between the request and the
    task's first delivery does not stand for the task's (it may carry other settings)."""
    from chalicelib.commands import BatchReparseRequest, ReparseRequest
    from chalicelib.operations.knowledge_changes import batch_reparse
    from chalicelib.tasks.reparse import reparse

    docs = _documents(deps, kb, 2)
    batch_reparse(deps, kb.tenant_id, BatchReparseRequest(kb_id=kb.id, ids=[d.id for d in docs]))
    reparse(deps, kb.tenant_id, docs[0].id, ReparseRequest())
    _run_task(deps, queue, pipeline_between=False)
    assert [_row(deps, d).attempt for d in docs] == [3, 2]


@pytest.mark.parametrize("pipeline_between", [False, True])
def test_a_retried_reparse_of_a_knowledge_base_reparses_each_document_once(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    monkeypatch: pytest.MonkeyPatch,
    pipeline_between: bool,
) -> None:
    docs = _documents(deps, kb)
    task = start_task(deps, new_task(kb.tenant_id, TaskKind.REPARSE_KB, kb.id, []))  # a settings change's
    _throttled_once_on_the_last(monkeypatch, len(docs))
    _run_task(deps, queue, pipeline_between=pipeline_between)
    assert [_row(deps, d).attempt for d in docs] == [2, 2, 2, 2]
    assert all(deps.events.types_of(d.id).count(STARTED) == 1 for d in docs)
    done = deps.tasks.get(task.id)
    assert done is not None and done.status == TaskStatus.COMPLETED and done.succeeded == 4


def test_a_knowledge_bases_reparse_still_takes_a_document_written_since_that_began_before(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """A document in flight at the change (its docreader read the old settings) is reparsed, however often its
    row is written after the change."""
    doc = upload(deps, kb)
    deliver(deps, "docreader")  # begun: its parse read the settings of before
    start_task(deps, new_task(kb.tenant_id, TaskKind.REPARSE_KB, kb.id, []))
    deliver(deps, "chunking")  # the row is written after the change
    assert _row(deps, doc).parse_status == ParseStatus.PROCESSING
    _run_task(deps, queue, pipeline_between=False)
    assert _row(deps, doc).attempt == 2


def test_a_retried_retry_failed_retries_each_failed_document_once(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The documents retried fail again at once: the redelivery's sweep finds them failed again."""
    from chalicelib.operations.knowledge_changes import retry_failed

    deps.replace_docreader(ScriptedReader(PermanentStageError("no text in this file")))
    docs = [upload(deps, kb, f"d{i}.md", f"# doc {i}\n\nbody {i}\n".encode()) for i in range(4)]
    drain(deps)
    assert all(_row(deps, d).parse_status == ParseStatus.FAILED for d in docs)
    retry_failed(deps, kb.tenant_id, kb.id)
    _throttled_once_on_the_last(monkeypatch, len(docs))
    _run_task(deps, queue, pipeline_between=True)
    assert [_row(deps, d).attempt for d in docs] == [2, 2, 2, 2]
