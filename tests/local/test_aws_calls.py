"""The per-function call log holds each function to the queue-URL lookup a cold start of it makes, although
one local process caches every function's URLs (chalicelib/local/aws_calls.py)."""

from __future__ import annotations

import boto3
from botocore.stub import Stubber

from chalicelib.adapters.aws_metering import meter_client
from chalicelib.local.aws_calls import CallLog, invoking

URL = "https://sqs.us-east-1.amazonaws.com/123456789012/weknora-docreader"


def test_a_send_by_a_cached_url_counts_as_that_functions_url_lookup() -> None:
    client = meter_client(
        boto3.client("sqs", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    )
    log = CallLog().start()
    try:
        with Stubber(client) as stub:
            stub.add_response("send_message", {"MessageId": "m1", "MD5OfMessageBody": "x"})
            with invoking("ChunkingStage"):  # the URL came from another function's lookup
                client.send_message(QueueUrl=URL, MessageBody="{}")
    finally:
        log.stop()
    calls = {(c.function, c.operation, c.parameters) for c in log.take()}
    assert ("ChunkingStage", "SendMessage", (("QueueUrl", URL),)) in calls
    assert ("ChunkingStage", "GetQueueUrl", (("QueueName", "weknora-docreader"),)) in calls
