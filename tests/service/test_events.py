"""Events on the fakes: each change of a document's, a task's or a summary's state is announced once, by
the write that decided it; a redelivered message that finds its write done announces it again, as the same
event (tests/service/test_event_redelivery.py)."""

from __future__ import annotations

from typing import Any

from chalicelib.adapters.memory import MemoryEventPublisher, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import PermanentStageError, SpanErrorCode
from chalicelib.domain.events import EVENT_DETAIL_SCHEMA
from chalicelib.domain.types import KnowledgeBase
from chalicelib.stages import enrichment, lifecycle, postprocess

from .conftest import ScriptedReader, deliver, drain, task_body, upload


def published(deps: Services) -> MemoryEventPublisher:
    assert isinstance(deps.events, MemoryEventPublisher)
    return deps.events


def run(deps: Services, name: str, handler: Any, body: dict[str, Any]) -> None:
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw(name, body)
    queue.deliver(name, handler, deps)


def test_one_document_announces_created_summary_and_one_completion(deps: Services, kb: KnowledgeBase) -> None:
    knowledge = upload(deps, kb)
    drain(deps)
    run(deps, "postprocess", postprocess.handle, task_body(knowledge, "plan"))
    summary = {"id": "summary", "kind": "summary", "id_set": ["summary"]}
    run(deps, "enrichment", enrichment.handle, task_body(knowledge, "sum", subtask=summary))
    run(deps, "enrichment", enrichment.handle, task_body(knowledge, "sum-again", subtask=summary))

    types = published(deps).types_of(knowledge.id)
    assert types[0] == "Knowledge Created"
    # the redelivered subtask finds the attempt completed and tells it again, as the same event
    completions = [e for e in published(deps).published if e.type.value == "Knowledge Completed"]
    assert len({e.event_id for e in completions}) == 1
    assert "Summary Completed" in types
    completed = next(e for e in published(deps).published if e.type.value == "Knowledge Completed")
    assert set(completed.detail) == set(EVENT_DETAIL_SCHEMA["required"])
    assert completed.detail["tenant_id"] == kb.tenant_id and completed.detail["kb_id"] == kb.id
    assert (completed.detail["status"], completed.detail["attempt"], completed.detail["error"]) == (
        "completed",
        1,
        None,
    )


def test_a_failure_is_announced_with_its_code_and_message(deps: Services, kb: KnowledgeBase) -> None:
    deps.replace_docreader(
        ScriptedReader(PermanentStageError("encrypted PDF", code=SpanErrorCode.UNSUPPORTED_TYPE))
    )
    knowledge = upload(deps, kb)
    deliver(deps, "docreader")
    assert published(deps).types_of(knowledge.id) == ["Knowledge Created", "Knowledge Failed"]
    failed = published(deps).published[-1]
    assert failed.detail["error"] == {"code": SpanErrorCode.UNSUPPORTED_TYPE, "message": "encrypted PDF"}


def test_cancel_and_delete_are_announced_and_the_delete_task_finishing_too(
    deps: Services, kb: KnowledgeBase
) -> None:
    from chalicelib.operations.knowledge_changes import cancel, delete_knowledge

    knowledge = upload(deps, kb)
    cancel(deps, kb.tenant_id, knowledge.id)
    cancel(deps, kb.tenant_id, knowledge.id)  # idempotent: nothing new
    task = delete_knowledge(deps, kb.tenant_id, knowledge.id)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    while queue.waiting("lifecycle"):
        queue.deliver("lifecycle", lifecycle.handle, deps)
    run(deps, "lifecycle", lifecycle.handle, {"task_id": task.id})  # a late copy: finished, says it again

    assert published(deps).types_of(knowledge.id) == [
        "Knowledge Created",
        "Knowledge Cancelled",
        "Knowledge Deleted",
    ]
    # the same event twice (the delivery that finished it may have died before it announced): one id
    assert published(deps).types_of(task.id) == ["Task Completed", "Task Completed"]
    assert len({e.event_id for e in published(deps).published if e.detail["task_id"] == task.id}) == 1
    done = published(deps).published[-1]
    assert (done.detail["task_kind"], done.detail["status"]) == ("delete_knowledge", "completed")


def test_the_state_machines_announcement_is_published_like_any_change(
    deps: Services, kb: KnowledgeBase
) -> None:
    """The machine fails a row whose plan never came back (FailDocument) and, only when that write held,
    sends AnnounceFailed to the webhooks queue; its handler announces it with the row's tenant and KB."""
    from chalicelib.stages import webhooks

    knowledge = upload(deps, kb)
    body = {
        "announce": "Knowledge Failed",
        "knowledge_id": knowledge.id,
        "attempt": 1,
        "error_code": "task_timeout",
        "error_message": "post-processing could not be planned; reparse to retry",
    }
    run(deps, "webhooks", webhooks.handle, body)
    failed = published(deps).published[-1]
    assert failed.type.value == "Knowledge Failed" and failed.tenant_id == kb.tenant_id
    assert failed.detail["error"] == {"code": "task_timeout", "message": body["error_message"]}
