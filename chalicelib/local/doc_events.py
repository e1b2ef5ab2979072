"""`weknora-ingest up`'s console: one line when a document completes or fails.

A document completes in several places (the state machine's own DynamoDB task after its enrichment, the
embedding stage when there is nothing to enrich, a cancel), so the local runtime watches the outcome rather
than each writer: every second it reads the in-flight rows (the sparse in-flight index housekeeping uses)
and reads again each row that left it since the last look. A document that enters and leaves the in-flight
set between two looks is not reported (a look is a second; the fastest document takes several).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from chalicelib.domain.types import Knowledge, ParseStatus

#: later than any row's updated_at: every in-flight row
_EVERY = "9999-12-31T23:59:59Z"


class KnowledgeRows(Protocol):
    def get(self, knowledge_id: str) -> Knowledge | None: ...

    def in_flight_older_than(self, cutoff_iso: str) -> list[Knowledge]: ...


def outcome_line(row: Knowledge, seconds: float | None) -> str:
    """`completed  notes.md  4.2s  12 chunks  (k-…)` or `failed  scan.pdf  3.1s  DOCREADER_FAILED: …`."""
    name = row.file_name or row.title or row.source or row.id
    took = f"{seconds:.1f}s" if seconds is not None else "-"
    if row.parse_status == ParseStatus.COMPLETED:
        detail = f"{row.chunk_count} chunks"
    else:
        message = row.error_message if len(row.error_message) <= 160 else row.error_message[:157] + "..."
        detail = ": ".join(part for part in (row.error_code or "error", message) if part)
    attempt = f" attempt {row.attempt}" if row.attempt > 1 else ""
    return f"{row.parse_status.value:<9} {name}  {took}  {detail}  ({row.id}{attempt})"


class DocumentEvents:
    """Watches the in-flight rows and emits one line per document that completed, failed or was
    cancelled."""

    def __init__(
        self, rows: Callable[[], KnowledgeRows], emit: Callable[[str], None], interval: float = 1.0
    ) -> None:
        self._rows = rows
        self._emit = emit
        self._interval = interval
        #: in flight at the last look: id -> (attempt, when first seen in flight)
        self._seen: dict[str, tuple[int, float]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> list[str]:
        repo = self._rows()
        now = time.monotonic()
        current = {row.id: row for row in repo.in_flight_older_than(_EVERY)}
        lines: list[str] = []
        for knowledge_id, (attempt, first_seen) in list(self._seen.items()):
            if knowledge_id in current and current[knowledge_id].attempt == attempt:
                continue
            if knowledge_id not in current:
                row = repo.get(knowledge_id)
                terminal = (ParseStatus.COMPLETED, ParseStatus.FAILED, ParseStatus.CANCELLED)
                if row is not None and row.parse_status in terminal:
                    lines.append(outcome_line(row, _took(row, now - first_seen)))
            self._seen.pop(knowledge_id)
        for knowledge_id, row in current.items():
            self._seen.setdefault(knowledge_id, (row.attempt, now))
        for line in lines:
            self._emit(line)
        return lines

    def start(self) -> DocumentEvents:
        self.poll_safely()  # what is in flight now is followed from here
        self._thread = threading.Thread(target=self._run, name="document-events", daemon=True)
        self._thread.start()
        return self

    def poll_safely(self) -> None:
        try:
            self.poll_once()
        except Exception as exc:
            self._emit(f"(document events: {type(exc).__name__}: {exc})")

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.poll_safely()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)


def _took(row: Knowledge, watched: float) -> float:
    """The attempt's time: from creation to its end for a first attempt, else as long as it was watched."""
    end: Any = row.updated_at  # the completing write sets it (processed_at is the index's end)
    if row.attempt == 1 and isinstance(end, datetime) and isinstance(row.created_at, datetime):
        return max(0.0, (end - row.created_at).total_seconds())
    return watched
