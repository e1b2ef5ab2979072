"""Stage spans, in memory."""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING

from chalicelib.adapters.memory.clock import _ms
from chalicelib.domain.clock import to_iso
from chalicelib.domain.types import (
    Span,
)

if TYPE_CHECKING:
    pass


class MemorySpanRepo:
    def __init__(self) -> None:
        self._rows: dict[str, dict[tuple[int, str], Span]] = {}  # knowledge id -> (attempt, span id)
        self._lock = threading.Lock()

    def put(self, span: Span) -> None:
        stored = copy.deepcopy(span)
        stored.updated_at = _ms(span.updated_at)
        stored.started_at = _ms(span.started_at) if span.started_at else None
        stored.ended_at = _ms(span.ended_at) if span.ended_at else None
        with self._lock:
            self._rows.setdefault(span.knowledge_id, {})[(span.attempt, span.span_id)] = stored

    def get(self, knowledge_id: str, attempt: int, span_id: str) -> Span | None:
        with self._lock:
            span = self._rows.get(knowledge_id, {}).get((attempt, span_id))
            return copy.deepcopy(span) if span else None

    def get_many(self, knowledge_id: str, attempt: int, span_ids: Sequence[str]) -> dict[str, Span]:
        with self._lock:
            spans = self._rows.get(knowledge_id, {})
            found = {span_id: spans.get((attempt, span_id)) for span_id in span_ids}
            return {span_id: copy.deepcopy(span) for span_id, span in found.items() if span is not None}

    def list(self, knowledge_id: str, attempt: int) -> list[Span]:
        """Ordered by span id, as the `{attempt}#{span_id}` range key orders them."""
        with self._lock:
            spans = self._rows.get(knowledge_id, {})
            return [copy.deepcopy(spans[key]) for key in sorted(spans) if key[0] == attempt]

    def delete_all(self, knowledge_id: str) -> int:
        with self._lock:
            return len(self._rows.pop(knowledge_id, {}))

    def latest_attempt(self, knowledge_id: str) -> int:
        with self._lock:
            return max((attempt for attempt, _ in self._rows.get(knowledge_id, {})), default=0)

    def last_activity_iso(self, knowledge_id: str) -> str | None:
        with self._lock:
            stamps = [to_iso(s.updated_at) for s in self._rows.get(knowledge_id, {}).values()]
        return max(stamps, default=None)


# ---------------------------------------------------------------- files
