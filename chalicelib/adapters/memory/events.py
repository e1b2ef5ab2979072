"""The events port and the webhook repository, in memory."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Sequence
from dataclasses import replace

from chalicelib.domain.clock import now_iso
from chalicelib.domain.events import Event
from chalicelib.ports import DeliveryRecord, Webhook
from chalicelib.ports.events import DeliveryTry, FailureCounted, TryClaim, WebhookUpdate


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
        #: (kb, try) -> (first claimed at (ISO), claimed at (epoch seconds), finished)
        self._tries: dict[tuple[str, DeliveryTry], tuple[str, float, bool]] = {}

    def create(self, webhook: Webhook, cap: int) -> bool:
        with self._lock:  # the count and the write under one lock: one transaction
            if sum(1 for kb, _ in self._hooks if kb == webhook.kb_id) >= cap:
                return False
            self._hooks[(webhook.kb_id, webhook.id)] = copy.deepcopy(webhook)
            return True

    def put(self, webhook: Webhook) -> None:
        with self._lock:
            self._hooks[(webhook.kb_id, webhook.id)] = copy.deepcopy(webhook)

    def update(self, webhook: Webhook, *, read: Webhook, resume: bool = False) -> WebhookUpdate:
        with self._lock:
            stored = self._hooks.get((webhook.kb_id, webhook.id))
            if stored is None:
                return "gone"
            if stored.settings() != read.settings():  # another PUT landed since the caller's read
                return "changed"
            updated = replace(
                copy.deepcopy(webhook), secret=stored.secret, previous_secrets=stored.previous_secrets
            )
            # the breaker's state is the stage's, as on the table (attributes a settings write leaves)
            if not resume:
                updated = replace(
                    updated,
                    failures_in_a_row=stored.failures_in_a_row,
                    paused_at=stored.paused_at,
                    probe_at=stored.probe_at,
                    probes=stored.probes,
                    failure_score=stored.failure_score,
                )
            else:
                _clear_breaker(updated)
                updated.failure_score = 0
            self._hooks[(webhook.kb_id, webhook.id)] = updated
            return "written"

    def rotate_secret(self, webhook: Webhook, expected_secret: str) -> bool:
        with self._lock:
            stored = self._hooks.get((webhook.kb_id, webhook.id))
            if stored is None or stored.secret != expected_secret:
                return False
            self._hooks[(webhook.kb_id, webhook.id)] = replace(
                stored,
                secret=webhook.secret,
                previous_secrets=list(webhook.previous_secrets),
            )
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
            for key in [k for k in self._tries if k[0] == kb_id and k[1].webhook_id == webhook_id]:
                del self._tries[key]
            return self._hooks.pop((kb_id, webhook_id), None) is not None

    def log_delivery(self, kb_id: str, record: DeliveryRecord) -> None:
        with self._lock:
            log = self._log.setdefault((kb_id, record.webhook_id), {})
            log[(record.at, record.delivery_id, record.attempt)] = record

    def deliveries(self, kb_id: str, webhook_id: str, limit: int = 50) -> list[DeliveryRecord]:
        with self._lock:
            log = self._log.get((kb_id, webhook_id), {})
            return [log[k] for k in sorted(log, reverse=True)][:limit]

    def claim_try(self, kb_id: str, delivery_try: DeliveryTry, stale_after_seconds: int) -> TryClaim:
        now = time.time()
        with self._lock:
            held = self._tries.get((kb_id, delivery_try))
            if held is None:
                at = now_iso()
            else:
                at, claimed_at, finished = held
                if finished:
                    return TryClaim("finished", at)
                if claimed_at > now - stale_after_seconds:
                    return TryClaim("busy", at)
            self._tries[(kb_id, delivery_try)] = (at, now, False)
            return TryClaim("claimed", at)

    def finish_try(self, kb_id: str, delivery_try: DeliveryTry) -> None:
        with self._lock:
            held = self._tries.get((kb_id, delivery_try))
            if held is not None:
                self._tries[(kb_id, delivery_try)] = (held[0], held[1], True)

    def count_failure(
        self,
        kb_id: str,
        webhook_id: str,
        pause_after: int,
        probe_at: int,
        score_cap: int = 10,
        score_read: int = 0,
    ) -> FailureCounted:
        with self._lock:
            hook = self._hooks.get((kb_id, webhook_id))
            if hook is None:
                return FailureCounted(False, 0, False)
            hook.failures_in_a_row += 1
            raised = hook.failure_score < score_cap
            if raised:
                hook.failure_score += 1
            if hook.failures_in_a_row < pause_after or hook.paused_at:
                return FailureCounted(False, hook.failure_score, raised)
            hook.paused_at, hook.probe_at = now_iso(), probe_at
            return FailureCounted(True, hook.failure_score, raised)

    def clear_failures(self, kb_id: str, webhook_id: str) -> bool:
        with self._lock:
            hook = self._hooks.get((kb_id, webhook_id))
            if hook is None:
                return False
            was_paused = bool(hook.paused_at)
            _clear_breaker(hook)
            hook.failure_score = max(0, hook.failure_score - 1)
            return was_paused

    def claim_probe(self, kb_id: str, webhook_id: str, now: int, next_probe_at: int) -> bool:
        with self._lock:
            hook = self._hooks.get((kb_id, webhook_id))
            if hook is None or not hook.paused_at or hook.probe_at > now:
                return False
            hook.probe_at = next_probe_at
            hook.probes += 1
            return True


def _clear_breaker(hook: Webhook) -> None:
    hook.failures_in_a_row, hook.paused_at, hook.probe_at, hook.probes = 0, "", 0, 0
