"""An event is never lost to a worker that dies between its write and its announcement, and never merged with
another change: the redelivered message that finds its write done announces it again under the same event id
(a repeat consumers and webhook deliveries drop), and a clone's copy made again is a new creation
(reviewer rev_hooks' findings 1 and 2)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryEventPublisher, MemoryTaskQueue
from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.commands import EditChunkRequest
from chalicelib.domain.errors import PermanentStageError, SpanErrorCode
from chalicelib.domain.events import Event
from chalicelib.domain.types import Chunk, KnowledgeBase, ParseStatus, TaskStatus, Tenant
from chalicelib.operations.chunks import edit_chunk
from chalicelib.operations.knowledge_changes import delete_knowledge

from .conftest import ScriptedReader, drain, upload
from .test_clone_racing_source_changes import ZEBRAS, _text_chunk
from .test_move_clone import TIDES, clone, completed, model, run_lifecycle  # noqa: F401
from .test_webhooks import Receiver, drain_webhooks, hook_on


class WorkerDied(Exception):
    """Stands for the function stopped mid-announcement (its timeout, out of memory)."""


def published(deps: Services, event_type: str) -> list[Event]:
    assert isinstance(deps.events, MemoryEventPublisher)
    return [e for e in deps.events.published if e.type.value == event_type]


def dies_announcing(deps: Services, monkeypatch: pytest.MonkeyPatch, event_type: str) -> None:
    """The first announcement of `event_type` dies before anything is published or sent."""
    real = deps.events.publish

    def publish(events: Sequence[Event]) -> None:
        if any(e.type.value == event_type for e in events):
            monkeypatch.undo()
            raise WorkerDied(event_type)
        real(events)

    monkeypatch.setattr(deps.events, "publish", publish)


def posted(receiver: Receiver) -> list[tuple[str, str]]:
    return [(json.loads(body)["type"], json.loads(body)["event_id"]) for _, body, _ in receiver.posts]


def test_a_clone_copy_made_again_is_a_new_creation_to_the_bus_and_the_webhook(
    deps: Services,
    tenant: Tenant,
    kb: KnowledgeBase,
    model: HashingEmbedding,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The source's chunk is edited mid-copy: the copy goes (Deleted) and is made again under its id."""
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    doc = completed(deps, kb, "tides.md", TIDES)
    chunk = _text_chunk(deps, doc.id)
    real = deps.chunks.replace_all

    def copy_writes_chunks(knowledge_id: str, chunks: Sequence[Chunk]) -> None:
        if knowledge_id != doc.id:
            monkeypatch.undo()
            edit_chunk(deps, tenant.id, doc.id, chunk.id, EditChunkRequest(content=ZEBRAS))
            time.sleep(0.002)  # rows keep their times to the millisecond: the next copy's is another
        real(knowledge_id, chunks)

    monkeypatch.setattr(deps.chunks, "replace_all", copy_writes_chunks)
    started = clone(deps, kb)
    target = deps.kbs.get(started["target_kb_id"])
    assert target is not None
    hook_on(deps, target, "Knowledge Created", "Knowledge Deleted", "Knowledge Completed")
    run_lifecycle(deps)
    drain_webhooks(deps)

    created = [e.event_id for e in published(deps, "Knowledge Created") if e.kb_id == target.id]
    assert len(created) == 2 and created[0] != created[1]
    assert [t for t, _ in posted(receiver)] == [
        "Knowledge Created",
        "Knowledge Deleted",
        "Knowledge Created",
        "Knowledge Completed",
    ]


def test_a_clone_copy_whose_creation_was_not_announced_is_announced_by_the_redelivery_under_its_id(
    deps: Services,
    kb: KnowledgeBase,
    model: HashingEmbedding,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    completed(deps, kb, "tides.md", TIDES)
    dies_announcing(deps, monkeypatch, "Knowledge Created")
    started = clone(deps, kb)
    run_lifecycle(deps)  # the first delivery dies after the copy's insert; SQS brings the task back

    task = deps.tasks.get(started["task_id"])
    assert task is not None and task.status == TaskStatus.COMPLETED, task and task.errors
    created = [e for e in published(deps, "Knowledge Created") if e.kb_id == started["target_kb_id"]]
    completions = [e for e in published(deps, "Knowledge Completed") if e.kb_id == started["target_kb_id"]]
    assert len(created) == 1 and len(completions) == 1


def test_a_clone_redelivered_after_its_copy_was_announced_announces_the_same_ids_again(
    deps: Services,
    kb: KnowledgeBase,
    model: HashingEmbedding,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The delivery dies saving the task's end: the copy made and announced (from the row as written), its
    item not saved. The redelivery finds the copy made and announces it again from the row as stored."""
    completed(deps, kb, "tides.md", TIDES)
    real = deps.tasks.save_progress

    def save_progress(task: Any) -> bool:
        if task.status != TaskStatus.RUNNING:
            monkeypatch.undo()
            raise WorkerDied("save_progress")
        return real(task)

    monkeypatch.setattr(deps.tasks, "save_progress", save_progress)
    started = clone(deps, kb)
    run_lifecycle(deps)

    task = deps.tasks.get(started["task_id"])
    assert task is not None and task.status == TaskStatus.COMPLETED and task.succeeded == 1
    for event_type in ("Knowledge Created", "Knowledge Completed"):
        events = [e for e in published(deps, event_type) if e.kb_id == started["target_kb_id"]]
        assert len(events) == 2 and len({e.event_id for e in events}) == 1, event_type


def test_a_delete_whose_worker_died_before_announcing_is_announced_by_the_redelivery(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """Rev_hooks' proof: the first send to the webhooks queue dies; the row must still be announced deleted."""
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    knowledge = upload(deps, kb)
    hook_on(deps, kb, "Knowledge Deleted", "Task Completed")
    real = queue.send_raw
    died: list[str] = []

    def send_raw(name: str, body: dict[str, Any], **kw: Any) -> None:
        if name == "webhooks" and not died:
            died.append(body["event"]["type"])
            raise WorkerDied(name)
        real(name, body, **kw)

    queue.send_raw = send_raw  # type: ignore[method-assign]
    delete_knowledge(deps, kb.tenant_id, knowledge.id)
    run_lifecycle(deps)
    drain_webhooks(deps)

    assert died == ["Knowledge Deleted"]
    assert deps.knowledge.get(knowledge.id) is None
    assert [t for t, _ in posted(receiver)] == ["Knowledge Deleted", "Task Completed"]
    deleted = published(deps, "Knowledge Deleted")
    assert len({e.event_id for e in deleted}) == 1  # the bus had it twice, as one event


def test_a_finished_task_whose_worker_died_before_announcing_is_announced_by_the_redelivery(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge = upload(deps, kb)
    dies_announcing(deps, monkeypatch, "Task Completed")
    task = delete_knowledge(deps, kb.tenant_id, knowledge.id)
    run_lifecycle(deps)  # the delivery that finished the task dies before it announces; SQS brings it back

    saved = deps.tasks.get(task.id)
    assert saved is not None and saved.status == TaskStatus.COMPLETED
    assert [e.detail["task_id"] for e in published(deps, "Task Completed")] == [task.id]


def test_a_failure_whose_worker_died_before_announcing_is_announced_by_the_redelivery(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps.replace_docreader(
        ScriptedReader(PermanentStageError("encrypted PDF", code=SpanErrorCode.UNSUPPORTED_TYPE))
    )
    knowledge = upload(deps, kb)
    dies_announcing(deps, monkeypatch, "Knowledge Failed")
    drain(deps)  # the permanent failure is written, the announcement dies; the redelivery only drops it

    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED
    [failed] = published(deps, "Knowledge Failed")
    assert failed.detail["error"] == {"code": SpanErrorCode.UNSUPPORTED_TYPE, "message": "encrypted PDF"}
    assert failed.detail["attempt"] == knowledge.attempt


def test_a_batch_reparse_whose_worker_died_before_announcing_a_start_announces_it_on_redelivery(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.commands import BatchReparseRequest
    from chalicelib.operations.knowledge_changes import batch_reparse

    doc = completed(deps, kb, "tides.md", TIDES)
    dies_announcing(deps, monkeypatch, "Knowledge Reparse Started")
    batch_reparse(deps, kb.tenant_id, BatchReparseRequest(kb_id=kb.id, ids=[doc.id]))
    run_lifecycle(deps)  # the reset is written, the announcement dies; the redelivery skips the reparse

    row = deps.knowledge.get(doc.id)
    assert row is not None and row.attempt == doc.attempt + 1  # reparsed once
    [started] = published(deps, "Knowledge Reparse Started")
    assert (started.detail["attempt"], started.detail["status"]) == (doc.attempt + 1, "pending")


def test_a_reparsing_move_whose_worker_died_before_announcing_the_start_announces_it_on_redelivery(
    deps: Services, tenant: Tenant, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from .test_move_clone import move, new_kb

    target = new_kb(deps, tenant, "target")
    doc = completed(deps, kb, "tides.md", TIDES)
    dies_announcing(deps, monkeypatch, "Knowledge Reparse Started")
    move(deps, kb, target, [doc.id], "reparse")
    run_lifecycle(deps)

    row = deps.knowledge.get(doc.id)
    assert row is not None and (row.kb_id, row.attempt) == (target.id, doc.attempt + 1)
    assert [e.kb_id for e in published(deps, "Knowledge Moved")] == [kb.id, target.id]
    [started] = published(deps, "Knowledge Reparse Started")
    assert (started.kb_id, started.detail["attempt"]) == (target.id, doc.attempt + 1)
