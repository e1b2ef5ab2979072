"""One SQS batch through Powertools' partial-failure processor: only failed records are retried."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord


def process_batch(event: dict[str, Any], context: Any, handle: Callable[[SQSRecord], None]) -> dict[str, Any]:
    processor = BatchProcessor(event_type=EventType.SQS)
    return dict(
        process_partial_response(event=event, record_handler=handle, processor=processor, context=context)
    )
