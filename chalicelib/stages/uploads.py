"""uploads queue: S3 ObjectCreated notifications of presigned uploads → the same create path as the
multipart upload."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import unquote_plus

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from chalicelib.operations.create import accept_uploaded_object, give_up_uploaded_object
from chalicelib.ports import Dependencies
from chalicelib.stages.runner import process_batch, receive_count


def object_keys(body: str) -> list[str]:
    """Keys of the ObjectCreated records in one S3 notification (the test event has none)."""
    event = json.loads(body)
    if event.get("Event") == "s3:TestEvent":
        return []
    keys = []
    for record in event.get("Records", []):
        if str(record.get("eventName", "")).startswith("ObjectCreated"):
            # S3 URL-encodes keys in notifications (moto also encodes '/'): decode as AWS documents.
            keys.append(unquote_plus(record["s3"]["object"]["key"]))
    return keys


def handle(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    def one(record: SQSRecord) -> None:
        try:
            keys = object_keys(record.body)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            deps.queue.dead_letter("uploads", record.body, f"not an S3 notification: {type(error).__name__}")
            return
        for key in keys:
            try:
                accept_uploaded_object(deps, key)
            except Exception:  # retried by the queue; on its last try the client is told, then it is parked
                if receive_count(record) >= deps.settings.stage_max_receives:
                    give_up_uploaded_object(deps, key)
                raise

    return process_batch(event, context, one)
