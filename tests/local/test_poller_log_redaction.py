"""A handler's error is logged by the local poller redacted, as the app's own logger does: frames and classes,
not what a server answered. Before, `log.exception` printed the whole chain, the server's words included."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from chalicelib.local.moto_server import MotoServer
from chalicelib.local.pollers import SqsPoller

MARKER = "SECRET-MARKER"


def test_a_raising_handler_is_logged_without_the_servers_words(
    moto_server: MotoServer, caplog: pytest.LogCaptureFixture
) -> None:
    sqs: Any = boto3.client("sqs")
    name = f"poller-{uuid.uuid4().hex[:8]}"
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="{}")

    def handler(event: Any, context: Any) -> None:
        try:
            raise ClientError({"Error": {"Code": "InternalError", "Message": MARKER}}, "GetObject")
        except ClientError as error:
            raise RuntimeError("the stage failed") from error

    arn = f"arn:aws:sqs:us-east-1:123456789012:{name}"
    poller = SqsPoller(function_name="fn", handler=handler, queue_url=url, queue_arn=arn)
    with caplog.at_level(logging.ERROR, logger="chalicelib.local.pollers"):
        result = poller.poll_once()
    assert isinstance(result.error, RuntimeError)
    assert "failed on a batch of 1" in caplog.text and "in handler" in caplog.text
    assert "ClientError: InternalError (GetObject)" in caplog.text and MARKER not in caplog.text
