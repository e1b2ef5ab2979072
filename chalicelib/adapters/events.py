"""EventPublisher on EventBridge: `PutEvents` on the stack's bus, at most 10 entries a call (the API's limit).

A change is decided and stored before it is announced, so a put that fails is logged with the events' ids
and types (a metric counts it) and not raised: raising would retry a stage whose conditional write already
happened, and the retry's write fails, so it would not announce either.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.domain.events import EVENT_SOURCE, Event
from chalicelib.observability import logger

#: PutEvents takes at most 10 entries
BATCH = 10


class EventBridgePublisher:
    def __init__(self, client: Any, bus_name: str, source: str = EVENT_SOURCE):
        self.client = client
        self.bus_name = bus_name
        self.source = source

    def publish(self, events: Sequence[Event]) -> None:
        for start in range(0, len(events), BATCH):
            batch = events[start : start + BATCH]
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
            except (BotoCoreError, ClientError) as error:
                self._lost(batch, type(error).__name__)
                continue
            if answer.get("FailedEntryCount"):
                failed = [
                    event
                    for event, entry in zip(batch, answer.get("Entries", []), strict=False)
                    if entry.get("ErrorCode")
                ]
                self._lost(failed, "FailedEntry")

    def _lost(self, events: Sequence[Event], reason: str) -> None:
        logger.error(
            "events not published",
            extra={
                "reason": reason,
                "bus": self.bus_name,
                "events": [{"id": e.event_id, "type": e.type.value} for e in events],
            },
        )
