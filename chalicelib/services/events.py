"""Announcing a change: once, by whoever made the conditional write that decided it.

`announce` puts the events on the bus (the EventPublisher port) and fans each out to the webhooks of its
knowledge base that asked for its type: one message per webhook on the `webhooks` queue, whose handler
signs and posts it (stages/webhooks.py). Callers announce only after their write succeeded, so a
redelivered message whose conditional write fails announces nothing again:

    worker A   mark_indexed(completed) ok ── announce(Knowledge Completed)
    worker A'  (redelivered) mark_indexed ✗ (already completed) ── nothing

Where an announcement itself comes twice (the state machine's message on the webhooks queue, delivered
again), the event id is the same, so each webhook's delivery id is too and its tries are claimed once.
"""

from __future__ import annotations

from chalicelib.domain.events import Event, EventType, knowledge_event, summary_event, task_event
from chalicelib.domain.types import Knowledge, Task
from chalicelib.domain.webhooks import delivery_id
from chalicelib.ports import Dependencies
from chalicelib.services.webhook_messages import DeliveryMessage

WEBHOOK_QUEUE = "webhooks"


def announce(deps: Dependencies, *events: Event) -> None:
    if not events:
        return
    deps.events.publish(events)
    for event in events:
        _fan_out(deps, event)


def _fan_out(deps: Dependencies, event: Event) -> None:
    if not event.kb_id:
        return
    for hook in deps.webhooks.list_kb(event.kb_id):
        if not hook.enabled or event.type.value not in hook.event_types:
            continue
        delivery = DeliveryMessage(
            kb_id=hook.kb_id,
            webhook_id=hook.id,
            delivery_id=delivery_id(event.event_id, hook.id),
            attempt=1,
            event=dict(event.detail),
        )
        deps.queue.send_raw(WEBHOOK_QUEUE, delivery.model_dump(mode="json"))


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
