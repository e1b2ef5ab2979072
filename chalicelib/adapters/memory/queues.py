"""Queues, in memory: messages handed back as the SQS event a stage's `handle` receives, with receive
counts and a dead-letter queue."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chalicelib.domain.types import (
    Stage,
    StageMessage,
)
from chalicelib.ports import (
    DeadLetter,
    ServiceUnreachable,
)
from chalicelib.settings import QUEUES

if TYPE_CHECKING:
    pass


@dataclass
class QueuedMessage:
    queue: str
    body: str
    delay_seconds: int = 0
    message_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    sent_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    receive_count: int = 0
    first_receive_ms: int = 0
    attributes: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.body)


class QueueUnavailable(ServiceUnreachable):
    """A send to a queue that does not answer (deleted, throttled, network)."""


class MemoryTaskQueue:
    """The stage queues, each with a dead-letter queue and SQS's redrive rule: a message that failed on its
    `max_receives`-th receive moves to the DLQ. Messages come back as the Lambda SQS event (`receive`), and
    the handler's partial-batch response settles them (`settle`). Delays are recorded, not waited for."""

    def __init__(
        self,
        queues: Iterable[str] = QUEUES,
        *,
        max_receives: int = 4,
        region: str = "us-east-1",
        account_id: str = "123456789012",
    ) -> None:
        self.queues = tuple(queues)
        self.max_receives = max_receives
        self.region = region
        self.account_id = account_id
        #: every message ever sent, in order (what a test inspects)
        self.sent: list[QueuedMessage] = []
        self._waiting: dict[str, list[QueuedMessage]] = {q: [] for q in self.queues}
        self._in_flight: dict[str, QueuedMessage] = {}  # message id -> message
        self._dead: dict[str, list[QueuedMessage]] = {q: [] for q in self.queues}
        self._unavailable: set[str] = set()
        #: every retry_later call: (queue, receipt handle, delay seconds)
        self.retried: list[tuple[str, str, int]] = []
        self._held: dict[str, float] = {}  # dead letter id -> monotonic time it is visible again
        self._lock = threading.Lock()

    # -- the port
    def send(self, stage: Stage, message: StageMessage, *, delay_seconds: int = 0) -> None:
        self.send_raw(stage.value, message.to_json(), delay_seconds=delay_seconds)

    def send_raw(self, queue: str, body: Mapping[str, Any], *, delay_seconds: int = 0) -> None:
        if not 0 <= delay_seconds <= 900:
            raise ValueError(f"DelaySeconds must be 0..900, got {delay_seconds}")
        self._put(QueuedMessage(queue, json.dumps(dict(body)), delay_seconds))

    def dead_letter(self, queue: str, body: str, reason: str) -> None:
        self._known(queue)
        message = QueuedMessage(queue, body, attributes={"reason": reason[:1000], "parked": "1"})
        with self._lock:
            self._dead[queue].append(message)

    def backlog(self, queue: str) -> int:
        self._known(queue)
        with self._lock:
            if queue in self._unavailable:
                raise QueueUnavailable(f"queue {queue} is unavailable")
            return self._depth(queue)

    def retry_later(self, queue: str, receipt_handle: str, delay_seconds: int) -> None:
        """Recorded: the fake delivers failed messages again at once (delays are not waited for)."""
        with self._lock:
            self.retried.append((queue, receipt_handle, delay_seconds))

    def receive_dead_letters(self, queue: str, max_messages: int, hold_seconds: int) -> list[DeadLetter]:
        self._known(queue)
        now = time.monotonic()
        with self._lock:
            free = [m for m in self._dead[queue] if self._held.get(m.message_id, 0.0) <= now]
            batch = free[:max_messages]
            for message in batch:
                message.receive_count += 1
                self._held[message.message_id] = now + hold_seconds
        return [
            DeadLetter(
                queue,
                m.message_id,
                f"{m.message_id}#dlq{m.receive_count}",
                m.body,
                reason=m.attributes.get("reason", "") if m.attributes.get("parked") else "",
                sent_at_ms=m.sent_ms,
                receive_count=m.receive_count,
            )
            for m in batch
        ]

    def delete_dead_letter(self, letter: DeadLetter) -> None:
        with self._lock:
            self._dead[letter.queue] = [
                m for m in self._dead[letter.queue] if m.message_id != letter.message_id
            ]
            self._held.pop(letter.message_id, None)

    def release_dead_letter(self, letter: DeadLetter) -> None:
        with self._lock:
            self._held.pop(letter.message_id, None)

    def make_unavailable(self, queue: str, unavailable: bool = True) -> None:
        self._known(queue)
        with self._lock:
            (self._unavailable.add if unavailable else self._unavailable.discard)(queue)

    # -- what was sent
    def waiting(self, queue: str) -> list[QueuedMessage]:
        """Messages not yet received (or made visible again after a failure), oldest first."""
        self._known(queue)
        with self._lock:
            return list(self._waiting[queue])

    def bodies(self, queue: str) -> list[Any]:
        """The parsed bodies of the waiting messages."""
        return [m.json() for m in self.waiting(queue)]

    def dead_letters(self, queue: str) -> list[QueuedMessage]:
        self._known(queue)
        with self._lock:
            return list(self._dead[queue])

    def purge(self, queue: str) -> None:
        self._known(queue)
        with self._lock:
            self._waiting[queue].clear()

    # -- delivery, as the Lambda event source mapping does it
    def receive(self, queue: str, max_messages: int = 10, *, due_only: bool = False) -> dict[str, Any]:
        """Takes up to `max_messages` waiting messages into flight and returns them as an SQS event
        (`due_only`: only those sent without a delay, as if the delayed ones' time had not come)."""
        self._known(queue)
        now = int(time.time() * 1000)
        with self._lock:
            due = [m for m in self._waiting[queue] if not (due_only and m.delay_seconds)]
            batch = due[:max_messages]
            taken = {m.message_id for m in batch}
            self._waiting[queue] = [m for m in self._waiting[queue] if m.message_id not in taken]
            for message in batch:
                message.receive_count += 1
                message.first_receive_ms = message.first_receive_ms or now
                self._in_flight[message.message_id] = message
        return {"Records": [self._record(m) for m in batch]}

    def settle(self, event: Mapping[str, Any], response: Mapping[str, Any] | None) -> None:
        """Applies a handler's partial-batch response: succeeded records are deleted; failed ones become
        visible again, or move to the DLQ when they failed on their last allowed receive."""
        failed = {f["itemIdentifier"] for f in (response or {}).get("batchItemFailures", [])}
        with self._lock:
            for record in event["Records"]:
                message = self._in_flight.pop(record["messageId"], None)
                if message is None or record["messageId"] not in failed:
                    continue
                if message.receive_count >= self.max_receives:
                    message.attributes["reason"] = f"maxReceiveCount {self.max_receives} exceeded"
                    self._dead[message.queue].append(message)
                else:
                    self._waiting[message.queue].append(message)

    def deliver(
        self,
        queue: str,
        handler: Callable[[Any, dict[str, Any], Any], dict[str, Any]],
        deps: Any,
        context: Any = None,
        *,
        due_only: bool = False,
    ) -> dict[str, Any]:
        """One batch: receive, invoke the handler, settle. Returns the handler's response; when every record
        failed, Powertools raises and Lambda then fails the whole batch, which this reports as one response."""
        from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

        event = self.receive(queue, due_only=due_only)
        if not event["Records"]:
            return {"batchItemFailures": []}
        try:
            response = handler(deps, event, context)
        except BatchProcessingError:
            response = {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"]]}
        self.settle(event, response)
        return response

    def event(self, queue: str, bodies: Sequence[str], *, receive_count: int = 1) -> dict[str, Any]:
        """An SQS event for bodies that were never sent (malformed input, a given receive count)."""
        self._known(queue)
        records = []
        for body in bodies:
            message = QueuedMessage(queue, body, receive_count=receive_count)
            message.first_receive_ms = message.sent_ms
            records.append(self._record(message))
        return {"Records": records}

    # -- internals
    def _known(self, queue: str) -> None:
        if queue not in self._waiting:
            raise KeyError(f"no queue named {queue!r}")

    def _put(self, message: QueuedMessage) -> None:
        self._known(message.queue)
        with self._lock:
            if message.queue in self._unavailable:
                raise QueueUnavailable(f"queue {message.queue} is unavailable")
            self.sent.append(message)
            self._waiting[message.queue].append(message)

    def _depth(self, queue: str) -> int:
        return len(self._waiting[queue]) + sum(1 for m in self._in_flight.values() if m.queue == queue)

    def _record(self, message: QueuedMessage) -> dict[str, Any]:
        return {
            "messageId": message.message_id,
            "receiptHandle": f"{message.message_id}#{message.receive_count}",
            "body": message.body,
            "attributes": {
                "ApproximateReceiveCount": str(message.receive_count),
                "SentTimestamp": str(message.sent_ms),
                "SenderId": "AIDAMEMORYFAKESENDER",
                "ApproximateFirstReceiveTimestamp": str(message.first_receive_ms),
            },
            "messageAttributes": {},
            "md5OfBody": hashlib.md5(message.body.encode()).hexdigest(),
            "eventSource": "aws:sqs",
            "eventSourceARN": f"arn:aws:sqs:{self.region}:{self.account_id}:{message.queue}",
            "awsRegion": self.region,
        }


# ---------------------------------------------------------------- workflow
