"""SQS stage queues. Messages carry pointers (ids), never document bodies."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from chalicelib.adapters.aws_errors import unanswered_is_unreachable
from chalicelib.domain.types import Stage, StageMessage
from chalicelib.ports import DeadLetter


class SqsTaskQueue:
    def __init__(
        self,
        client: Any,
        queue_names: Mapping[str, str],
        urls: Mapping[str, str] | None = None,
        dead_letter_urls: Mapping[str, str] | None = None,
    ):
        """`queue_names` maps a logical queue ('docreader', 'uploads', …) to its SQS queue name; `urls` and
        `dead_letter_urls` give the URLs of the queues and dead-letter queues this function was given (on AWS
        each function's environment holds those it uses, infra/stack.py). A queue without one is looked up
        by name (GetQueueUrl) on its first use in the process, its dead-letter queue through its
        RedrivePolicy."""
        self.client = client
        self.queue_names = dict(queue_names)
        self._urls: dict[str, str] = dict(urls or {})
        self._dead_letter_urls: dict[str, str] = dict(dead_letter_urls or {})

    def url(self, queue: str) -> str:
        if queue not in self._urls:
            self._urls[queue] = self.client.get_queue_url(QueueName=self.queue_names[queue])["QueueUrl"]
        return self._urls[queue]

    def ping(self, queue: str) -> None:
        """Raises unless the queue answers (health checks)."""
        self.client.get_queue_attributes(QueueUrl=self.url(queue), AttributeNames=["QueueArn"])

    def send(self, stage: Stage, message: StageMessage, *, delay_seconds: int = 0) -> None:
        self.send_raw(stage.value, message.to_json(), delay_seconds=delay_seconds)

    def send_raw(self, queue: str, body: Mapping[str, Any], *, delay_seconds: int = 0) -> None:
        with unanswered_is_unreachable(f"SQS ({queue})"):
            self.client.send_message(
                QueueUrl=self.url(queue), MessageBody=json.dumps(dict(body)), DelaySeconds=delay_seconds
            )

    def dead_letter(self, queue: str, body: str, reason: str) -> None:
        with unanswered_is_unreachable(f"SQS ({queue} DLQ)"):
            self.client.send_message(
                QueueUrl=self._dlq_url(queue),
                MessageBody=body,
                MessageAttributes={"reason": {"DataType": "String", "StringValue": reason[:1000]}},
            )

    def retry_later(self, queue: str, receipt_handle: str, delay_seconds: int) -> None:
        self.client.change_message_visibility(
            QueueUrl=self.url(queue), ReceiptHandle=receipt_handle, VisibilityTimeout=delay_seconds
        )

    def _dlq_url(self, queue: str) -> str:
        if queue not in self._dead_letter_urls:
            attrs = self.client.get_queue_attributes(
                QueueUrl=self.url(queue), AttributeNames=["RedrivePolicy"]
            )
            arn = json.loads(attrs["Attributes"]["RedrivePolicy"])["deadLetterTargetArn"]
            url = self.client.get_queue_url(QueueName=arn.rsplit(":", 1)[-1])["QueueUrl"]
            self._dead_letter_urls[queue] = str(url)
        return self._dead_letter_urls[queue]

    def backlog(self, queue: str) -> int:
        with unanswered_is_unreachable(f"SQS ({queue})"):
            attrs = self.client.get_queue_attributes(
                QueueUrl=self.url(queue),
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed",
                ],
            )["Attributes"]
        return sum(int(v) for v in attrs.values())

    # -- dead-letter queues (operators: list and redrive)
    def receive_dead_letters(self, queue: str, max_messages: int, hold_seconds: int) -> list[DeadLetter]:
        """Receives in batches of 10 until `max_messages` or an empty answer; a received message stays
        invisible for `hold_seconds`, so each comes back once."""
        letters: list[DeadLetter] = []
        url = self._dlq_url(queue)
        while len(letters) < max_messages:
            reply = self.client.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=min(10, max_messages - len(letters)),
                VisibilityTimeout=hold_seconds,
                WaitTimeSeconds=0,
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            messages = reply.get("Messages", [])
            if not messages:
                break
            for m in messages:
                attrs = m.get("Attributes", {})
                reason = m.get("MessageAttributes", {}).get("reason", {}).get("StringValue", "")
                letters.append(
                    DeadLetter(
                        queue,
                        m["MessageId"],
                        m["ReceiptHandle"],
                        m.get("Body", ""),
                        reason=reason,
                        sent_at_ms=int(attrs.get("SentTimestamp", 0) or 0),
                        receive_count=int(attrs.get("ApproximateReceiveCount", 0) or 0),
                    )
                )
        return letters

    def delete_dead_letter(self, letter: DeadLetter) -> None:
        self.client.delete_message(QueueUrl=self._dlq_url(letter.queue), ReceiptHandle=letter.receipt_handle)

    def release_dead_letter(self, letter: DeadLetter) -> None:
        self.client.change_message_visibility(
            QueueUrl=self._dlq_url(letter.queue), ReceiptHandle=letter.receipt_handle, VisibilityTimeout=0
        )
