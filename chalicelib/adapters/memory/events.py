"""The events port and the webhook repository, in memory."""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence

from chalicelib.domain.events import Event
from chalicelib.ports import DeliveryRecord, Webhook


class MemoryEventPublisher:
    """Keeps what was published, in order (`published`), for tests to read back."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.published: list[Event] = []

    def publish(self, events: Sequence[Event]) -> None:
        with self._lock:
            self.published.extend(events)

    def types_of(self, subject_id: str) -> list[str]:
        """The detail-types published about one knowledge or task id, in order."""
        with self._lock:
            return [
                e.type.value
                for e in self.published
                if subject_id in (e.detail.get("knowledge_id"), e.detail.get("task_id"))
            ]


class MemoryWebhookRepo:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._hooks: dict[tuple[str, str], Webhook] = {}
        self._log: dict[tuple[str, str], dict[tuple[str, str, int], DeliveryRecord]] = {}

    def put(self, webhook: Webhook) -> None:
        with self._lock:
            self._hooks[(webhook.kb_id, webhook.id)] = copy.deepcopy(webhook)

    def update(self, webhook: Webhook) -> bool:
        with self._lock:
            if (webhook.kb_id, webhook.id) not in self._hooks:
                return False
            self._hooks[(webhook.kb_id, webhook.id)] = copy.deepcopy(webhook)
            return True

    def get(self, kb_id: str, webhook_id: str) -> Webhook | None:
        with self._lock:
            found = self._hooks.get((kb_id, webhook_id))
            return copy.deepcopy(found) if found else None

    def list_kb(self, kb_id: str) -> list[Webhook]:
        with self._lock:
            hooks = [copy.deepcopy(h) for (kb, _), h in self._hooks.items() if kb == kb_id]
        return sorted(hooks, key=lambda h: (h.created_at, h.id))

    def delete(self, kb_id: str, webhook_id: str) -> bool:
        with self._lock:
            self._log.pop((kb_id, webhook_id), None)
            return self._hooks.pop((kb_id, webhook_id), None) is not None

    def log_delivery(self, kb_id: str, record: DeliveryRecord) -> None:
        with self._lock:
            log = self._log.setdefault((kb_id, record.webhook_id), {})
            log[(record.at, record.delivery_id, record.attempt)] = record

    def deliveries(self, kb_id: str, webhook_id: str, limit: int = 50) -> list[DeliveryRecord]:
        with self._lock:
            log = self._log.get((kb_id, webhook_id), {})
            return [log[k] for k in sorted(log, reverse=True)][:limit]
