"""Announcing a change: once, by whoever made the conditional write that decided it.

`announce` puts the events on the bus (the EventPublisher port) and fans each out to the webhooks of its
knowledge base that asked for its type: one message per webhook on the `webhooks` queue, whose handler
signs and posts it (stages/webhooks.py). Callers announce only after their write succeeded, so a
redelivered message whose conditional write fails announces nothing again:

    worker A   mark_indexed(completed) ok ── announce(Knowledge Completed)
    worker A'  (redelivered) mark_indexed ✗ (already completed) ── nothing

Where an announcement itself comes twice (the state machine's message on the webhooks queue, delivered
again), the event id is the same, so each webhook's delivery id is too and its tries are claimed once.

An announcement never breaks the work it announces: the bus adapter logs a put it could not make, and a
delivery the webhooks queue does not take (SQS unreachable or throttling) is tried again a few times, then
parked in that queue's DLQ, from where /admin/dlq redrives it like a delivery parked after its tries; when
the webhooks table itself does not answer, the event's deliveries are logged as lost (it is on the bus).
Raising instead would answer an upload with a 500 after its row was written, or retry a stage whose
conditional write already held and whose retry therefore announces nothing.
"""

from __future__ import annotations

from chalicelib.domain.events import Event, EventType, knowledge_event, summary_event, task_event
from chalicelib.domain.types import Knowledge, Task
from chalicelib.domain.webhooks import delivery_id
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, ServiceUnreachable
from chalicelib.services.backoff import call_with_backoff
from chalicelib.services.webhook_messages import DeliveryMessage

WEBHOOK_QUEUE = "webhooks"
#: sends of one delivery before it is parked; short waits, since an upload's answer waits on them
FAN_OUT_TRIES = 3
FAN_OUT_BASE_DELAY = 0.1
FAN_OUT_MAX_DELAY = 0.5
PARKED_REASON = "the webhooks queue did not take this delivery when its event was announced"


def announce(deps: Dependencies, *events: Event) -> None:
    if not events:
        return
    deps.events.publish(events)
    for event in events:
        _fan_out(deps, event)


def _fan_out(deps: Dependencies, event: Event) -> None:
    if not event.kb_id:
        return
    try:
        hooks = deps.webhooks.list_kb(event.kb_id)
    except ServiceUnreachable:  # the webhooks table did not answer: the event is on the bus all the same
        logger.error(
            "webhook deliveries lost: the webhooks table did not answer",
            extra={"event_id": event.event_id, "event_type": event.type.value, "kb_id": event.kb_id},
        )
        return
    tries = FAN_OUT_TRIES
    for hook in hooks:
        if not hook.enabled or event.type.value not in hook.event_types:
            continue
        delivery = DeliveryMessage(
            kb_id=hook.kb_id,
            webhook_id=hook.id,
            delivery_id=delivery_id(event.event_id, hook.id),
            attempt=1,
            event=dict(event.detail),
        )
        body = delivery.model_dump(mode="json")
        try:
            call_with_backoff(
                lambda: deps.queue.send_raw(WEBHOOK_QUEUE, body),  # noqa: B023 (called at once, in the loop)
                max_attempts=tries,
                base_delay=FAN_OUT_BASE_DELAY,
                max_delay=FAN_OUT_MAX_DELAY,
                retry_on=(ServiceUnreachable,),
                sleep=deps.sleep,
            )
        except ServiceUnreachable:
            tries = 1  # the queue is out: the event's other deliveries go to the DLQ without waiting
            _park(deps, event, delivery)


def _park(deps: Dependencies, event: Event, delivery: DeliveryMessage) -> None:
    """Keeps a delivery the webhooks queue did not take; a redrive (or a re-announcement of the same
    event, whose delivery id is the same) delivers it once."""
    where = {
        "event_id": event.event_id,
        "event_type": event.type.value,
        "webhook_id": delivery.webhook_id,
        "delivery_id": delivery.delivery_id,
    }
    try:
        deps.queue.dead_letter(WEBHOOK_QUEUE, delivery.model_dump_json(), PARKED_REASON)
    except ServiceUnreachable:
        logger.error("webhook delivery lost: neither the webhooks queue nor its DLQ took it", extra=where)
        return
    logger.warning("webhook delivery parked: the webhooks queue did not take it", extra=where)


def knowledge_changed(
    deps: Dependencies,
    knowledge: Knowledge,
    event_type: EventType,
    *,
    status: str | None = None,
    attempt: int | None = None,
    error_code: str = "",
    error_message: str = "",
) -> None:
    """`knowledge` as read before or after the write; `status`/`attempt` override what it says."""
    announce(
        deps,
        knowledge_event(
            event_type,
            tenant_id=knowledge.tenant_id,
            kb_id=knowledge.kb_id,
            knowledge_id=knowledge.id,
            status=status or knowledge.parse_status.value,
            attempt=attempt or knowledge.attempt,
            error_code=error_code,
            error_message=error_message,
        ),
    )


def knowledge_changed_by_id(
    deps: Dependencies,
    knowledge_id: str,
    event_type: EventType,
    *,
    status: str,
    attempt: int | None = None,
    error_code: str = "",
    error_message: str = "",
) -> None:
    """The same, for a caller that holds only the id (one consistent read for tenant and knowledge base)."""
    knowledge = deps.knowledge.get(knowledge_id)
    if knowledge is None:
        return
    knowledge_changed(
        deps,
        knowledge,
        event_type,
        status=status,
        attempt=attempt,
        error_code=error_code,
        error_message=error_message,
    )


def summary_changed(deps: Dependencies, knowledge: Knowledge, event_type: EventType, status: str) -> None:
    announce(
        deps,
        summary_event(
            event_type,
            tenant_id=knowledge.tenant_id,
            kb_id=knowledge.kb_id,
            knowledge_id=knowledge.id,
            status=status,
            attempt=knowledge.attempt,
        ),
    )


def task_finished(deps: Dependencies, task: Task) -> None:
    first_error = next(iter(task.errors.values()), "")
    announce(
        deps,
        task_event(
            tenant_id=task.tenant_id,
            kb_id=task.kb_id,
            task_id=task.id,
            task_kind=task.kind.value,
            status=task.status.value,
            error_message=first_error,
        ),
    )
