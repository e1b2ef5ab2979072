"""The snapshot's queues on a moto without the local stack's patches (`moto_patches.patches_apply()` is
False): the server cannot be asked for its queues' messages in place, so only the dead-letter queues are
saved, by receiving their letters (each save counts a receive on every letter), and a restore sends the
messages again through the API (received 0 times, sent now)."""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
from collections import Counter
from typing import Any

log = logging.getLogger(__name__)

#: a DLQ message is held out of sight this long while a save reads the queue
DLQ_HOLD_SECONDS = 30


def _letter_key(record: dict[str, Any]) -> tuple[str, str]:
    return record["body"], json.dumps(record.get("attributes") or {}, sort_keys=True)


def dead_letters_by_receiving(sqs: Any, db: sqlite3.Connection) -> dict[str, list[dict[str, Any]]]:
    """Each DLQ's letters ({"body", "attributes"}), received (held `DLQ_HOLD_SECONDS`, then released); while
    someone else holds some out of sight (an operator's `dlq list` or redrive), the saved ones (`messages`
    rows) this read did not see are kept, so a letter is never dropped for being held (one redriven
    meanwhile may come back once: a redrive is idempotent). Other queues' messages are not read: receiving
    them would take them from the pollers. The saved rows of queues the server no longer has are dropped."""
    urls = sqs.list_queues().get("QueueUrls", [])
    found: dict[str, list[dict[str, Any]]] = {}
    for url in urls:
        name = url.rsplit("/", 1)[-1]
        if not name.endswith("-dlq"):
            continue
        held = int(
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessagesNotVisible"])[
                "Attributes"
            ]["ApproximateNumberOfMessagesNotVisible"]
        )
        handles: list[str] = []
        seen: list[dict[str, Any]] = []
        while True:
            reply = sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=DLQ_HOLD_SECONDS,
                WaitTimeSeconds=0,
                MessageAttributeNames=["All"],
            )
            batch = reply.get("Messages", [])
            if not batch:
                break
            for m in batch:
                handles.append(m["ReceiptHandle"])
                seen.append({"body": m["Body"], "attributes": m.get("MessageAttributes", {})})
        for handle in handles:  # back in sight at once
            with contextlib.suppress(sqs.exceptions.ReceiptHandleIsInvalid):  # redriven meanwhile
                sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
        letters = list(seen)
        if held:
            unseen = Counter(_letter_key(r) for r in seen)
            for (saved,) in db.execute("SELECT message FROM messages WHERE queue = ?", (name,)).fetchall():
                record = json.loads(saved)
                if unseen[_letter_key(record)] > 0:
                    unseen[_letter_key(record)] -= 1
                else:
                    letters.append({"body": record["body"], "attributes": record.get("attributes", {})})
        found[name] = letters
    known = {url.rsplit("/", 1)[-1] for url in urls}
    for (gone,) in db.execute("SELECT DISTINCT queue FROM messages").fetchall():
        if gone not in known:
            db.execute("DELETE FROM messages WHERE queue = ?", (gone,))
    return found


def send_messages(sqs: Any, saved: dict[str, list[dict[str, Any]]]) -> dict[str, int]:
    """Sends each queue's saved messages again; how many per queue (queues the server lacks are skipped)."""
    sent: dict[str, int] = {}
    for name, messages in saved.items():
        try:
            url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
        except sqs.exceptions.QueueDoesNotExist:
            log.warning("snapshot queue %s is not in the template any more; skipped", name)
            continue
        for m in messages:
            kwargs: dict[str, Any] = {"QueueUrl": url, "MessageBody": m["body"]}
            if m.get("attributes"):
                kwargs["MessageAttributes"] = m["attributes"]
            if m.get("group_id"):
                kwargs["MessageGroupId"] = m["group_id"]
            if m.get("deduplication_id"):
                kwargs["MessageDeduplicationId"] = m["deduplication_id"]
            sqs.send_message(**kwargs)
        sent[name] = len(messages)
    return sent
