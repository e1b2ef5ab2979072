"""What the service announces: one event per change of a document's, a durable task's or a summary's state.

An event is published on the stack's EventBridge bus with `source` = EVENT_SOURCE and `detail-type` = its
type (`Knowledge Completed`), and fanned out to the knowledge base's webhooks that asked for that type. Its
detail is a small, stable JSON object (schema version 1, `EventDetail` in the OpenAPI components): ids,
tenant, knowledge base, status, attempt, the error's code and message for a failure, and the time. It is a
pointer: never a document's text, never anything a remote server answered.

`event_id` is derived from what the event is about (subject, type, attempt, status and, where those
repeat, what marks the occurrence: a move's task, a summary's nonce (kept on the row), when a clone's copy
was made), so a consumer can drop a duplicate the at-least-once world hands it and never drops a second
change. An event that may have been lost to a crash after its write is announced again under the same id
(services/events.py).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from chalicelib.domain.clock import now_iso

EVENT_SOURCE = "weknora.ingest"
SCHEMA_VERSION = 1
#: the longest error message an event carries (the row keeps the rest)
MAX_ERROR_MESSAGE = 500


class EventType(StrEnum):
    KNOWLEDGE_CREATED = "Knowledge Created"
    KNOWLEDGE_COMPLETED = "Knowledge Completed"
    KNOWLEDGE_FAILED = "Knowledge Failed"
    KNOWLEDGE_CANCELLED = "Knowledge Cancelled"
    KNOWLEDGE_DELETED = "Knowledge Deleted"
    KNOWLEDGE_MOVED = "Knowledge Moved"
    KNOWLEDGE_REPARSE_STARTED = "Knowledge Reparse Started"
    TASK_COMPLETED = "Task Completed"
    TASK_FAILED = "Task Failed"
    SUMMARY_COMPLETED = "Summary Completed"
    SUMMARY_FAILED = "Summary Failed"


EVENT_TYPES: tuple[str, ...] = tuple(t.value for t in EventType)


@dataclass(frozen=True)
class Event:
    """One announced change: `type` is the EventBridge detail-type, `detail` the JSON detail."""

    type: EventType
    detail: Mapping[str, Any]

    @property
    def tenant_id(self) -> str:
        return str(self.detail["tenant_id"])

    @property
    def kb_id(self) -> str:
        return str(self.detail.get("kb_id") or "")

    @property
    def event_id(self) -> str:
        return str(self.detail["event_id"])


def _event_id(*parts: object) -> str:
    return hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()[:32]


def _detail(
    event_type: EventType,
    *,
    tenant_id: str,
    kb_id: str,
    subject: str,
    status: str,
    attempt: int,
    knowledge_id: str | None = None,
    task_id: str | None = None,
    task_kind: str | None = None,
    error_code: str = "",
    error_message: str = "",
    time: str | None = None,
    occurrence: str = "",
    extra: Mapping[str, Any] | None = None,
) -> Event:
    """`occurrence` tells apart changes whose subject, type, attempt and status repeat (a second summary of
    one attempt, a document moved again): part of the id only when given, so other ids stay as they were."""
    failed = event_type in (EventType.KNOWLEDGE_FAILED, EventType.TASK_FAILED, EventType.SUMMARY_FAILED)
    error = (
        {"code": error_code or "unknown", "message": error_message[:MAX_ERROR_MESSAGE]}
        if failed or error_code
        else None
    )
    detail: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "event_id": _event_id(subject, event_type.value, attempt, status, *filter(None, [occurrence])),
        "type": event_type.value,
        "time": time or now_iso(),
        "tenant_id": tenant_id,
        "kb_id": kb_id,
        "knowledge_id": knowledge_id,
        "task_id": task_id,
        "task_kind": task_kind,
        "status": status,
        "attempt": attempt,
        "error": error,
        **(extra or {}),
    }
    return Event(event_type, detail)


def knowledge_event(
    event_type: EventType,
    *,
    tenant_id: str,
    kb_id: str,
    knowledge_id: str,
    status: str,
    attempt: int,
    error_code: str = "",
    error_message: str = "",
    occurrence: str = "",
) -> Event:
    """`occurrence`: what tells apart two rows under one id (a clone's copy made again, its id following
    from the task and the source)."""
    return _detail(
        event_type,
        tenant_id=tenant_id,
        kb_id=kb_id,
        subject=f"knowledge:{knowledge_id}",
        knowledge_id=knowledge_id,
        status=status,
        attempt=attempt,
        error_code=error_code,
        error_message=error_message,
        occurrence=occurrence,
    )


def moved_events(
    *,
    tenant_id: str,
    knowledge_id: str,
    from_kb_id: str,
    to_kb_id: str,
    status: str,
    attempt: int,
    task_id: str,
) -> tuple[Event, Event]:
    """A document left one knowledge base for another: one `Knowledge Moved` addressed to each (webhooks are
    per knowledge base), both with `from_kb_id` and `to_kb_id`. The move's task marks the occurrence, so a
    redelivered move announces the same ids and a later move back new ones."""
    moved = {"from_kb_id": from_kb_id, "to_kb_id": to_kb_id}

    def to(kb_id: str) -> Event:
        return _detail(
            EventType.KNOWLEDGE_MOVED,
            tenant_id=tenant_id,
            kb_id=kb_id,
            subject=f"knowledge:{knowledge_id}",
            knowledge_id=knowledge_id,
            task_id=task_id,
            task_kind="move",
            status=status,
            attempt=attempt,
            occurrence=f"{task_id}|{kb_id}",
            extra=moved,
        )

    return to(from_kb_id), to(to_kb_id)


def new_occurrence() -> str:
    """A fresh nonce for a change whose subject, type, attempt and status repeat (a summary refreshed)."""
    return uuid.uuid4().hex


def summary_event(
    event_type: EventType,
    *,
    tenant_id: str,
    kb_id: str,
    knowledge_id: str,
    status: str,
    attempt: int,
    occurrence: str,
) -> Event:
    """A summary is announced by the write that decided it (from `processing`), and a refresh makes another
    at the same attempt and status, often with the same text: nothing else stored tells them apart, so that
    write keeps a nonce of its own on the row (`Knowledge.summary_occurrence`, `new_occurrence`) and the
    event's id is made from it. A redelivered subtask that finds the summary decided announces it again from
    the row, under the same id; the next run (a refresh, a reparse) writes a new nonce, so a new id."""
    return _detail(
        event_type,
        tenant_id=tenant_id,
        kb_id=kb_id,
        subject=f"summary:{knowledge_id}",
        knowledge_id=knowledge_id,
        status=status,
        attempt=attempt,
        occurrence=occurrence,
        error_code="summary_failed" if event_type == EventType.SUMMARY_FAILED else "",
        error_message="the summary could not be generated" if event_type == EventType.SUMMARY_FAILED else "",
    )


def task_event(
    *, tenant_id: str, kb_id: str, task_id: str, task_kind: str, status: str, error_message: str = ""
) -> Event:
    """A durable task finished: completed (every item done), partial or failed (`Task Failed`, with the
    first error's message)."""
    failed = status in ("failed", "partial")
    return _detail(
        EventType.TASK_FAILED if failed else EventType.TASK_COMPLETED,
        tenant_id=tenant_id,
        kb_id=kb_id,
        subject=f"task:{task_id}",
        task_id=task_id,
        task_kind=task_kind,
        status=status,
        attempt=1,
        error_code=f"task_{status}" if failed else "",
        error_message=error_message,
    )


#: the detail's JSON schema (OpenAPI components: EventDetail)
EVENT_DETAIL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "The detail of every event on the bus and the body of every webhook delivery "
    "(schema version 1). Pointers only: read the document, task or summary through the API.",
    "required": [
        "schema_version",
        "event_id",
        "type",
        "time",
        "tenant_id",
        "kb_id",
        "knowledge_id",
        "task_id",
        "task_kind",
        "status",
        "attempt",
        "error",
    ],
    "properties": {
        "schema_version": {"type": "integer", "enum": [SCHEMA_VERSION]},
        "event_id": {"type": "string", "description": "stable per change: drop a duplicate delivery by it"},
        "type": {"type": "string", "enum": list(EVENT_TYPES)},
        "time": {"type": "string", "format": "date-time"},
        "tenant_id": {"type": "string"},
        "kb_id": {"type": "string"},
        "knowledge_id": {"type": ["string", "null"]},
        "task_id": {"type": ["string", "null"]},
        "task_kind": {"type": ["string", "null"]},
        "status": {
            "type": "string",
            "description": "the new status (parse_status, summary_status or task status)",
        },
        "attempt": {"type": "integer", "minimum": 1},
        "error": {
            "type": ["object", "null"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        },
        "from_kb_id": {"type": "string", "description": "`Knowledge Moved` only: where the document was"},
        "to_kb_id": {"type": "string", "description": "`Knowledge Moved` only: where it is now"},
    },
}
