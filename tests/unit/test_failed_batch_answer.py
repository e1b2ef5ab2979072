"""A batch whose every record failed is answered with every record in `batchItemFailures` (the triggers
report item failures, and SQS retries them as it would a failed invocation), not raised.

Regression: Powertools' default raised BatchProcessingError, whose text holds each record's whole
traceback, chained causes and their messages included (what a server answered), into the Lambda's log."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from chalicelib.domain.types import Stage, StageMessage
from chalicelib.observability import logger
from chalicelib.stages import runner

from .test_runner_retries import _deps

MARKER = "SECRET-MARKER"


def _work(_deps: Any, _message: StageMessage) -> None:
    try:
        raise ConnectionError(f"{MARKER} the server's answer")
    except ConnectionError as error:
        raise RuntimeError("unclassified") from error


def _event(count: int) -> dict[str, Any]:
    body = json.dumps({"tenant_id": "t", "knowledge_id": "k1", "attempt": 1})
    return {
        "Records": [
            {
                "messageId": f"m-{n}",
                "receiptHandle": f"rh-{n}",
                "body": body,
                "attributes": {"ApproximateReceiveCount": "1"},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:weknora-docreader",
                "awsRegion": "us-east-1",
            }
            for n in range(count)
        ]
    }


@pytest.mark.parametrize("records", [1, 3])
def test_a_batch_whose_every_record_failed_is_answered_with_every_record_and_nothing_raised(
    records: int, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        response = runner.run_stage(_deps(), Stage.DOCREADER, _event(records), None, _work)
    assert response == {"batchItemFailures": [{"itemIdentifier": f"m-{n}"} for n in range(records)]}
    failures = [r for r in caplog.records if r.exc_info]
    assert failures  # the stage's failure is logged, with its traceback, redacted
    for record in failures:  # as the app's own handler writes them
        assert MARKER not in logger.registered_formatter.format(record)
