"""The webhooks queue not taking a delivery (SQS unreachable or throttling) while a change is announced: the
change it announces goes on (an upload answers 2xx and its document is processed, a stage is not failed),
the send is tried again, and a delivery still not taken is parked in the webhooks DLQ, from where a redrive
delivers it. A state machine's announcement of an attempt a newer one superseded is not published."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.adapters.memory import MemoryEventPublisher, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import ReparseRequest
from chalicelib.domain.types import EnableStatus, KnowledgeBase, ParseStatus, Tenant
from chalicelib.ports import ServiceUnreachable
from chalicelib.stages import enrichment, postprocess, webhooks

from .conftest import TEXT, deliver, drain, task_body, upload
from .test_download_link_revocation import V1, _caller
from .test_events import run
from .test_move_clone import completed
from .test_webhooks import hook_on

SUMMARY = {"id": "summary", "kind": "summary", "id_set": ["summary"]}


class WebhooksQueueOut:
    """Makes the memory queue refuse sends to the webhooks queue, the first `times` of them (None: all)."""

    def __init__(self, queue: MemoryTaskQueue, times: int | None = None) -> None:
        self.queue = queue
        self.real = queue.send_raw
        self.left = times
        self.refused = 0

    def send_raw(self, name: str, body: Any, *, delay_seconds: int = 0) -> None:
        if name == "webhooks" and (self.left is None or self.left > 0):
            self.refused += 1
            if self.left is not None:
                self.left -= 1
            raise ServiceUnreachable("SQS (webhooks) did not answer (EndpointConnectionError)")
        self.real(name, body, delay_seconds=delay_seconds)


@pytest.fixture
def outage(deps: Services) -> Iterator[WebhooksQueueOut]:
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    out = WebhooksQueueOut(queue)
    queue.send_raw = out.send_raw  # type: ignore[method-assign]
    yield out
    queue.send_raw = out.real  # type: ignore[method-assign]


def _queue(deps: Services) -> MemoryTaskQueue:
    assert isinstance(deps.queue, MemoryTaskQueue)
    return deps.queue


def _published(deps: Services) -> MemoryEventPublisher:
    assert isinstance(deps.events, MemoryEventPublisher)
    return deps.events


def _parked_types(deps: Services) -> list[str]:
    return [json.loads(m.body)["event"]["type"] for m in _queue(deps).dead_letters("webhooks")]


def test_an_upload_while_the_webhooks_queue_is_out_answers_2xx_and_its_document_is_processed(
    deps: Services, client: Client, outage: WebhooksQueueOut
) -> None:
    from chalicelib.operations.dlq import redrive

    owner = _caller(deps, client, "owner")
    kb_id = str(owner.call("POST", "/knowledge-bases", {"name": "kb"})["id"])
    kb = deps.kbs.get(kb_id)
    assert kb is not None
    hook_on(deps, kb, "Knowledge Created")
    body = (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="notes.md"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n" + TEXT + b"\r\n--b--\r\n"
    )
    answer = client.http.post(
        f"{V1}/knowledge-bases/{kb_id}/knowledge/file",
        headers={"X-API-Key": owner.key, "Content-Type": "multipart/form-data; boundary=b"},
        body=body,
    )

    assert answer.status_code < 300, answer.body
    assert outage.refused > 1  # tried again before it was parked
    assert _parked_types(deps) == ["Knowledge Created"]
    outage.left = 0  # SQS is back
    drain(deps)
    knowledge_id = str(answer.json_body["data"]["id"])
    row = deps.knowledge.get(knowledge_id)
    assert row is not None and row.enable_status == EnableStatus.ENABLED  # parsed, chunked and indexed

    redrive(deps, "webhooks", 10)
    (delivery,) = _queue(deps).bodies("webhooks")
    assert (delivery["event"]["type"], delivery["event"]["knowledge_id"]) == (
        "Knowledge Created",
        knowledge_id,
    )


def _plan_then_outage(deps: Services, kb: KnowledgeBase, outage: WebhooksQueueOut) -> Any:
    hook_on(deps, kb, "Knowledge Completed")
    outage.left = 0
    knowledge = upload(deps, kb)
    drain(deps)
    queue = _queue(deps)
    queue.send_raw("postprocess", task_body(knowledge, "plan"))
    queue.deliver("postprocess", postprocess.handle, deps)
    return knowledge


def test_a_completion_whose_first_send_fails_reaches_the_webhooks_queue_without_failing_the_stage(
    deps: Services, kb: KnowledgeBase, outage: WebhooksQueueOut
) -> None:
    knowledge = _plan_then_outage(deps, kb, outage)
    outage.left = 1
    queue = _queue(deps)
    queue.send_raw("enrichment", task_body(knowledge, "sum", subtask=SUMMARY))
    answer = queue.deliver("enrichment", enrichment.handle, deps)

    assert answer["batchItemFailures"] == []
    assert outage.refused == 1
    assert [b["event"]["type"] for b in queue.bodies("webhooks")] == ["Knowledge Completed"]
    assert _parked_types(deps) == []


def test_a_completion_the_webhooks_queue_never_takes_is_parked_and_the_stage_succeeds(
    deps: Services, kb: KnowledgeBase, outage: WebhooksQueueOut
) -> None:
    knowledge = _plan_then_outage(deps, kb, outage)
    outage.left = None
    queue = _queue(deps)
    queue.send_raw("enrichment", task_body(knowledge, "sum", subtask=SUMMARY))
    answer = queue.deliver("enrichment", enrichment.handle, deps)

    assert answer["batchItemFailures"] == []
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.parse_status == ParseStatus.COMPLETED
    assert "Knowledge Completed" in _parked_types(deps)
    assert "Knowledge Completed" in _published(deps).types_of(knowledge.id)


def test_the_machines_completion_of_a_superseded_attempt_is_not_announced(
    deps: Services, kb: KnowledgeBase, tenant: Tenant
) -> None:
    from chalicelib.tasks.reparse import reparse

    doc = completed(deps, kb, "a.md", TEXT)
    late = {"announce": "Knowledge Completed", "knowledge_id": doc.id, "attempt": 1}
    run(deps, "webhooks", webhooks.handle, late)  # control: the attempt is current, so it is announced
    before = _published(deps).types_of(doc.id).count("Knowledge Completed")
    reparse(deps, tenant.id, doc.id, ReparseRequest())
    run(deps, "webhooks", webhooks.handle, late)

    row = deps.knowledge.get(doc.id)
    assert row is not None and row.attempt == 2
    assert _published(deps).types_of(doc.id).count("Knowledge Completed") == before


def test_a_delivery_neither_the_queue_nor_its_dlq_takes_is_logged_by_ids_and_the_announcement_returns(
    deps: Services, kb: KnowledgeBase, outage: WebhooksQueueOut, caplog: pytest.LogCaptureFixture
) -> None:
    from chalicelib.domain.events import EventType, knowledge_event
    from chalicelib.services.events import announce

    hook_on(deps, kb, "Knowledge Created")
    queue = _queue(deps)

    def dlq_out(name: str, body: str, reason: str) -> None:
        raise ServiceUnreachable("SQS (webhooks DLQ) did not answer (remote text)")

    queue.dead_letter = dlq_out  # type: ignore[method-assign]
    event = knowledge_event(
        EventType.KNOWLEDGE_CREATED,
        tenant_id=kb.tenant_id,
        kb_id=kb.id,
        knowledge_id="k",
        status="pending",
        attempt=1,
    )
    announce(deps, event)

    assert _published(deps).types_of("k") == ["Knowledge Created"]
    (lost,) = [r for r in caplog.records if "delivery lost" in r.getMessage()]
    assert lost.__dict__["event_id"] == event.event_id and "remote text" not in str(lost.__dict__)


def test_an_upload_while_the_webhooks_table_is_out_answers_and_its_document_is_queued(
    deps: Services, kb: KnowledgeBase
) -> None:
    """The webhooks read every announcement makes (`list_kb`) did not answer: the event is on the bus, its
    fan-out is left to the webhooks queue (test_webhook_fan_out_deferred.py), and the upload goes on (it had
    raised after its row was written, with nothing queued for the first stage)."""

    def unreachable(kb_id: str) -> list[Any]:
        raise ServiceUnreachable("DynamoDB did not answer")

    deps.webhooks.list_kb = unreachable  # type: ignore[method-assign]
    created = upload(deps, kb)
    assert deps.knowledge.get(created.id) is not None
    assert deliver(deps, "docreader")["batchItemFailures"] == []
