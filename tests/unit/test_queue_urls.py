"""The SQS adapter uses the queue URLs a function is given (infra/stack.py puts them in its environment) and
looks a queue up (GetQueueUrl, its dead-letter queue through the RedrivePolicy) only when it is not given.
botocore's Stubber fails on any call not queued, so "no lookup" is proven by queueing none."""

from __future__ import annotations

import json

import boto3
from botocore.stub import Stubber

from chalicelib.adapters.queues import SqsTaskQueue
from chalicelib.domain.types import Stage, StageMessage
from chalicelib.settings import QUEUES, dead_letter_queue_url_variable, load_settings, queue_url_variable

KEYS = {"region_name": "us-east-1", "aws_access_key_id": "x", "aws_secret_access_key": "x"}
BASE = "https://sqs.us-east-1.amazonaws.com/123456789012"
NAMES = {"chunking": "weknora-chunking", "docreader": "weknora-docreader"}


def _stub() -> Stubber:
    return Stubber(boto3.client("sqs", **KEYS))


def test_given_urls_are_used_with_no_lookup() -> None:
    stub = _stub()
    queue = SqsTaskQueue(
        stub.client,
        NAMES,
        urls={"chunking": f"{BASE}/weknora-chunking"},
        dead_letter_urls={"chunking": f"{BASE}/weknora-chunking-dlq"},
    )
    message = StageMessage(tenant_id="t", knowledge_id="k", attempt=1)
    stub.add_response(
        "send_message",
        {"MessageId": "m1"},
        {
            "QueueUrl": f"{BASE}/weknora-chunking",
            "MessageBody": json.dumps(message.to_json()),
            "DelaySeconds": 0,
        },
    )
    stub.add_response(
        "change_message_visibility",
        {},
        {"QueueUrl": f"{BASE}/weknora-chunking", "ReceiptHandle": "r", "VisibilityTimeout": 30},
    )
    stub.add_response(
        "send_message",
        {"MessageId": "m2"},
        {
            "QueueUrl": f"{BASE}/weknora-chunking-dlq",
            "MessageBody": "{}",
            "MessageAttributes": {"reason": {"DataType": "String", "StringValue": "poison"}},
        },
    )
    stub.add_response(
        "get_queue_attributes",
        {"Attributes": {"ApproximateNumberOfMessages": "2"}},
        {
            "QueueUrl": f"{BASE}/weknora-chunking",
            "AttributeNames": [
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        },
    )
    with stub:
        queue.send(Stage.CHUNKING, message)
        queue.retry_later("chunking", "r", 30)
        queue.dead_letter("chunking", "{}", "poison")
        assert queue.backlog("chunking") == 2
    stub.assert_no_pending_responses()


def test_a_queue_not_given_is_looked_up_once_and_its_dead_letter_queue_through_its_redrive_policy() -> None:
    stub = _stub()
    queue = SqsTaskQueue(stub.client, NAMES, urls={"chunking": f"{BASE}/weknora-chunking"})
    docreader = f"{BASE}/weknora-docreader"
    stub.add_response("get_queue_url", {"QueueUrl": docreader}, {"QueueName": "weknora-docreader"})
    for _ in range(2):  # the second send reuses the URL
        stub.add_response("send_message", {"MessageId": "m"})
    redrive = {"deadLetterTargetArn": "arn:aws:sqs:us-east-1:123456789012:weknora-docreader-dlq"}
    stub.add_response(
        "get_queue_attributes",
        {"Attributes": {"RedrivePolicy": json.dumps(redrive)}},
        {"QueueUrl": docreader, "AttributeNames": ["RedrivePolicy"]},
    )
    stub.add_response(
        "get_queue_url", {"QueueUrl": f"{docreader}-dlq"}, {"QueueName": "weknora-docreader-dlq"}
    )
    stub.add_response("send_message", {"MessageId": "d"})
    with stub:
        queue.send_raw("docreader", {})
        queue.send_raw("docreader", {})
        queue.dead_letter("docreader", "{}", "poison")
    stub.assert_no_pending_responses()


def test_settings_read_the_urls_by_the_variables_the_template_writes() -> None:
    env = {
        queue_url_variable("faq-import"): f"{BASE}/weknora-faq-import",
        dead_letter_queue_url_variable("faq-import"): f"{BASE}/weknora-faq-import-dlq",
        queue_url_variable("docreader"): f"{BASE}/weknora-docreader",
    }
    settings = load_settings(env)
    assert settings.queue_urls == {
        "faq-import": f"{BASE}/weknora-faq-import",
        "docreader": f"{BASE}/weknora-docreader",
    }
    assert settings.dead_letter_queue_urls == {"faq-import": f"{BASE}/weknora-faq-import-dlq"}
    # the names CloudFormation accepts for a variable ([A-Za-z][A-Za-z0-9_]+), as infra/stack.py writes them
    assert queue_url_variable("faq-import") == "WEKNORA_QUEUE_URL_FAQ_IMPORT"
    assert dead_letter_queue_url_variable("faq-import") == "WEKNORA_DLQ_URL_FAQ_IMPORT"
    assert load_settings({}).queue_urls == {} and len(QUEUES) == 12


def test_a_hyphenated_queue_name_is_overridden_by_a_variable_lambda_accepts() -> None:
    # Lambda allows only [A-Za-z0-9_] in variable names: `faq-import` is FAQ_IMPORT in all three variables.
    settings = load_settings(
        {
            "WEKNORA_QUEUE_FAQ_IMPORT": "custom-faq-import",
            queue_url_variable("faq-import"): "https://sqs.example/faq",
        }
    )
    assert settings.queue_names["faq-import"] == "custom-faq-import"
    assert queue_url_variable("faq-import") == "WEKNORA_QUEUE_URL_FAQ_IMPORT"
    assert settings.queue_urls == {"faq-import": "https://sqs.example/faq"}
