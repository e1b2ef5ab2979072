"""Stage spans, in memory."""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from chalicelib.adapters.memory.clock import _ms, _now
from chalicelib.domain.clock import to_iso
from chalicelib.domain.progress import require_span_counters
from chalicelib.domain.types import (
    Span,
)

if TYPE_CHECKING:
    pass


class MemorySpanRepo:
    def __init__(self) -> None:
        self._rows: dict[str, dict[tuple[int, str], Span]] = {}  # knowledge id -> (attempt, span id)
        self._lock = threading.Lock()
        #: (knowledge id, attempt, span id) -> counters (the table's n_* attributes, apart from the body)
        self._counters: dict[tuple[str, int, str], dict[str, int]] = {}

    def _read(self, span: Span | None) -> Span | None:
        if span is None:
            return None
        copied = copy.deepcopy(span)
        copied.outputs.update(self._counters.get((span.knowledge_id, span.attempt, span.span_id), {}))
        return copied

    def add_counters(
        self, knowledge_id: str, attempt: int, span_id: str, counts: Mapping[str, int], *, reset: bool = False
    ) -> None:
        require_span_counters(counts)
        with self._lock:
            counters = self._counters.setdefault((knowledge_id, attempt, span_id), {})
            for name, value in counts.items():
                counters[name] = int(value) if reset else counters.get(name, 0) + int(value)
            span = self._rows.get(knowledge_id, {}).get((attempt, span_id))
            if span is not None:
                span.updated_at = _ms(_now())

    def put(self, span: Span) -> None:
        stored = copy.deepcopy(span)
        stored.updated_at = _ms(span.updated_at)
        stored.started_at = _ms(span.started_at) if span.started_at else None
        stored.ended_at = _ms(span.ended_at) if span.ended_at else None
        with self._lock:
            self._rows.setdefault(span.knowledge_id, {})[(span.attempt, span.span_id)] = stored

    def get(self, knowledge_id: str, attempt: int, span_id: str) -> Span | None:
        with self._lock:
            return self._read(self._rows.get(knowledge_id, {}).get((attempt, span_id)))

    def get_many(self, knowledge_id: str, attempt: int, span_ids: Sequence[str]) -> dict[str, Span]:
        with self._lock:
            spans = self._rows.get(knowledge_id, {})
            found = {span_id: spans.get((attempt, span_id)) for span_id in span_ids}
            return {
                span_id: read for span_id, span in found.items() if (read := self._read(span)) is not None
            }

    def list(self, knowledge_id: str, attempt: int) -> list[Span]:
        """Ordered by span id, as the `{attempt}#{span_id}` range key orders them."""
        with self._lock:
            spans = self._rows.get(knowledge_id, {})
            return [read for key in sorted(spans) if key[0] == attempt and (read := self._read(spans[key]))]

    def delete_all(self, knowledge_id: str) -> int:
        with self._lock:
            for key in [key for key in self._counters if key[0] == knowledge_id]:
                del self._counters[key]
            return len(self._rows.pop(knowledge_id, {}))

    def latest_attempt(self, knowledge_id: str) -> int:
        with self._lock:
            return max((attempt for attempt, _ in self._rows.get(knowledge_id, {})), default=0)

    def last_activity_iso(self, knowledge_id: str) -> str | None:
        with self._lock:
            stamps = [to_iso(s.updated_at) for s in self._rows.get(knowledge_id, {}).values()]
        return max(stamps, default=None)


# ---------------------------------------------------------------- files
