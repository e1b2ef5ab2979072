"""SqsPoller edge cases against moto's real SQS: timeouts, invalid partial responses, batching, attributes."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from typing import Any

import boto3
import pytest

from chalicelib.local.moto_server import MotoServer
from chalicelib.local.pollers import SqsPoller


@pytest.fixture
def queue(moto_server: MotoServer) -> tuple[str, str]:
    sqs: Any = boto3.client("sqs")
    name = f"poller-{uuid.uuid4().hex[:8]}"
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "30"})["QueueUrl"]
    return url, f"arn:aws:sqs:us-east-1:123456789012:{name}"


def make(queue: tuple[str, str], handler: Any, **kw: Any) -> SqsPoller:
    url, arn = queue
    return SqsPoller(function_name="fn", handler=handler, queue_url=url, queue_arn=arn, **kw)


def send(queue: tuple[str, str], n: int) -> list[str]:
    sqs: Any = boto3.client("sqs")
    return [
        sqs.send_message(QueueUrl=queue[0], MessageBody=json.dumps({"i": i}))["MessageId"] for i in range(n)
    ]


def test_record_shape_matches_the_lambda_sqs_event(queue: tuple[str, str]) -> None:
    sqs: Any = boto3.client("sqs")
    mid = sqs.send_message(
        QueueUrl=queue[0],
        MessageBody="hello",
        MessageAttributes={
            "kind": {"DataType": "String", "StringValue": "doc"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\x01"},
        },
    )["MessageId"]
    events: list[dict[str, Any]] = []
    make(queue, lambda ev, ctx: events.append(ev)).poll_once()
    (rec,) = events[0]["Records"]
    assert rec["messageId"] == mid and rec["body"] == "hello" and rec["receiptHandle"]
    assert (
        rec["eventSource"] == "aws:sqs"
        and rec["eventSourceARN"] == queue[1]
        and rec["awsRegion"] == "us-east-1"
    )
    assert rec["attributes"]["ApproximateReceiveCount"] == "1" and "SentTimestamp" in rec["attributes"]
    assert rec["md5OfBody"] == "5d41402abc4b2a76b9719d911017c592"  # md5("hello")
    assert rec["messageAttributes"]["kind"]["stringValue"] == "doc"
    assert rec["messageAttributes"]["kind"]["dataType"] == "String"
    assert base64.b64decode(rec["messageAttributes"]["blob"]["binaryValue"]) == b"\x00\x01"


def test_a_handler_that_overruns_its_timeout_fails_the_whole_batch(queue: tuple[str, str]) -> None:
    send(queue, 2)

    def slow(ev: Any, ctx: Any) -> None:
        time.sleep(0.3)
        assert ctx.get_remaining_time_in_millis() == 0

    result = make(queue, slow, timeout_seconds=0.1, batch_size=5, retry_delay_seconds=0).poll_once()
    assert isinstance(result.error, TimeoutError) and result.deleted == [] and len(result.failed) == 2


def test_invalid_batch_item_failures_fail_the_whole_batch(queue: tuple[str, str]) -> None:
    send(queue, 2)
    result = make(
        queue, lambda ev, ctx: {"batchItemFailures": [{"itemIdentifier": "not-in-batch"}]}, batch_size=5
    ).poll_once()
    assert result.deleted == [] and len(result.failed) == 2


def test_without_report_batch_item_failures_the_response_is_ignored(queue: tuple[str, str]) -> None:
    # What Lambda does when FunctionResponseTypes is missing: every message is deleted.
    ids = send(queue, 2)
    poller = make(
        queue,
        lambda ev, ctx: {"batchItemFailures": [{"itemIdentifier": ids[0]}]},
        batch_size=5,
        report_batch_item_failures=False,
    )
    assert sorted(poller.poll_once().deleted) == sorted(ids)


def test_failed_messages_keep_the_queue_visibility_timeout_by_default(queue: tuple[str, str]) -> None:
    send(queue, 1)
    poller = make(queue, lambda ev, ctx: 1 / 0)
    assert poller.poll_once().failed
    assert poller.poll_once().empty  # still invisible for the queue's 30 s
    assert poller.depth() == (0, 1)


def test_batches_bigger_than_ten_are_gathered_and_capped(queue: tuple[str, str]) -> None:
    send(queue, 15)
    sizes: list[int] = []
    poller = make(queue, lambda ev, ctx: sizes.append(len(ev["Records"])), batch_size=12)
    poller.poll_once()
    assert sizes == [12]
    assert poller.depth() == (3, 0)


def test_background_threads_follow_the_concurrency_setting(queue: tuple[str, str]) -> None:
    seen: list[str] = []
    poller = make(queue, lambda ev, ctx: seen.extend(r["messageId"] for r in ev["Records"]), concurrency=2)
    poller.start()
    try:
        assert poller.running and len({t.name for t in poller._threads}) == 2
        ids = send(queue, 4)
        deadline = time.monotonic() + 20
        while len(seen) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(seen) == sorted(ids)
    finally:
        poller.stop()
    assert not poller.running


class CountingSqs:
    """The SQS client, counting the receives in flight at once (the most seen)."""

    def __init__(self) -> None:
        self.inner: Any = boto3.client("sqs")
        self.in_flight = self.most = 0
        self.lock = threading.Lock()

    def receive_message(self, **kw: Any) -> Any:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
        try:
            return self.inner.receive_message(**kw)
        finally:
            with self.lock:
                self.in_flight -= 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_idle_threads_leave_one_long_poll_and_busy_ones_bring_the_others_in(queue: tuple[str, str]) -> None:
    """As the ESM scales its pollers with traffic: an idle queue has one receive in flight however many
    threads there are; while invocations run, the other threads poll, so concurrency is not lost."""
    sqs = CountingSqs()
    release = threading.Event()
    running: list[str] = []

    def hold(ev: dict[str, Any], ctx: Any) -> None:
        running.extend(r["messageId"] for r in ev["Records"])
        release.wait(20)

    poller = make(queue, hold, concurrency=3, sqs_client=sqs)
    poller.start()
    try:
        time.sleep(2.5)  # two long polls of 1 s each, back to back, on an idle queue
        assert sqs.most == 1
        ids = send(queue, 3)
        deadline = time.monotonic() + 20
        while len(running) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(running) == sorted(ids)  # three invocations at once: every thread came in
    finally:
        release.set()
        poller.stop()
    assert not poller.running
