"""Operators' recovery path for dead-letter queues: list what died, and redrive it.

Redriving a stage message does not put it back as it is (its row is `failed`, and only pending or
processing rows may begin a stage, so it would be dropped): the row starts over at a new attempt
(`recovery.restart`), and the dead message is deleted once the new attempt's first message is queued.

One dead letter, by what its row says:
- failed at the message's attempt     -> restarted at a new attempt (`redriven`);
- gone or being deleted               -> dropped (`dropped_deleted`);
- at a newer attempt                  -> dropped (`superseded`: a redrive or reparse already moved it on,
                                         which makes a second redrive of the same message a no-op);
- completed or cancelled              -> dropped (`nothing_to_do`);
- still in flight at that attempt     -> kept (`in_flight`): housekeeping fails it if it is stuck, and a
                                         later redrive restarts it;
- not a message of ours (unreadable)  -> kept (`unreadable`) for a person to look at.
Enrichment work outside the subtask count (no task token: an edit's graph refresh, a summary refresh, the
auto-tag) never restarts its row: sent back unchanged while its attempt stands (in flight or completed,
`resent`), else dropped as above (`superseded`, `nothing_to_do`).
Upload notifications, lifecycle tasks, wiki batches and FAQ import tasks carry no attempt: they are sent
back to their queue unchanged (`resent`), as an SQS redrive would, since their handlers are idempotent. So are webhook deliveries (parked
after their tries: each redrive gives one more try, under a fresh claim), events' parked fan-outs and the
state machine's announcements, when their body reads as one (else `unreadable`).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from chalicelib.domain.answer_size import ANSWER_MAX_BYTES, AnswerBudget
from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.types import IN_FLIGHT_STATUSES, Knowledge, ParseStatus
from chalicelib.observability import logger
from chalicelib.operations.recovery import restart
from chalicelib.ports import DeadLetter, Dependencies
from chalicelib.services.events import WEBHOOK_QUEUE, WEBHOOK_SLOW_QUEUE
from chalicelib.services.webhook_messages import read_webhook_message
from chalicelib.settings import QUEUES

#: queues whose messages are re-sent unchanged (they carry no knowledge attempt)
RESEND_AS_IS = frozenset({"uploads", "lifecycle", "wiki", "faq-import"})
#: the queue of the work outside the subtask count (a message without a task token)
ENRICHMENT_QUEUE = "enrichment"
#: the states in which an attempt's work outside the count is still wanted
STANDING = IN_FLIGHT_STATUSES | {ParseStatus.COMPLETED}
#: how long a redrive keeps the letters it is working on out of other readers' sight
HOLD_SECONDS = 120
#: a listing hides each letter only for the moment it takes to read the queue
LIST_HOLD_SECONDS = 20


def _queues(queue: str | None) -> tuple[str, ...]:
    return (queue,) if queue else QUEUES


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        body = json.loads(text)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _pointer(letter: DeadLetter) -> tuple[str, int] | None:
    """(knowledge_id, attempt) of a stage or task message; None when the body carries none."""
    body = _json_object(letter.body)
    if body is None:
        return None
    knowledge_id, attempt = body.get("knowledge_id"), body.get("attempt")
    if isinstance(knowledge_id, str) and knowledge_id and isinstance(attempt, int) and attempt >= 1:
        return knowledge_id, attempt
    return None


def letter_view(deps: Dependencies, letter: DeadLetter) -> dict[str, Any]:
    pointer = _pointer(letter)
    view: dict[str, Any] = {
        "queue": letter.queue,
        "message_id": letter.message_id,
        "reason": letter.reason or "maxReceiveCount exceeded",
        "sent_at_ms": letter.sent_at_ms,
        "body": letter.body[:2000],
        "knowledge_id": None,
        "attempt": None,
        "row": None,
    }
    if pointer is not None:
        view["knowledge_id"], view["attempt"] = pointer
        row = deps.knowledge.get(pointer[0])
        if row is not None:
            view["row"] = {
                "tenant_id": row.tenant_id,
                "parse_status": row.parse_status.value,
                "attempt": row.attempt,
                "error_code": row.error_code,
                "error_message": row.error_message,
            }
    return view


#: the letters listed stay under Lambda's 6 MB response (JSON, non-ASCII escaped): 1,000 letters whose bodies
#: name documents in CJK passed it; the listing ends there (the letters stay in their queues)
LIST_MAX_BYTES = ANSWER_MAX_BYTES


def list_dead_letters(deps: Dependencies, queue: str | None, limit: int) -> list[dict[str, Any]]:
    """What the DLQs hold (up to `limit` in all, and within LIST_MAX_BYTES), each with its row's state;
    nothing is changed."""
    return dead_letter_listing(deps, queue, limit)[0]


def dead_letter_listing(
    deps: Dependencies, queue: str | None, limit: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """`list_dead_letters`'s letters, and per queue asked what the listing saw of it: `listed` letters, and
    `complete` when the queue answered fewer than it was asked for (all it holds was listed). A queue the
    listing cut (the limit or the size reached on it) or never read (reached before it) is not complete:
    its count is at least `listed` (ask `?queue=` for it alone)."""
    views: list[dict[str, Any]] = []
    seen: dict[str, dict[str, Any]] = {
        name: {"queue": name, "listed": 0, "complete": False} for name in _queues(queue)
    }
    budget = AnswerBudget(LIST_MAX_BYTES)
    for name in _queues(queue):
        asked = limit - len(views)
        letters = deps.queue.receive_dead_letters(name, asked, LIST_HOLD_SECONDS)
        try:
            for letter in letters:
                view = letter_view(deps, letter)
                if not budget.takes(view):
                    return views, list(seen.values())
                views.append(view)
                seen[name]["listed"] += 1
        finally:
            for letter in letters:
                deps.queue.release_dead_letter(letter)
        seen[name]["complete"] = len(letters) < asked
        if len(views) >= limit:
            break
    return views, list(seen.values())


@dataclass
class RedriveReport:
    outcomes: list[dict[str, Any]] = field(default_factory=list)

    def add(self, letter: DeadLetter, outcome: str, **extra: Any) -> None:
        self.outcomes.append(
            {"queue": letter.queue, "message_id": letter.message_id, "outcome": outcome, **extra}
        )

    def as_dict(self) -> dict[str, Any]:
        return {"counts": dict(Counter(o["outcome"] for o in self.outcomes)), "messages": self.outcomes}


def _redrive_one(deps: Dependencies, letter: DeadLetter, report: RedriveReport) -> bool:
    """Handles one letter; True when it is done with (delete it), False to keep it in the DLQ."""
    if letter.queue in (WEBHOOK_QUEUE, WEBHOOK_SLOW_QUEUE):  # back to its lane
        try:
            message = read_webhook_message(letter.body)
        except ValidationError:
            report.add(letter, "unreadable")
            return False
        deps.queue.send_raw(letter.queue, message.model_dump(mode="json"))
        report.add(letter, "resent")
        return True
    if letter.queue in RESEND_AS_IS:
        body = _json_object(letter.body)
        if body is None or letter.reason:  # parked because its handler could not read it
            report.add(letter, "unreadable")
            return False
        deps.queue.send_raw(letter.queue, body)
        report.add(letter, "resent")
        return True
    pointer = _pointer(letter)
    if pointer is None:
        report.add(letter, "unreadable")
        return False
    knowledge_id, attempt = pointer
    row = deps.knowledge.get(knowledge_id)
    if row is None or row.parse_status == ParseStatus.DELETING:
        report.add(letter, "dropped_deleted", knowledge_id=knowledge_id)
        return True
    body = _json_object(letter.body)
    if letter.queue == ENRICHMENT_QUEUE and body is not None and not body.get("task_token"):
        return _resend_outside_the_count(deps, letter, body, row, attempt, report)
    if row.attempt != attempt and not _redrive_that_could_not_queue(row, attempt):
        report.add(letter, "superseded", knowledge_id=knowledge_id, attempt=row.attempt)
        return True
    if row.parse_status in (ParseStatus.COMPLETED, ParseStatus.CANCELLED, ParseStatus.DRAFT):
        report.add(letter, "nothing_to_do", knowledge_id=knowledge_id, parse_status=row.parse_status.value)
        return True
    if row.parse_status != ParseStatus.FAILED:
        report.add(letter, "in_flight", knowledge_id=knowledge_id, parse_status=row.parse_status.value)
        return False
    fresh = restart(deps, row, frozenset({ParseStatus.FAILED}))
    if fresh is None:  # another redrive (or a reparse) moved it on between the read and the write
        report.add(letter, "superseded", knowledge_id=knowledge_id)
        return True
    if _redrive_that_could_not_queue(fresh, attempt):  # the letter stays: the next redrive tries again
        report.add(letter, "enqueue_failed", knowledge_id=knowledge_id, attempt=fresh.attempt)
        return False
    report.add(letter, "redriven", knowledge_id=knowledge_id, attempt=fresh.attempt)
    return True


def _resend_outside_the_count(
    deps: Dependencies,
    letter: DeadLetter,
    body: dict[str, Any],
    row: Knowledge,
    attempt: int,
    report: RedriveReport,
) -> bool:
    """Work outside the count whose tries ran out (stages/runner.py): done again while its attempt stands."""
    if row.attempt != attempt:
        report.add(letter, "superseded", knowledge_id=row.id, attempt=row.attempt)
    elif row.parse_status in STANDING:
        deps.queue.send_raw(letter.queue, body)
        report.add(letter, "resent", knowledge_id=row.id)
    else:
        report.add(letter, "nothing_to_do", knowledge_id=row.id, parse_status=row.parse_status.value)
    return True


def _redrive_that_could_not_queue(row: Knowledge, letter_attempt: int) -> bool:
    """A later attempt, failed because its first message could not be queued: a redrive's restart whose
    send, or clearing of the dead attempt's data, failed (the letter is still the document's way back)."""
    return (
        row.attempt > letter_attempt
        and row.parse_status == ParseStatus.FAILED
        and row.error_code == SpanErrorCode.ENQUEUE_FAILED
    )


def redrive(deps: Dependencies, queue: str | None, limit: int) -> RedriveReport:
    report = RedriveReport()
    for name in _queues(queue):
        if len(report.outcomes) >= limit:
            break
        letters = deps.queue.receive_dead_letters(name, limit - len(report.outcomes), HOLD_SECONDS)
        for letter in letters:
            try:
                done = _redrive_one(deps, letter, report)
            except Exception:
                # One letter's trouble (a store that does not answer) must not strand the batch: it stays
                # in the DLQ, visible again, for the next redrive.
                logger.exception("redrive of a dead letter failed", extra={"queue": name})
                report.add(letter, "error")
                done = False
            if done:
                deps.queue.delete_dead_letter(letter)
            else:
                deps.queue.release_dead_letter(letter)
    return report
