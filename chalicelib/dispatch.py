"""Putting a document's next stage on its queue, and recording on the row that it is queued.

The record is what housekeeping reads to tell a row whose message is still waiting in a busy queue from a
row whose message is gone (its worker died on the last try, or the message went to the DLQ)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from .domain.clock import to_iso
from .domain.types import Stage, StageMessage
from .ports import Dependencies


def visible_at(delay_seconds: int = 0) -> str:
    """When a message sent now with this delay can be received: the row's `queued_at`."""
    return to_iso(datetime.now(UTC) + timedelta(seconds=delay_seconds))


def enqueue(
    deps: Dependencies, stage: Stage, message: StageMessage, *, delay_seconds: int = 0, marked: bool = False
) -> None:
    """`marked`: the caller already wrote the record on the row (a new row carries it in its insert)."""
    if not marked:
        deps.knowledge.mark_queued(
            message.knowledge_id, message.attempt, stage.value, visible_at(delay_seconds)
        )
    deps.queue.send(stage, message, delay_seconds=delay_seconds)
