"""EventPublisher on EventBridge: `PutEvents` on the stack's bus, at most 10 entries a call (the API's limit).

An entry EventBridge failed with a retryable code (InternalFailure, ThrottlingException: botocore retries a
failed call, not the failed entries of an answered one) is put again on its own, a few times, briefly: AWS
asks callers to resend them. An event put twice carries the same event_id, which consumers drop by.

A change is decided and stored before it is announced, so a put that still fails is logged with the
events' ids and types (a metric counts it) and not raised: raising would retry a stage whose conditional
write already happened, and the retry's write fails, so it would not announce either.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.domain.events import EVENT_SOURCE, Event
from chalicelib.observability import logger

#: PutEvents takes at most 10 entries
BATCH = 10
#: the per-entry codes AWS names retryable (PutEventsResultEntry)
RETRYABLE_ENTRY_CODES = frozenset({"InternalFailure", "ThrottlingException"})
#: the waits before putting failed entries again: short, since an upload's answer may wait on them
ENTRY_RETRY_DELAYS = (0.1, 0.3, 0.9)


class EventBridgePublisher:
    def __init__(self, client: Any, bus_name: str, source: str = EVENT_SOURCE):
        self.client = client
        self.bus_name = bus_name
        self.source = source

    def publish(self, events: Sequence[Event]) -> None:
        for start in range(0, len(events), BATCH):
            self._put(events[start : start + BATCH])

    def _put(self, batch: Sequence[Event]) -> None:
        for delay in (*ENTRY_RETRY_DELAYS, None):
            entries = [
                {
                    "Source": self.source,
                    "DetailType": event.type.value,
                    "Detail": json.dumps(dict(event.detail), ensure_ascii=False),
                    "EventBusName": self.bus_name,
                }
                for event in batch
            ]
            try:
                answer = self.client.put_events(Entries=entries)
            except (BotoCoreError, ClientError) as error:  # botocore has retried the call already
                self._lost(batch, type(error).__name__)
                return
            if not answer.get("FailedEntryCount"):
                return
            failed = [
                (event, str(entry.get("ErrorCode")))
                for event, entry in zip(batch, answer.get("Entries", []), strict=False)
                if entry.get("ErrorCode")
            ]
            refused = [event for event, code in failed if code not in RETRYABLE_ENTRY_CODES]
            if refused:
                self._lost(refused, "FailedEntry")
            batch = [event for event, code in failed if code in RETRYABLE_ENTRY_CODES]
            if not batch:
                return
            if delay is None:
                self._lost(batch, "FailedEntry")
                return
            time.sleep(delay)

    def _lost(self, events: Sequence[Event], reason: str) -> None:
        logger.error(
            "events not published",
            extra={
                "reason": reason,
                "bus": self.bus_name,
                "events": [{"id": e.event_id, "type": e.type.value} for e in events],
            },
        )
