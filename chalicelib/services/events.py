"""Announcing a change: once, by whoever made the conditional write that decided it.

`announce` puts the events on the bus (the EventPublisher port) and fans each out to the webhooks of its
knowledge base that asked for its type: one message per webhook on the `webhooks` queue, whose handler
signs and posts it (stages/webhooks.py), or on its slow lane `webhooks-slow` for a webhook degraded when
read (its failure score at or above services/webhook_messages.DEGRADED_SCORE). Callers announce only after
their write succeeded; a worker that dies between the write and the announcement would lose the event, so a
redelivered message that finds its write already done announces it again, under the same event id (a
summary's is made from a nonce its deciding write keeps on the row: `summary_decided_again`):

    worker A   mark_indexed(completed) ok ── (dies before it announces)
    worker A'  (redelivered) mark_indexed ✗ (already completed) ── completed_again: Knowledge Completed

The event id is the same however often a change is announced (this, or the state machine's message on the
webhooks queue delivered again), so each webhook's delivery id is too and its tries are claimed once; a
consumer drops the repeat by the id. A document's delete announces just before the row goes (its redelivery
finds no row to read the event from).

An announcement never breaks the work it announces, and loses none of its deliveries: the bus adapter logs
a put it could not make; a delivery the webhooks queue does not take (SQS unreachable or throttling) is
tried again a few times, then parked in that queue's DLQ, from where /admin/dlq redrives it like a delivery
parked after its tries. When the webhooks table itself does not answer, the fan-out is left to the webhooks
queue: one `FanOutMessage` (the event, as its deliveries carry it) goes there, sent and parked as a
delivery is, and its handler reads the table and sends the deliveries (`deliveries_of`, under the same ids,
so a fan-out message handled twice delivers each once); a read that fails there fails the message, which
SQS brings back and, after its tries, keeps in the DLQ for redrive. A webhook created in between is sent
the event too. Raising instead would answer an upload with a 500 after its row was written, or retry a
stage whose conditional write already held and whose retry therefore announces nothing.
"""

from __future__ import annotations

from collections.abc import Iterable

from chalicelib.domain.events import Event, EventType, knowledge_event, summary_event, task_event
from chalicelib.domain.types import Knowledge, ParseStatus, SummaryStatus, Task
from chalicelib.domain.webhooks import delivery_id
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, ServiceUnreachable
from chalicelib.ports.events import Webhook
from chalicelib.services.backoff import BRIEF_TRIES, send_briefly
from chalicelib.services.webhook_messages import DeliveryMessage, FanOutMessage, is_degraded

WEBHOOK_QUEUE = "webhooks"
#: the slow lane: the tries of degraded webhooks (services/webhook_messages.py DEGRADED_SCORE), by the same
#: handler at a concurrency of its own (stages/webhooks.py)
WEBHOOK_SLOW_QUEUE = "webhooks-slow"
PARKED_REASON = "the webhooks queue did not take this {what} when its event was announced"


def announce(deps: Dependencies, *events: Event) -> None:
    if not events:
        return
    deps.events.publish(events)
    for event in events:
        _fan_out(deps, event)


def deliveries_of(event: Event, hooks: Iterable[Webhook]) -> list[DeliveryMessage]:
    """The event's first tries: one per enabled webhook that asked for its type, under a delivery id that is
    the same however often the event is fanned out."""
    return [
        DeliveryMessage(
            kb_id=hook.kb_id,
            webhook_id=hook.id,
            delivery_id=delivery_id(event.event_id, hook.id),
            attempt=1,
            event=dict(event.detail),
        )
        for hook in hooks
        if hook.enabled and event.type.value in hook.event_types
    ]


def slow_lane(hooks: Iterable[Webhook]) -> frozenset[str]:
    """The ids of the webhooks whose deliveries go to the slow lane (degraded when read)."""
    return frozenset(hook.id for hook in hooks if is_degraded(hook.failure_score))


def _fan_out(deps: Dependencies, event: Event) -> None:
    if not event.kb_id:
        return
    try:
        hooks = deps.webhooks.list_kb(event.kb_id)
    except ServiceUnreachable:  # the webhooks table did not answer: the webhooks queue's handler fans out
        logger.warning(
            "webhook fan-out deferred: the webhooks table did not answer",
            extra={"event_id": event.event_id, "event_type": event.type.value, "kb_id": event.kb_id},
        )
        _send_or_park(deps, event, FanOutMessage.of(event), BRIEF_TRIES)
        return
    tries = BRIEF_TRIES
    slow = slow_lane(hooks)
    for delivery in deliveries_of(event, hooks):
        if not _send_or_park(deps, event, delivery, tries, slow=delivery.webhook_id in slow):
            tries = 1  # the queue is out: the event's other deliveries go to the DLQ without waiting


def _send_or_park(
    deps: Dependencies,
    event: Event,
    message: DeliveryMessage | FanOutMessage,
    tries: int,
    *,
    slow: bool = False,
) -> bool:
    """Sends `message` to the webhooks queue (a delivery to a degraded webhook: its slow lane), tried `tries`
    times; parks it when the queue does not take it (False), in the webhooks queue's DLQ whatever the lane
    (a redrive sends it there, whose worker forwards it to the slow lane while its webhook is degraded)."""
    body = message.model_dump(mode="json")
    try:
        send_briefly(
            lambda: deps.queue.send_raw(WEBHOOK_SLOW_QUEUE if slow else WEBHOOK_QUEUE, body),
            deps.sleep,
            tries,
        )
    except ServiceUnreachable:
        _park(deps, event, message)
        return False
    return True


def _park(deps: Dependencies, event: Event, message: DeliveryMessage | FanOutMessage) -> None:
    """Keeps a delivery (or a fan-out) the webhooks queue did not take; a redrive (or a re-announcement of
    the same event, whose delivery ids are the same) delivers it once."""
    where = {"event_id": event.event_id, "event_type": event.type.value}
    if isinstance(message, DeliveryMessage):
        where |= {"webhook_id": message.webhook_id, "delivery_id": message.delivery_id}
    what = "delivery" if isinstance(message, DeliveryMessage) else "fan-out"
    try:
        deps.queue.dead_letter(WEBHOOK_QUEUE, message.model_dump_json(), PARKED_REASON.format(what=what))
    except ServiceUnreachable:
        logger.error(f"webhook {what} lost: neither the webhooks queue nor its DLQ took it", extra=where)
        return
    logger.warning(f"webhook {what} parked: the webhooks queue did not take it", extra=where)


def knowledge_changed(
    deps: Dependencies,
    knowledge: Knowledge,
    event_type: EventType,
    *,
    status: str | None = None,
    attempt: int | None = None,
    error_code: str = "",
    error_message: str = "",
    occurrence: str = "",
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
            occurrence=occurrence,
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


def completed_again(deps: Dependencies, row: Knowledge | None, attempt: int) -> None:
    """A redelivered copy that finds `attempt` completed announces it again: the copy that completed it may
    have died before it announced. The event's id is the same, so consumers and webhook deliveries drop a
    repeat."""
    if row is not None and row.attempt == attempt and row.parse_status == ParseStatus.COMPLETED:
        knowledge_changed(deps, row, EventType.KNOWLEDGE_COMPLETED, attempt=attempt)


def failed_again(deps: Dependencies, row: Knowledge | None, attempt: int) -> None:
    """As `completed_again`, for a failure: a redelivered copy that finds `attempt` failed announces it again
    (with the failure the row keeps), under the same id as whoever failed it."""
    if row is not None and row.attempt == attempt and row.parse_status == ParseStatus.FAILED:
        knowledge_changed(
            deps,
            row,
            EventType.KNOWLEDGE_FAILED,
            attempt=attempt,
            error_code=row.error_code,
            error_message=row.error_message,
        )


def reparse_started_again(deps: Dependencies, row: Knowledge | None, attempt: int) -> None:
    """A redelivered task that finds the reparse it began (the row's `attempt`) begun already announces the
    start again, as it was announced (`pending`), under the same id."""
    if row is not None and row.attempt >= attempt:
        knowledge_changed(
            deps, row, EventType.KNOWLEDGE_REPARSE_STARTED, status=ParseStatus.PENDING.value, attempt=attempt
        )


def summary_changed(
    deps: Dependencies, knowledge: Knowledge, event_type: EventType, status: str, occurrence: str
) -> None:
    """`occurrence`: the nonce the write that decided the summary kept on the row (`summary_occurrence`)."""
    announce(
        deps,
        summary_event(
            event_type,
            tenant_id=knowledge.tenant_id,
            kb_id=knowledge.kb_id,
            knowledge_id=knowledge.id,
            status=status,
            attempt=knowledge.attempt,
            occurrence=occurrence,
        ),
    )


def summary_decided_again(deps: Dependencies, row: Knowledge | None, attempt: int) -> None:
    """As `completed_again`, for a summary: a redelivered subtask that finds `attempt`'s summary completed or
    failed announces it again from the row, under the id its deciding write's nonce gave it (the worker that
    wrote it may have died before it announced). A row decided before nonces were kept has none: nothing."""
    if row is None or row.attempt != attempt or not row.summary_occurrence:
        return
    if row.summary_status == SummaryStatus.COMPLETED:
        event_type = EventType.SUMMARY_COMPLETED
    elif row.summary_status == SummaryStatus.FAILED:
        event_type = EventType.SUMMARY_FAILED
    else:
        return
    summary_changed(deps, row, event_type, row.summary_status.value, row.summary_occurrence)


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
