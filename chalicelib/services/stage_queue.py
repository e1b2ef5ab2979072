"""A document's next stage put on its queue, with the record on its row (`queued_stage`, `queued_at`) that
housekeeping and the CLI read. Below `dispatch` and `fairness`, which both send stage messages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from chalicelib.domain.clock import to_iso
from chalicelib.domain.types import Stage, StageMessage
from chalicelib.ports import Dependencies


def visible_at(delay_seconds: int = 0) -> str:
    """When a message sent now with this delay can be received: the row's `queued_at`."""
    return to_iso(datetime.now(UTC) + timedelta(seconds=delay_seconds))


def enqueue(
    deps: Dependencies,
    stage: Stage,
    message: StageMessage,
    *,
    delay_seconds: int = 0,
    marked: bool = False,
    waiting_now: bool = False,
) -> None:
    """`marked`: the caller already wrote the record on the row (a new row carries it in its insert).
    `waiting_now`: the delay is a backstop, not a retry (a document waiting at the fairness door is woken
    before it): the row says it waits from now, not that it comes back after the delay."""
    if not marked:
        deps.knowledge.mark_queued(
            message.knowledge_id,
            message.attempt,
            stage.value,
            visible_at(0 if waiting_now else delay_seconds),
        )
    deps.queue.send(stage, message, delay_seconds=delay_seconds)
