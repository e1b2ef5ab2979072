"""`weknora-ingest up`'s console: one line when a document completes or fails.

A document completes in several places (the state machine's own DynamoDB task after its enrichment, the
embedding stage when there is nothing to enrich, a cancel), so the local runtime watches the outcome rather
than each writer: every half second it reads the in-flight rows (the sparse in-flight index housekeeping
uses) and reads again each row that left it since the last look. A document can fail faster than that (a
truncated PDF fails in the docreader within a few hundred milliseconds of its upload), so the watcher is
also told of each row as it enters flight in this process (`observe`: a create or a reparse through the
repository), and follows it from there.
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
        detail = f"{row.chunk_count} chunk{'' if row.chunk_count == 1 else 's'}"
    else:
        message = row.error_message if len(row.error_message) <= 160 else row.error_message[:157] + "..."
        detail = ": ".join(part for part in (row.error_code or "error", message) if part)
    attempt = f" attempt {row.attempt}" if row.attempt > 1 else ""
    return f"{row.parse_status.value:<9} {name}  {took}  {detail}  ({row.id}{attempt})"


class EnteringFlight:
    """The knowledge repository, telling `note` of each row a create or a reparse puts in flight; every
    other call passes through unchanged."""

    def __init__(self, inner: Any, note: Callable[[str], None]) -> None:
        self._inner = inner
        self._note = note

    def insert(self, knowledge: Knowledge) -> None:
        self._inner.insert(knowledge)
        self._note(knowledge.id)

    def reset_for_reparse(self, knowledge_id: str, *args: Any, **kwargs: Any) -> Any:
        row = self._inner.reset_for_reparse(knowledge_id, *args, **kwargs)
        self._note(knowledge_id)
        return row

    def restart_attempt(self, knowledge_id: str, *args: Any, **kwargs: Any) -> Any:
        row = self._inner.restart_attempt(knowledge_id, *args, **kwargs)
        if row is not None:
            self._note(knowledge_id)
        return row

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class DocumentEvents:
    """Watches the in-flight rows and emits one line per document that completed, failed or was
    cancelled."""

    def __init__(
        self, rows: Callable[[], KnowledgeRows], emit: Callable[[str], None], interval: float = 0.5
    ) -> None:
        self._rows = rows
        self._emit = emit
        self._interval = interval
        #: in flight at the last look (or noted since): id -> (attempt, when first seen; 0 = not yet read)
        self._seen: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def note(self, knowledge_id: str) -> None:
        """A row has just entered flight (created or reparsed): follow it even if it ends before the next
        look."""
        with self._lock:
            self._seen[knowledge_id] = (0, time.monotonic())

    def observe(self, deps: Any) -> None:
        """Hear of the rows that enter flight through `deps`' knowledge repository (this process's API and
        stages)."""
        if not isinstance(deps.knowledge, EnteringFlight):
            deps.knowledge = EnteringFlight(deps.knowledge, self.note)

    def poll_once(self) -> list[str]:
        repo = self._rows()
        now = time.monotonic()
        current = {row.id: row for row in repo.in_flight_older_than(_EVERY)}
        lines: list[str] = []
        with self._lock:
            followed = dict(self._seen)
        looked_at = set(followed)
        for knowledge_id, (attempt, first_seen) in list(followed.items()):
            row = current.get(knowledge_id)
            if row is not None and attempt in (row.attempt, 0):
                followed[knowledge_id] = (row.attempt, first_seen)  # still in flight
                continue
            if row is None:
                ended = repo.get(knowledge_id)
                terminal = (ParseStatus.COMPLETED, ParseStatus.FAILED, ParseStatus.CANCELLED)
                if ended is not None and ended.parse_status in terminal:
                    lines.append(outcome_line(ended, _took(ended, now - first_seen)))
            del followed[knowledge_id]
        for knowledge_id, row in current.items():
            followed.setdefault(knowledge_id, (row.attempt, now))
        with self._lock:
            noted = {k: v for k, v in self._seen.items() if k not in looked_at}
            self._seen = {**followed, **noted}  # rows noted during this look wait for the next
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
