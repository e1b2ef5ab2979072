"""The webhooks table not answering while a change is announced: the event's deliveries are not lost. One
fan-out message goes on the webhooks queue (or, when the queue does not take it either, into its DLQ), and
its handler reads the table and sends one delivery per webhook that asked for the type, under the delivery
ids announce gives: a fan-out message handled twice, or an event announced again, delivers each once. A
table still out fails the message, which ends in the DLQ after its tries and is redriven from there."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from chalicelib.adapters.memory import MemoryEventPublisher, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.events import Event, EventType, knowledge_event
from chalicelib.domain.types import KnowledgeBase
from chalicelib.domain.webhooks import DELIVERY_HEADER, delivery_id
from chalicelib.ports import ServiceUnreachable, Webhook
from chalicelib.services.events import announce
from chalicelib.stages import webhooks as webhook_stage

from .conftest import upload
from .test_event_fanout_outage import WebhooksQueueOut
from .test_webhooks import Receiver, drain_webhooks, hook_on


class WebhooksTableOut:
    """Makes the webhooks repo's `list_kb` (the read every announcement makes) fail while `out` is set."""

    def __init__(self, deps: Services) -> None:
        self.real = deps.webhooks.list_kb
        self.out = True
        self.refused = 0

    def list_kb(self, kb_id: str) -> list[Webhook]:
        if self.out:
            self.refused += 1
            raise ServiceUnreachable("DynamoDB (webhooks) did not answer")
        return self.real(kb_id)


@pytest.fixture
def table(deps: Services) -> Iterator[WebhooksTableOut]:
    out = WebhooksTableOut(deps)
    deps.webhooks.list_kb = out.list_kb  # type: ignore[method-assign]
    yield out
    deps.webhooks.list_kb = out.real  # type: ignore[method-assign]


@pytest.fixture
def receiver(deps: Services) -> Receiver:
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    return receiver


def _hooks(deps: Services, kb: KnowledgeBase) -> list[str]:
    """Two webhooks that asked for `Knowledge Created`, and one that did not."""
    wanted = [str(hook_on(deps, kb, "Knowledge Created")["id"]) for _ in range(2)]
    hook_on(deps, kb, "Knowledge Completed")
    return wanted


def _created(kb: KnowledgeBase, knowledge_id: str = "k1") -> Event:
    return knowledge_event(
        EventType.KNOWLEDGE_CREATED,
        tenant_id=kb.tenant_id,
        kb_id=kb.id,
        knowledge_id=knowledge_id,
        status="pending",
        attempt=1,
    )


def _posted(receiver: Receiver) -> list[tuple[str, str]]:
    """(delivery id, event id) of every post, sorted."""
    return sorted(
        (headers[DELIVERY_HEADER], json.loads(body)["event_id"]) for _, body, headers in receiver.posts
    )


def _expected(event: Event, hook_ids: list[str]) -> list[tuple[str, str]]:
    return sorted((delivery_id(event.event_id, hook_id), event.event_id) for hook_id in hook_ids)


def test_an_upload_whose_webhooks_read_fails_still_delivers_once_to_each_subscribed_webhook(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, table: WebhooksTableOut, receiver: Receiver
) -> None:
    table.out = False
    wanted = _hooks(deps, kb)
    table.out = True
    knowledge = upload(deps, kb)
    assert table.refused == 1
    (fan_out,) = queue.bodies("webhooks")
    assert (fan_out["fan_out"], fan_out["kb_id"], fan_out["event"]["knowledge_id"]) == (
        "Knowledge Created",
        kb.id,
        knowledge.id,
    )

    table.out = False  # the table answers the handler
    drain_webhooks(deps)

    assert isinstance(deps.events, MemoryEventPublisher)
    (created,) = [e for e in deps.events.published if e.type == EventType.KNOWLEDGE_CREATED]
    assert _posted(receiver) == _expected(created, wanted)
    assert queue.dead_letters("webhooks") == []


def test_a_fan_out_message_delivered_twice_delivers_to_each_webhook_once(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, table: WebhooksTableOut, receiver: Receiver
) -> None:
    table.out = False
    wanted = _hooks(deps, kb)
    table.out = True
    event = _created(kb)
    announce(deps, event)
    (fan_out,) = queue.bodies("webhooks")
    queue.send_raw("webhooks", fan_out)  # SQS's at-least-once: the same message again

    table.out = False
    drain_webhooks(deps)
    assert _posted(receiver) == _expected(event, wanted)


def test_an_event_announced_again_after_its_deferred_fan_out_delivers_to_each_webhook_once(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, table: WebhooksTableOut, receiver: Receiver
) -> None:
    table.out = False
    wanted = _hooks(deps, kb)
    event = _created(kb)
    table.out = True
    announce(deps, event)  # deferred: one fan-out message
    table.out = False
    announce(deps, event)  # the same event again (a redelivered announcement): its deliveries directly
    drain_webhooks(deps)
    assert _posted(receiver) == _expected(event, wanted)


def test_a_fan_out_whose_table_stays_out_ends_in_the_dlq_and_a_redrive_delivers_it(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, table: WebhooksTableOut, receiver: Receiver
) -> None:
    from chalicelib.operations.dlq import redrive

    table.out = False
    wanted = _hooks(deps, kb)
    table.out = True
    event = _created(kb)
    announce(deps, event)
    drain_webhooks(deps)  # every try of the handler finds the table out

    assert table.refused == 1 + queue.max_receives
    (letter,) = queue.dead_letters("webhooks")
    assert json.loads(letter.body)["event_id"] == event.event_id
    assert receiver.posts == []

    table.out = False
    assert redrive(deps, "webhooks", 10).as_dict()["counts"] == {"resent": 1}
    drain_webhooks(deps)
    assert _posted(receiver) == _expected(event, wanted)
    assert queue.dead_letters("webhooks") == []


def test_a_fan_out_the_webhooks_queue_does_not_take_is_parked_and_a_redrive_delivers_it(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    table: WebhooksTableOut,
    receiver: Receiver,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from chalicelib.operations.dlq import redrive

    table.out = False
    wanted = _hooks(deps, kb)
    table.out = True
    outage = WebhooksQueueOut(queue)
    queue.send_raw = outage.send_raw  # type: ignore[method-assign,assignment]
    try:
        event = _created(kb)
        announce(deps, event)
    finally:
        queue.send_raw = outage.real  # type: ignore[method-assign]

    assert outage.refused > 1  # tried again before it was parked
    assert queue.bodies("webhooks") == []
    (letter,) = queue.dead_letters("webhooks")
    assert json.loads(letter.body)["fan_out"] == "Knowledge Created"
    assert "fan-out" in letter.attributes["reason"]
    assert any("fan-out parked" in r.getMessage() for r in caplog.records)

    table.out = False
    assert redrive(deps, "webhooks", 10).as_dict()["counts"] == {"resent": 1}
    drain_webhooks(deps)
    assert _posted(receiver) == _expected(event, wanted)


def test_a_fan_out_message_that_does_not_hold_together_is_parked_at_once(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, receiver: Receiver
) -> None:
    """A malformed fan-out is permanent: parked on its first receive, not retried; a well-formed one next to
    it is fanned out."""
    hook_on(deps, kb, "Knowledge Created")
    event = _created(kb)
    good = {
        "fan_out": "Knowledge Created",
        "event_id": event.event_id,
        "kb_id": kb.id,
        "event": dict(event.detail),
    }
    queue.send_raw("webhooks", {**good, "event_id": "another"})  # the pointer and the detail disagree
    queue.send_raw("webhooks", {**good, "fan_out": "Knowledge Exploded"})
    queue.send_raw("webhooks", good)
    answer = queue.deliver("webhooks", webhook_stage.handle, deps)

    assert answer["batchItemFailures"] == []
    assert len(queue.dead_letters("webhooks")) == 2
    assert all(
        m.receive_count == 0 and "not a webhook" in m.attributes["reason"]
        for m in queue.dead_letters("webhooks")
    )
    drain_webhooks(deps)
    assert len(receiver.posts) == 1
