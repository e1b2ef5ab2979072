"""Runs one SQS batch of a stage with the specification's retry semantics.

- Each stage is tried at most `stage_max_receives` times (the queue's maxReceiveCount).
- A permanent error (unsupported type, unparseable file) fails the knowledge at once; the message is
  acknowledged, because a retry cannot help.
- A transient error is retried by SQS; only the last try marks the knowledge `failed`, and the message
  then goes on to the DLQ, where it is kept for inspection and redrive.
- A message that is not even a valid stage payload is parked in the DLQ at once (nothing is lost).
Partial batch failures are reported through Powertools, so one bad record never replays the others.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from .batch import process_batch
from .bootstrap import Services
from .domain.errors import ContinueLater, DeferredStageError, SpanErrorCode, StageError
from .domain.types import Stage, StageMessage
from .observability import stage_outcome

log = logging.getLogger(__name__)


#: monotonic time by which a long stage should hand over to a fresh invocation (None: no limit known)
stage_deadline: ContextVar[float | None] = ContextVar("stage_deadline", default=None)
#: time kept back for the hand-over itself (the checkpoint write and the SQS send)
DEADLINE_MARGIN_SECONDS = 30.0


def deadline_of(context: Any) -> float | None:
    remaining = getattr(context, "get_remaining_time_in_millis", None)
    if remaining is None:
        return None
    return time.monotonic() + remaining() / 1000 - DEADLINE_MARGIN_SECONDS


class InvalidPayload(ValueError):
    pass


def parse_stage_message(body: str) -> StageMessage:
    try:
        data = json.loads(body)
        message = StageMessage(
            str(data["tenant_id"]),
            str(data["knowledge_id"]),
            int(data["attempt"]),
            int(data.get("deferrals", 0)),
        )
    except (ValueError, KeyError, TypeError) as error:
        raise InvalidPayload(f"not a stage message: {error}") from error
    if not message.knowledge_id or message.attempt < 1:
        raise InvalidPayload("not a stage message: empty knowledge_id or attempt < 1")
    return message


def receive_count(record: SQSRecord) -> int:
    try:
        return int(record.attributes.approximate_receive_count or 1)
    except (TypeError, ValueError):
        return 1


def fail_knowledge(svc: Services, message: StageMessage, stage: Stage, code: str, reason: str) -> None:
    svc.knowledge.mark_failed(message.knowledge_id, message.attempt, reason, code)
    svc.tracker.fail_stage(message.knowledge_id, message.attempt, stage, code, reason)


def run_stage(
    svc: Services,
    stage: Stage,
    event: dict[str, Any],
    context: Any,
    work: Callable[[Services, StageMessage], None],
    rollback: Callable[[Services, StageMessage], None] | None = None,
) -> dict[str, Any]:
    """`rollback` is the stage's compensation, run once when the stage fails for good."""

    def give_up(message: StageMessage, code: str, reason: str) -> None:
        if rollback is not None:
            try:
                rollback(svc, message)
            except Exception:  # the failure is still recorded; housekeeping and reparse clean up later
                log.exception("rollback of %s failed", message.knowledge_id)
        fail_knowledge(svc, message, stage, code, reason)

    def handle(record: SQSRecord) -> None:
        try:
            message = parse_stage_message(record.body)
        except InvalidPayload as error:
            log.error("parking an invalid %s message in the DLQ: %s", stage.value, error)
            svc.queue.dead_letter(stage.value, record.body, str(error))
            return
        last_try = receive_count(record) >= svc.settings.stage_max_receives
        token = stage_deadline.set(deadline_of(context))
        note = functools.partial(
            stage_outcome, stage.value, knowledge_id=message.knowledge_id, attempt=message.attempt
        )
        try:
            work(svc, message)
            note("succeeded")
        except ContinueLater:
            svc.queue.send(stage, message)  # progress is checkpointed: a fresh invocation carries on
            note("continued")
            return
        except DeferredStageError as error:
            if message.deferrals < svc.settings.max_throttle_deferrals:
                # Throttled: come back later without spending one of the stage's tries.
                delay = int(min(svc.settings.max_defer_seconds, 900, max(1, error.delay_seconds)))
                deferred = replace(message, deferrals=message.deferrals + 1)
                svc.queue.send(stage, deferred, delay_seconds=delay)
                note("deferred", delay_seconds=delay, deferrals=deferred.deferrals)
                return
            if last_try:
                give_up(
                    message,
                    error.code,
                    f"{error.message} (still throttled after {message.deferrals} deferrals)",
                )
            note("failed" if last_try else "retried", error=error.message)
            raise
        except StageError as error:
            final = error.permanent or last_try
            if final:
                give_up(message, error.code, error.message)
            note("failed" if final else "retried", error=error.message, code=str(error.code))
            if not error.permanent:
                raise
        except Exception as error:
            if last_try:
                reason = f"{stage.value} failed after {svc.settings.stage_max_receives} tries: {error}"
                give_up(message, SpanErrorCode.UNKNOWN, reason)
            note("failed" if last_try else "retried", error=str(error))
            raise
        finally:
            stage_deadline.reset(token)

    return process_batch(event, context, handle)
