"""Local stand-in for the Lambda SQS event-source mapping (ESM), driven by the Chalice app's registry.

TEST DOUBLE: on AWS the Lambda service polls SQS and invokes the function. moto's own ESM is not honest (it
fires inside SendMessage, one record per call, fake receive counts, no partial batch response), so this module
polls moto's queues for real and invokes the handler in-process. What stays real is SQS: message ids,
receipt handles, receive counts, visibility timeouts and the RedrivePolicy that moves poison messages to
the DLQ.
What is emulated: batching, the function timeout (detected after the fact: a handler cannot be killed
in-process), concurrency/scaling, and the ``ReportBatchItemFailures`` response handling.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3

from chalicelib.local.moto_server import ACCOUNT_ID
from chalicelib.observability import log_failure

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any], Any], Any]
DuplicatePredicate = Callable[[dict[str, Any]], bool]


@dataclass
class LambdaContext:
    """The attributes of the real Lambda context object that handlers and Powertools read."""

    function_name: str
    memory_limit_in_mb: int
    invoked_function_arn: str
    aws_request_id: str
    timeout_seconds: float
    function_version: str = "$LATEST"
    log_group_name: str = ""
    log_stream_name: str = "local"
    identity: Any = None
    client_context: Any = None
    _deadline: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        if not self._deadline:
            self._deadline = time.monotonic() + self.timeout_seconds
        if not self.log_group_name:
            self.log_group_name = f"/aws/lambda/{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))

    @property
    def timed_out(self) -> bool:
        return time.monotonic() > self._deadline


def make_context(
    function_name: str, *, region: str, timeout_seconds: float = 60.0, memory_mb: int = 128
) -> LambdaContext:
    return LambdaContext(
        function_name=function_name,
        memory_limit_in_mb=memory_mb,
        invoked_function_arn=f"arn:aws:lambda:{region}:{ACCOUNT_ID}:function:{function_name}",
        aws_request_id=str(uuid.uuid4()),
        timeout_seconds=timeout_seconds,
    )


@dataclass
class BatchResult:
    """What one ESM poll did: message ids handed to the handler and how each one ended."""

    received: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    error: BaseException | None = None
    duplicates_sent: int = 0

    @property
    def empty(self) -> bool:
        return not self.received


def _lambda_message_attributes(attrs: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, a in attrs.items():
        entry: dict[str, Any] = {
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": a["DataType"],
        }
        if "StringValue" in a:
            entry["stringValue"] = a["StringValue"]
        if "BinaryValue" in a:
            entry["binaryValue"] = base64.b64encode(a["BinaryValue"]).decode("ascii")
        out[name] = entry
    return out


def sqs_record(message: Mapping[str, Any], *, queue_arn: str, region: str) -> dict[str, Any]:
    """One record of the Lambda SQS event, built from a real ReceiveMessage result."""
    record: dict[str, Any] = {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes", {})),
        "messageAttributes": _lambda_message_attributes(message.get("MessageAttributes", {})),
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }
    if "MD5OfMessageAttributes" in message:
        record["md5OfMessageAttributes"] = message["MD5OfMessageAttributes"]
    return record


class SqsPoller:
    """Stands in for one Lambda event-source mapping: SQS queue → function (see the module docstring).

    ``retry_delay_seconds``: after a failure the failed messages are made visible again after this many
    seconds (``ChangeMessageVisibility``); ``None`` keeps the queue's own visibility timeout, as on AWS.
    ``duplicate_predicate``: records for which it returns True are delivered once more (their body and
    attributes are re-sent after a successful invocation) to exercise at-least-once handling.
    """

    def __init__(
        self,
        *,
        function_name: str,
        handler: Handler,
        queue_url: str,
        queue_arn: str,
        batch_size: int = 1,
        maximum_batching_window_in_seconds: float = 0,
        region: str = "us-east-1",
        retry_delay_seconds: int | None = None,
        timeout_seconds: float = 60.0,
        memory_mb: int = 128,
        concurrency: int = 1,
        wait_time_seconds: int = 1,
        report_batch_item_failures: bool = True,
        duplicate_predicate: DuplicatePredicate | None = None,
        sqs_client: Any = None,
    ) -> None:
        self.function_name = function_name
        self.handler = handler
        self.queue_url = queue_url
        self.queue_arn = queue_arn
        # SQS returns at most 10 per ReceiveMessage; a bigger ESM batch is gathered over several calls.
        self.batch_size = max(1, batch_size)
        self.window = float(maximum_batching_window_in_seconds)
        self.region = region
        self.retry_delay_seconds = retry_delay_seconds
        self.timeout_seconds = timeout_seconds
        self.memory_mb = memory_mb
        self.concurrency = max(1, concurrency)
        self.wait_time_seconds = wait_time_seconds
        self.report_batch_item_failures = report_batch_item_failures
        self.duplicate_predicate = duplicate_predicate
        self.sqs: Any = sqs_client or boto3.client("sqs", region_name=region)
        self._duplicate_ids: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # Background threads scale with demand (as the ESM adds pollers for a busy queue): while no
        # invocation runs one thread polls, and each running invocation lets one more poll.
        self._demand = threading.Condition()
        self._receiving = 0
        self._busy = 0
        self.invocations = 0

    # ---- one poll ---------------------------------------------------------------------------------------

    def _receive(self, max_messages: int, wait: int) -> list[dict[str, Any]]:
        resp = self.sqs.receive_message(
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=max(1, min(10, max_messages)),
            WaitTimeSeconds=wait,
            AttributeNames=["All"],
            MessageAttributeNames=["All"],
        )
        return list(resp.get("Messages", []))

    def _gather(self, wait: int, use_window: bool) -> list[dict[str, Any]]:
        messages = self._receive(self.batch_size, wait)
        if not messages:
            return messages
        deadline = time.monotonic() + (self.window if use_window else 0)
        while len(messages) < self.batch_size:
            remaining = deadline - time.monotonic()
            more = self._receive(self.batch_size - len(messages), 0)
            if not more and remaining <= 0:
                break
            messages.extend(more)
            if not more:
                time.sleep(min(0.2, remaining))
        return messages

    def poll_once(self, wait_time_seconds: int = 0, use_batching_window: bool = False) -> BatchResult:
        """Receive one batch, invoke the handler, settle the messages. Returns what happened."""
        return self._handle(self._gather(wait_time_seconds, use_batching_window))

    def _handle(self, messages: list[dict[str, Any]]) -> BatchResult:
        """Invoke the handler on a received batch and settle its messages."""
        result = BatchResult(received=[m["MessageId"] for m in messages])
        if not messages:
            return result
        records = [sqs_record(m, queue_arn=self.queue_arn, region=self.region) for m in messages]
        by_id = {r["messageId"]: r for r in records}
        failed_ids = self._invoke(records, result)
        ok = [r for r in records if r["messageId"] not in failed_ids]
        self._delete(ok)
        result.deleted = [r["messageId"] for r in ok]
        result.failed = [mid for mid in by_id if mid in failed_ids]
        if failed_ids and self.retry_delay_seconds is not None:
            self._make_visible([by_id[m] for m in result.failed], self.retry_delay_seconds)
        result.duplicates_sent = self._send_duplicates(ok)
        return result

    def _invoke(self, records: list[dict[str, Any]], result: BatchResult) -> set[str]:
        """Call the handler; return the ids that failed (all of them on a raise or a timeout)."""
        all_ids = {r["messageId"] for r in records}
        ctx = make_context(
            self.function_name,
            region=self.region,
            timeout_seconds=self.timeout_seconds,
            memory_mb=self.memory_mb,
        )
        with self._lock:
            self.invocations += 1
        try:
            response = self.handler({"Records": records}, ctx)
        except Exception as exc:
            # redacted as the app's own logger does: a handler's error may quote what a server answered
            log_failure(
                log, exc, "%s failed on a batch of %d; no message deleted", self.function_name, len(records)
            )
            result.error = exc
            return all_ids
        if ctx.timed_out:
            # Lambda would have killed the invocation: nothing is deleted, whatever it returned.
            log.error("%s ran past its %.0fs timeout: batch failed", self.function_name, ctx.timeout_seconds)
            result.error = TimeoutError(f"{self.function_name} exceeded {ctx.timeout_seconds}s")
            return all_ids
        if not self.report_batch_item_failures or not isinstance(response, dict):
            return set()
        failures = response.get("batchItemFailures")
        if not failures:
            return set()
        ids = {f.get("itemIdentifier") if isinstance(f, dict) else None for f in failures}
        if None in ids or "" in ids or not ids <= all_ids:
            # AWS: an empty or unknown itemIdentifier fails the whole batch.
            log.error("%s: invalid batchItemFailures %r: whole batch failed", self.function_name, failures)
            return all_ids
        return {i for i in ids if isinstance(i, str)}

    def _delete(self, records: list[dict[str, Any]]) -> None:
        if not records:
            return
        entries = [{"Id": str(i), "ReceiptHandle": r["receiptHandle"]} for i, r in enumerate(records)]
        for start in range(0, len(entries), 10):
            resp = self.sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=entries[start : start + 10])
            for f in resp.get("Failed", []):
                log.warning("%s: delete failed: %s", self.function_name, f)

    def _make_visible(self, records: list[dict[str, Any]], delay: int) -> None:
        for r in records:
            self.sqs.change_message_visibility(
                QueueUrl=self.queue_url, ReceiptHandle=r["receiptHandle"], VisibilityTimeout=delay
            )

    def _send_duplicates(self, records: list[dict[str, Any]]) -> int:
        if self.duplicate_predicate is None:
            return 0
        sent = 0
        for r in records:
            with self._lock:
                if r["messageId"] in self._duplicate_ids:
                    continue  # a copy we made: deliver it only once more, not forever
            if not self.duplicate_predicate(r):
                continue
            kw: dict[str, Any] = {"QueueUrl": self.queue_url, "MessageBody": r["body"]}
            attrs = self._raw_message_attributes(r["messageAttributes"])
            if attrs:
                kw["MessageAttributes"] = attrs
            if "MessageGroupId" in r["attributes"]:
                kw["MessageGroupId"] = r["attributes"]["MessageGroupId"]
                kw["MessageDeduplicationId"] = str(uuid.uuid4())
            new_id = self.sqs.send_message(**kw)["MessageId"]
            with self._lock:
                self._duplicate_ids.add(new_id)
            sent += 1
        return sent

    @staticmethod
    def _raw_message_attributes(attrs: Mapping[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, a in attrs.items():
            entry: dict[str, Any] = {"DataType": a["dataType"]}
            if "stringValue" in a:
                entry["StringValue"] = a["stringValue"]
            if "binaryValue" in a:
                entry["BinaryValue"] = base64.b64decode(a["binaryValue"])
            out[name] = entry
        return out

    # ---- queue state --------------------------------------------------------------------------------------

    def depth(self) -> tuple[int, int]:
        """(visible + delayed, in flight) messages on the queue."""
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        visible = int(attrs.get("ApproximateNumberOfMessages", 0)) + int(
            attrs.get("ApproximateNumberOfMessagesDelayed", 0)
        )
        return visible, int(attrs.get("ApproximateNumberOfMessagesNotVisible", 0))

    # ---- background mode ------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def start(self) -> None:
        # A thread that outlived stop() (still in a handler) keeps polling once the flag is cleared.
        self._stop.clear()
        alive = [t for t in self._threads if t.is_alive()]
        new = [
            threading.Thread(target=self._loop, name=f"esm-{self.function_name}-{i}", daemon=True)
            for i in range(len(alive), self.concurrency)
        ]
        self._threads = alive + new
        for t in new:
            t.start()

    def request_stop(self) -> None:
        """Ask the threads to finish after their current long poll (``stop`` also waits for them)."""
        self._stop.set()
        with self._demand:
            self._demand.notify_all()

    def stop(self, timeout: float = 10.0) -> None:
        self.request_stop()
        for t in self._threads:
            t.join(timeout)
        # A thread still inside a long handler stays listed, so ``running`` tells the truth.
        self._threads = [t for t in self._threads if t.is_alive()]

    def _may_receive(self) -> bool:
        return self._stop.is_set() or self._receiving <= self._busy

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self._demand:
                # One idle poll per queue, not one per thread: each idle long poll costs the emulator a
                # request a second, and the ESM itself scales its pollers with the queue's traffic.
                if not self._demand.wait_for(self._may_receive, timeout=1.0) or self._stop.is_set():
                    continue
                self._receiving += 1
            try:
                self._poll_in_turn()
            except Exception as error:
                # A moto reset or a shutdown can remove the queue under us; back off, keep the thread alive.
                if self._stop.is_set():
                    return
                log_failure(log, error, "%s: poll failed", self.function_name)
                self._stop.wait(1.0)

    def _poll_in_turn(self) -> None:
        """One receive (this thread holds a receiving turn), then the batch's invocation, if any."""
        messages: list[dict[str, Any]] = []
        try:
            messages = self._gather(self.wait_time_seconds, use_window=True)
        finally:
            with self._demand:
                self._receiving -= 1
                self._busy += 1 if messages else 0
                self._demand.notify_all()
        if not messages:
            return
        try:
            self._handle(messages)
        finally:
            with self._demand:
                self._busy -= 1
                self._demand.notify_all()
