"""Usage entries, in memory."""

from __future__ import annotations

import copy
import heapq
import json
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from chalicelib.ports import (
    StoredReport,
    UsageEntry,
)
from chalicelib.ports.reports import UsagePage

if TYPE_CHECKING:
    pass


class MemoryUsageRepo:
    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], UsageEntry] = {}
        self._reports: dict[tuple[str, str], StoredReport] = {}
        self._ended: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def put(self, entry: UsageEntry) -> None:
        with self._lock:
            self._rows[(entry.knowledge_id, entry.entry)] = copy.deepcopy(entry)

    def for_knowledge(self, knowledge_id: str) -> list[UsageEntry]:
        with self._lock:
            return [e for (k, _), e in sorted(self._rows.items()) if k == knowledge_id]

    def for_kb(self, kb_id: str) -> Iterator[UsageEntry]:
        with self._lock:
            entries = [e for _, e in sorted(self._rows.items()) if e.kb_id == kb_id]
        yield from entries

    def report(self, kb_id: str, kind: str) -> StoredReport | None:
        with self._lock:
            return copy.deepcopy(self._reports.get((kb_id, kind)))

    def save_report(self, report: StoredReport) -> bool:
        with self._lock:
            stored = self._reports.get((report.kb_id, report.kind))
            if stored is not None and stored.as_of >= report.as_of:
                return False
            self._reports[(report.kb_id, report.kind)] = copy.deepcopy(report)
            return True

    def kb_page(self, kb_id: str, cursor: str | None, limit: int) -> UsagePage:
        """In the KB index's order (entry, then knowledge id): a document's entries are spread over the walk."""
        after = tuple(json.loads(cursor)) if cursor is not None else None
        with self._lock:
            keyed = ((e.entry, e.knowledge_id) for e in self._rows.values() if e.kb_id == kb_id)
            keys = heapq.nsmallest(limit + 1, (k for k in keyed if after is None or k > after))
            entries = [copy.deepcopy(self._rows[(k, e)]) for e, k in keys[:limit]]
        more = len(keys) > limit
        return UsagePage(entries, json.dumps(list(keys[limit - 1])) if more else None)

    def ended_generation(self, kb_id: str, kind: str) -> int:
        with self._lock:
            return self._ended.get((kb_id, kind), -1)

    def save_ended_generation(self, kb_id: str, kind: str, generation: int) -> bool:
        with self._lock:
            if self._ended.get((kb_id, kind), -1) >= generation:
                return False
            self._ended[(kb_id, kind)] = generation
            return True
