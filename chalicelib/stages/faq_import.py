"""faq-import queue: one message per FAQ import task (`{"task_id": ...}`), carried out by
chalicelib/faq/importing.run.

A transient failure comes back soon (backoff) and resumes from the saved offset; a throttled embedding
provider puts the import back with a delay without spending a try; the last try (the queue's
maxReceiveCount) marks the task failed and frees the knowledge base before the message goes to the DLQ; a
body that is not an import message is parked in the DLQ at once.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from pydantic import BaseModel, Field, ValidationError

from chalicelib.domain.errors import DeferredStageError
from chalicelib.faq.importing import QUEUE, run
from chalicelib.ports import Dependencies
from chalicelib.services.usage import metered_shares
from chalicelib.stages.runner import come_back_soon, defer_seconds, parse_body, process_batch, receive_count


class ImportMessage(BaseModel):
    task_id: str = Field(min_length=1, max_length=100)
    #: times the import was put back because the embedding provider throttled (not a failed try)
    deferrals: int = Field(default=0, ge=0)
    #: housekeeping's last send of an import that made no progress through its re-sends: it ends failed
    give_up: bool = False


def handle(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    def one(record: SQSRecord) -> None:
        try:
            message = parse_body(record.body, ImportMessage)
        except ValidationError as error:
            deps.queue.dead_letter(QUEUE, record.body, f"not an FAQ import: {error.error_count()} error(s)")
            return
        last_try = receive_count(record) >= deps.settings.stage_max_receives
        # FAQ entries are no documents: an import is its knowledge base's own usage (`run` names it with
        # metering.attribute; an unknown task, which it drops, has no knowledge base and is not stored)
        with metered_shares(deps, QUEUE, record, event, context):
            try:
                run(deps, message.task_id, last_try=last_try, give_up=message.give_up)
            except DeferredStageError as error:
                if message.deferrals < deps.settings.max_throttle_deferrals:
                    delay = defer_seconds(deps, error.delay_seconds)
                    body = {"task_id": message.task_id, "deferrals": message.deferrals + 1}
                    deps.queue.send_raw(QUEUE, body, delay_seconds=delay)  # progress is saved: it resumes
                    return
                come_back_soon(deps, QUEUE, record)
                raise
            except Exception:
                if not last_try:
                    come_back_soon(deps, QUEUE, record)
                raise

    return process_batch(event, context, one)
