"""Runs one SQS batch of a stage or a state machine task with the specification's retry semantics.

Main stages (`run_stage`):
- each stage is tried at most `stage_max_receives` times (the queue's maxReceiveCount);
- a permanent error (unsupported type, unparseable file) fails the knowledge at once and the message is
  acknowledged, because a retry cannot help;
- a transient error is retried by SQS; only the last try marks the knowledge `failed`, and the message
  then goes on to the DLQ, where it is kept for inspection and redrive;
- a body that is not a valid message is parked in the DLQ at once (nothing is lost).

State machine tasks (`run_task`): the worker answers the task token once its work is durable; a row that
moved on is answered "skipped"; the last try writes the failure on the subtask's or image's span and answers
a failure, which the state machine catches; work near the Lambda deadline continues in a fresh message.
Partial batch failures are reported through Powertools, so one bad record never replays the others.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from pydantic import BaseModel, ValidationError

from chalicelib.domain import metering
from chalicelib.domain.errors import (
    AwaitingTurn,
    ContinueLater,
    DeferredStageError,
    SpanErrorCode,
    StageError,
    provider_code,
)
from chalicelib.domain.events import EventType as Announced
from chalicelib.domain.types import Knowledge, ParseStatus, SpanStatus, Stage, StageMessage
from chalicelib.observability import logger, stage_outcome
from chalicelib.ports import Dependencies, ModelThrottled, ModelUnavailable, ServiceUnreachable
from chalicelib.ports.storage import StorageRefused, StorageUnavailable
from chalicelib.services.deadline import deadline_of, stage_deadline
from chalicelib.services.events import failed_again, knowledge_changed_by_id
from chalicelib.services.fairness import attempt_leaves_pipeline
from chalicelib.services.stage_queue import enqueue
from chalicelib.services.stored_size import remove_uncounted_outputs
from chalicelib.services.usage import metered_invocation
from chalicelib.stages.messages import (
    ImageTaskModel,
    StageMessageModel,
    SubtaskMessageModel,
    TaskMessageModel,
)

M = TypeVar("M", bound=BaseModel)
T = TypeVar("T", bound=TaskMessageModel)
StageWork = Callable[[Dependencies, StageMessage], None]
#: a stage's compensation when it fails for good; False: the attempt is not failed (another copy of the
#: message finished it meanwhile), so the failure is not recorded
Rollback = Callable[[Dependencies, StageMessage], bool]
TaskWork = Callable[[Dependencies, Any], dict[str, Any]]


def process_batch(event: dict[str, Any], context: Any, handle: Callable[[SQSRecord], None]) -> dict[str, Any]:
    """One SQS batch through Powertools' partial-failure processor: only failed records are retried. A batch
    whose every record failed is answered too, every record in `batchItemFailures` (the triggers report
    item failures), not raised: the raised error's text would carry each record's whole traceback, with
    the messages the servers answered, into the Lambda's log."""
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    return dict(
        process_partial_response(event=event, record_handler=handle, processor=processor, context=context)
    )


def parse_body(body: str, model: type[M]) -> M:
    """The record's body as `model` (Powertools Parser); raises ValidationError."""
    from aws_lambda_powertools.utilities.parser import parse

    parsed: M = parse(event=body, model=model)  # type: ignore[call-overload]
    return parsed


#: a transient failure comes back after 5 s, 15 s, 45 s, … (jittered, capped): a retry soon, not after the
#: queue's visibility timeout (90 minutes on the docreader queue)
RETRY_BASE_SECONDS = 5
RETRY_MAX_SECONDS = 900


def retry_delay(receive_count: int, rng: Callable[[], float] = random.random) -> int:
    ceiling = min(RETRY_MAX_SECONDS, RETRY_BASE_SECONDS * 3 ** max(0, receive_count - 1))
    return max(1, int(ceiling * (0.5 + rng() / 2)))


def come_back_soon(deps: Dependencies, queue: str, record: SQSRecord) -> None:
    """Before a record is reported failed: shorten its invisibility to the backoff delay."""
    try:
        deps.queue.retry_later(queue, record.receipt_handle, retry_delay(receive_count(record)))
    except Exception:  # the message still comes back, after the queue's own visibility timeout
        logger.exception("could not shorten a failed message's visibility", extra={"queue": queue})


def defer_seconds(deps: Dependencies, wanted: float) -> int:
    """How long a deferred message waits: what was asked, within the settings' cap and SQS's 900 s."""
    return int(min(deps.settings.max_defer_seconds, 900, max(1, wanted)))


def receive_count(record: SQSRecord) -> int:
    try:
        return int(record.attributes.approximate_receive_count or 1)
    except (TypeError, ValueError):
        return 1


def fail_knowledge(deps: Dependencies, message: StageMessage, stage: Stage, code: str, reason: str) -> None:
    failed = deps.knowledge.mark_failed(message.knowledge_id, message.attempt, reason, code)
    if failed:
        knowledge_changed_by_id(
            deps,
            message.knowledge_id,
            Announced.KNOWLEDGE_FAILED,
            status=ParseStatus.FAILED.value,
            attempt=message.attempt,
            error_code=code,
            error_message=reason,
        )
    if failed or _ended_failed(deps, message):
        # only an attempt that ended failed gets its failure on its spans: a cancel's trace (closed
        # cancelled) and a deleted document (its spans gone) are left as they are
        deps.tracker.fail_stage(message.knowledge_id, message.attempt, stage, code, reason)
    attempt_leaves_pipeline(deps, message.tenant_id, message.knowledge_id, message.attempt)
    # last: an attempt failed before it was indexed (the quota refused it, a stage gave up) leaves nothing
    # stored that no row counts (a redelivery finds nothing left; a row that moved on is left alone)
    remove_uncounted_outputs(deps, message.knowledge_id, message.attempt)


def _ended_failed(deps: Dependencies, message: StageMessage) -> bool:
    """The row is failed at the message's attempt already (housekeeping, or another copy, got there first)."""
    row = deps.knowledge.get(message.knowledge_id)
    return row is not None and row.attempt == message.attempt and row.parse_status == ParseStatus.FAILED


def run_stage(
    deps: Dependencies,
    stage: Stage,
    event: dict[str, Any],
    context: Any,
    work: StageWork,
    rollback: Rollback | None = None,
) -> dict[str, Any]:
    """`rollback` is the stage's compensation, run once when the stage fails for good."""

    def give_up(message: StageMessage, code: str, reason: str) -> None:
        if rollback is not None:
            try:
                if not rollback(deps, message):
                    logger.info(
                        "a stray copy failed after the attempt moved on", extra={"stage": stage.value}
                    )
                    attempt_leaves_pipeline(deps, message.tenant_id, message.knowledge_id, message.attempt)
                    return
            except Exception:  # the failure is still recorded; reparse cleans up what is left
                logger.exception("rollback failed", extra={"knowledge_id": message.knowledge_id})
        fail_knowledge(deps, message, stage, code, reason)

    def handle(record: SQSRecord) -> None:
        try:
            message = parse_body(record.body, StageMessageModel).to_domain()
        except ValidationError as error:
            reason = f"not a {stage.value} message: {error.error_count()} validation error(s)"
            logger.error("parking an invalid message in the DLQ", extra={"queue": stage.value})
            deps.queue.dead_letter(stage.value, record.body, reason)
            return
        with metered_invocation(
            deps, stage.value, message.knowledge_id, message.attempt, record, event, context
        ):
            attempt_work(message, record)

    def attempt_work(message: StageMessage, record: SQSRecord) -> None:
        if receive_count(record) > 1:
            # the try before may have failed the attempt and died before it announced it (this try then only
            # drops the message): announced again, under the same id
            failed_again(deps, deps.knowledge.get(message.knowledge_id), message.attempt)
        last_try = receive_count(record) >= deps.settings.stage_max_receives
        token = stage_deadline.set(deadline_of(context))
        note = functools.partial(
            stage_outcome, stage.value, knowledge_id=message.knowledge_id, attempt=message.attempt
        )
        try:
            work(deps, message)
            note("succeeded")
        except AwaitingTurn as waiting:  # not its turn yet: back on the queue with its ticket, nothing spent
            waits = replace(message, door_ticket=waiting.ticket)
            delay = int(min(900, max(1, waiting.delay_seconds)))
            enqueue(deps, stage, waits, delay_seconds=delay, waiting_now=True)
            note("awaiting_turn")
            return
        except ContinueLater as more:
            # Progress is durable: a fresh message carries on, behind the other documents' messages
            # (after the continuation's delay, if it asks for one; SQS allows 900 s at most).
            continued = message if more.offset is None else replace(message, offset=more.offset)
            if more.cursor is not None:
                continued = replace(continued, cursor=more.cursor)
            if more.counts is not None:
                continued = replace(continued, counts=dict(more.counts))
            enqueue(deps, stage, continued, delay_seconds=int(min(900, max(0, more.delay_seconds))))
            note("continued", offset=more.offset)
            return
        except DeferredStageError as error:
            if message.deferrals < deps.settings.max_throttle_deferrals:
                # Throttled: come back later without spending one of the stage's tries.
                delay = defer_seconds(deps, error.delay_seconds)
                deferred = replace(message, deferrals=message.deferrals + 1)
                enqueue(deps, stage, deferred, delay_seconds=delay)
                note("deferred", delay_seconds=delay, deferrals=deferred.deferrals)
                return
            if last_try:
                give_up(
                    message,
                    error.code,
                    f"{error.message} (still throttled after {message.deferrals} deferrals)",
                )
            note("failed" if last_try else "retried", error=error.message)
            if not last_try:
                come_back_soon(deps, stage.value, record)
            raise
        except StageError as error:
            final = error.permanent or last_try
            if final:
                give_up(message, error.code, error.message)
            note("failed" if final else "retried", error=error.message, code=str(error.code))
            if not error.permanent:
                if not last_try:
                    come_back_soon(deps, stage.value, record)
                raise
        except StorageRefused as error:  # the backend refuses its keys or has no bucket: no retry cures it
            give_up(message, error.code, error.message)
            note("failed", error=error.message, code=error.code)
        except StorageUnavailable as error:  # the backend did not serve the call (5xx, throttled): retried
            if last_try:
                give_up(message, error.code, error.message)
            else:
                come_back_soon(deps, stage.value, record)
            note("failed" if last_try else "retried", error=error.message, code=error.code)
            raise
        except Exception as error:  # a bug or an unclassified failure: retried, and on the last try recorded
            if last_try:
                reason = (
                    f"{stage.value} failed after {deps.settings.stage_max_receives} tries "
                    f"({type(error).__name__}); the message is kept in the dead-letter queue"
                )
                give_up(message, SpanErrorCode.UNKNOWN, reason)
            else:
                come_back_soon(deps, stage.value, record)
            logger.exception("stage failed", extra={"stage": stage.value, "last_try": last_try})
            note("failed" if last_try else "retried", error=type(error).__name__)
            raise
        finally:
            stage_deadline.reset(token)

    return process_batch(event, context, handle)


class Skip(Exception):
    """The row moved on (superseded, cancelled, deleted): answer the token without doing the work."""


def task_knowledge(deps: Dependencies, task: TaskMessageModel, *statuses: ParseStatus) -> Knowledge:
    return checked_task_row(deps.knowledge.get(task.knowledge_id), task, *statuses)


def checked_task_row(
    knowledge: Knowledge | None, task: TaskMessageModel, *statuses: ParseStatus
) -> Knowledge:
    """The task's row as just read, if it is still the task's attempt in one of `statuses`; else Skip."""
    if knowledge is None or knowledge.attempt != task.attempt or knowledge.parse_status not in statuses:
        raise Skip("superseded, cancelled or deleted")
    metering.attribute(knowledge.kb_id, knowledge.tenant_id)
    return knowledge


def _span_of(body: TaskMessageModel) -> tuple[Stage, str] | None:
    """The span a counted piece of work writes, as enrichment.run and multimodal.run name it; None for
    the plan, whose timeout the state machine records on the row itself (FailDocument)."""
    if isinstance(body, SubtaskMessageModel):
        return Stage.POSTPROCESS, body.span_id
    if isinstance(body, ImageTaskModel):
        return Stage.MULTIMODAL, body.span_id
    return None


def _note_never_done(deps: Dependencies, body: TaskMessageModel) -> None:
    _close_open_span(
        deps,
        body,
        SpanErrorCode.TASK_TIMEOUT,
        "the state machine stopped waiting for this task before it was done "
        "(HeartbeatSeconds or TimeoutSeconds ran out): its work was dropped; reparse to redo it",
    )


def _failure_code(error: BaseException) -> str:
    """The error's own stable code when its class has one (StageError, ModelRequestError, WriteRefused,
    StorageUnavailable, …), else `unknown`: only a code, never a server's words (`provider_code`'s rule)."""
    code = getattr(error, "code", None)
    return str(code) if isinstance(code, str) and provider_code(code) else SpanErrorCode.UNKNOWN.value


def _note_given_up(deps: Dependencies, body: TaskMessageModel, error: BaseException) -> None:
    """The last try of a subtask or an image failed: its span says so (a code and the error's class only)."""
    code = _failure_code(error)
    _close_open_span(
        deps,
        body,
        code,
        f"failed on its last try ({code}, {type(error).__name__}): its work was dropped; reparse to redo it",
    )


def _close_open_span(deps: Dependencies, body: TaskMessageModel, code: str, message: str) -> None:
    """Writes the subtask's or image's span failed, unless it is closed already (a redelivered copy writes nothing
    twice) or the attempt is over (deleted, superseded, cancelled, failed: its spans are closed)."""
    placed = _span_of(body)
    if placed is None:
        return
    stage, span_id = placed
    knowledge = deps.knowledge.get(body.knowledge_id)
    if (
        knowledge is None
        or knowledge.attempt != body.attempt
        or knowledge.parse_status
        not in (ParseStatus.PROCESSING, ParseStatus.FINALIZING, ParseStatus.COMPLETED)
    ):
        return  # deleted, superseded, cancelled or failed: that attempt's spans are closed already
    earlier = deps.spans.get(knowledge.id, knowledge.attempt, span_id)
    if earlier is not None and earlier.status not in (SpanStatus.PENDING, SpanStatus.RUNNING):
        return  # it was closed: by its own answer, or by an earlier copy of this message
    deps.tracker.subspan(
        knowledge, stage, span_id, SpanStatus.FAILED, {"done": False}, error_code=code, error_message=message
    )


def still_awaited(deps: Dependencies, task: str, body: TaskMessageModel, token: str) -> bool:
    """Heartbeats the token; False once the state machine no longer waits for it."""
    try:
        if deps.workflow.task_heartbeat(token):
            return True
    except ServiceUnreachable:  # unanswered (throttled): the work goes on, its answer will tell
        logger.warning("task heartbeat unanswered", extra={"task": task}, exc_info=True)
        return True
    logger.warning(
        "the state machine no longer waits for this task: dropped",
        extra={"task": task, "knowledge_id": body.knowledge_id, "attempt": body.attempt},
    )
    _note_never_done(deps, body)
    return False


def run_task(
    deps: Dependencies,
    event: dict[str, Any],
    context: Any,
    model: type[T],
    work: Callable[[Dependencies, T], dict[str, Any] | None],
    task: str,
    settle: Callable[[Dependencies, T], None] | None = None,
    given_up: Callable[[Dependencies, T], None] | None = None,
) -> dict[str, Any]:
    """Runs `.waitForTaskToken` tasks: the worker answers its token once the work is durable (or, when
    the work returns None, the work has handed the token on to whoever answers it). `settle` runs right
    before a success answer, skipped or not (an enrichment subtask releases its slot there); a failure
    answer leaves the settling to the state machine's Catch. When the last try fails, the subtask's or
    image's span is written failed and `given_up` runs (the summary's failure rule), both before the
    failure answer, so the Catch that releases the slot sees them. Work outside the count (no token) has no
    Catch: its last failed try leaves the message to the queue's DLQ, for a redrive.

    The work may raise ContinueLater when the invocation nears its deadline with its progress durable: the
    same message goes back on the queue at once (its token heartbeaten, not answered), and the next
    invocation carries on from what is stored.

    The worker heartbeats the token when it takes the message and before it defers it: the state's
    HeartbeatSeconds counts from the message's send, queue wait included, so each pickup restarts the
    machine's wait. A heartbeat refused because the token is closed (the machine timed out, the task was
    answered, the execution ended) drops the message without the work; a counted subtask or image that
    was never done says so on its span."""

    def handle(record: SQSRecord) -> None:
        try:
            body = parse_body(record.body, model)
        except ValidationError as error:
            deps.queue.dead_letter(task, record.body, f"not a {task} task: {error.error_count()} error(s)")
            return
        knowledge_id = str(getattr(body, "knowledge_id", ""))
        with metered_invocation(
            deps, task, knowledge_id, int(getattr(body, "attempt", 0)), record, event, context
        ):
            answer(body, record)

    def answer(body: T, record: SQSRecord) -> None:
        deadline = stage_deadline.set(deadline_of(context))
        try:
            attempt_task(body, record)
        finally:
            stage_deadline.reset(deadline)

    def attempt_task(body: T, record: SQSRecord) -> None:
        token = str(getattr(body, "task_token", ""))  # empty: work outside the state machine's count
        try:
            if token and not still_awaited(deps, task, body, token):
                return
            output = work(deps, body)
        except Skip as skipped:
            if token:
                if settle is not None:
                    settle(deps, body)
                deps.workflow.task_success(token, {"skipped": True, "reason": str(skipped)})
            return
        except ContinueLater:  # out of time, progress stored: a fresh message of the same task carries on
            if token and not still_awaited(deps, task, body, token):
                return
            deps.queue.send_raw(task, json.loads(record.body), delay_seconds=0)
            logger.info("task continued in a fresh message", extra={"task": task})
            return
        except Exception as error:
            deferrals = body.deferrals
            if isinstance(error, ModelThrottled | ModelUnavailable) and (
                deferrals < deps.settings.max_throttle_deferrals
            ):
                # The model asked to wait: the same task comes back later as its own message, without
                # spending one of its tries (as a stage's deferral; the state machine's timeout still holds),
                # unless the machine stopped waiting meanwhile (TimeoutSeconds ran out during the work).
                if token and not still_awaited(deps, task, body, token):
                    return
                wait = getattr(error, "retry_after", None) or retry_delay(deferrals + 1)
                delay = defer_seconds(deps, wait)
                again = {**json.loads(record.body), "deferrals": deferrals + 1}
                deps.queue.send_raw(task, again, delay_seconds=delay)
                logger.info(
                    "task deferred: the model asked to wait",
                    extra={"task": task, "delay_seconds": delay, "deferrals": deferrals + 1},
                )
                return
            if receive_count(record) >= deps.settings.stage_max_receives:
                logger.exception("task failed on its last try", extra={"task": task})
                try:
                    _note_given_up(deps, body, error)
                    if given_up is not None:
                        given_up(deps, body)
                finally:  # the machine's Catch still hears of it, whatever the bookkeeping met
                    if token:
                        deps.workflow.task_failure(token, f"{task}.failed", type(error).__name__)
                if token:
                    return
                # work outside the count has no Catch to hear of it (an edit's graph refresh): it fails into
                # the DLQ, whose redrive sends it again while its attempt stands (operations/dlq.py)
            come_back_soon(deps, task, record)
            raise
        if token and output is not None:  # None: the work answers the token itself, later (the wiki)
            if settle is not None:
                settle(deps, body)
            deps.workflow.task_success(token, output)

    return process_batch(event, context, handle)
