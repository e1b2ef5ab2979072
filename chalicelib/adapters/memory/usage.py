"""Usage entries, in memory."""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from chalicelib.ports import (
    StoredReport,
    UsageEntry,
)

if TYPE_CHECKING:
    pass


class MemoryUsageRepo:
    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], UsageEntry] = {}
        self._reports: dict[tuple[str, str], StoredReport] = {}
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
