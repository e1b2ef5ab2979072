"""The per-function call log records the calls each function makes, as made: whether a call by a queue's URL
also stands for a GetQueueUrl depends on that function's environment in the packaged template, which the
IAM check knows (tests/infra/iam_policy.py `RoleBook.requests`, tests/infra/test_queue_urls.py)."""

from __future__ import annotations

import boto3
from botocore.stub import Stubber

from chalicelib.adapters.aws_metering import meter_client
from chalicelib.local.aws_calls import CallLog, invoking

URL = "https://sqs.us-east-1.amazonaws.com/123456789012/weknora-docreader"


def test_a_send_by_url_is_recorded_for_the_function_that_made_it_and_nothing_more() -> None:
    client = meter_client(
        boto3.client("sqs", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    )
    log = CallLog().start()
    try:
        with Stubber(client) as stub:
            stub.add_response("send_message", {"MessageId": "m1", "MD5OfMessageBody": "x"})
            with invoking("ChunkingStage"):
                client.send_message(QueueUrl=URL, MessageBody="{}")
            stub.add_response("send_message", {"MessageId": "m2", "MD5OfMessageBody": "x"})
            client.send_message(QueueUrl=URL, MessageBody="{}")  # outside any function: the test's own
    finally:
        log.stop()
    calls = {(c.function, c.operation, c.parameters) for c in log.take()}
    assert calls == {("ChunkingStage", "SendMessage", (("QueueUrl", URL),))}
