"""A knowledge base at a glance (GET /knowledge-bases/{id}/stats): its documents counted by state, their
chunks and bytes, what they cost, and the document that has waited longest for a queue. Bounded per request
as the cost is (operations/kb_reports.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from chalicelib.domain.status import is_in_flight
from chalicelib.domain.types import Knowledge, utcnow
from chalicelib.operations import kb_reports
from chalicelib.operations.cost import (
    KB_USAGE_CARRIES,
    KB_WORKFLOW_FILLS,
    CostWalk,
    advance_cost,
    cost_of,
)
from chalicelib.operations.kb_reports import STATS, OverBound, inline_or_stored
from chalicelib.ports import Dependencies
from chalicelib.services.kb_rows import PAGE, position
from chalicelib.services.ownership import require_kb


def kb_stats(deps: Dependencies, tenant_id: str, kb_id: str) -> dict[str, Any]:
    """Read inline within kb_reports' bounds (rows and usage entries): past either, the stored report of a
    refresh that read it whole (operations/kb_reports.py)."""
    kb = require_kb(deps, tenant_id, kb_id)
    return inline_or_stored(
        deps,
        kb,
        STATS,
        lambda: kb_stats_report(
            deps,
            kb.id,
            fills=KB_WORKFLOW_FILLS,
            carries=KB_USAGE_CARRIES,
            max_rows=kb_reports.INLINE_ROWS,
            max_entries=kb_reports.INLINE_USAGE_ENTRIES,
        ),
    )


@dataclass
class StatsWalk:
    """The stats under way: the knowledge base's rows a page at a time (newest first, from just after
    `after`), counted as they are read, then its cost's walk (`CostWalk`). Its JSON is a refresh's
    checkpoint, as the cost walk's is."""

    kb_id: str
    after: list[str] | None = None
    rows_read: bool = False
    rows: int = 0
    parse: Counter[str] = field(default_factory=Counter)
    enable: Counter[str] = field(default_factory=Counter)
    summary: Counter[str] = field(default_factory=Counter)
    chunks: int = 0
    bytes: int = 0
    #: the document waiting longest for a queue, as the report shows it (without its wait, counted at the end)
    oldest: dict[str, Any] | None = None
    cost: CostWalk = field(init=False)

    def __post_init__(self) -> None:
        self.cost = CostWalk(self.kb_id)

    @property
    def done(self) -> bool:
        return self.rows_read and self.cost.done

    def to_json(self) -> dict[str, Any]:
        return {
            "kb_id": self.kb_id,
            "after": self.after,
            "rows_read": self.rows_read,
            "rows": self.rows,
            "counts": [dict(self.parse), dict(self.enable), dict(self.summary)],
            "chunks": self.chunks,
            "bytes": self.bytes,
            "oldest": self.oldest,
            "cost": self.cost.to_json(),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StatsWalk:
        walk = cls(data["kb_id"], data["after"], data["rows_read"], data["rows"])
        walk.parse, walk.enable, walk.summary = (Counter(c) for c in data["counts"])
        walk.chunks, walk.bytes, walk.oldest = data["chunks"], data["bytes"], data["oldest"]
        walk.cost = CostWalk.from_json(data["cost"])
        return walk


def _never() -> bool:
    return False


def kb_stats_report(
    deps: Dependencies,
    kb_id: str,
    *,
    fills: int,
    carries: int,
    max_rows: int | None = None,
    max_entries: int | None = None,
) -> dict[str, Any]:
    """The stats, their whole walk in one go: OverBound past `max_rows` rows or `max_entries` usage entries
    (a request's bounds; a refresh walks in slices with the same functions)."""
    walk = StatsWalk(kb_id)
    advance_stats(deps, walk, fills=fills, carries=carries, max_rows=max_rows, max_entries=max_entries)
    return stats_of(deps, walk)


def advance_stats(
    deps: Dependencies,
    walk: StatsWalk,
    *,
    fills: int,
    carries: int,
    stop: Callable[[], bool] = _never,
    max_rows: int | None = None,
    max_entries: int | None = None,
) -> bool:
    """Walks on until the walk is done (True) or `stop` says so after a page (False): the rows, then the
    cost (`advance_cost`)."""
    while not walk.rows_read:
        page = PAGE if max_rows is None else min(PAGE, max_rows + 1 - walk.rows)
        after = (walk.after[0], walk.after[1]) if walk.after is not None else None
        rows = deps.knowledge.page_by_kb(walk.kb_id, after=after, limit=page)
        walk.rows += len(rows)
        if max_rows is not None and walk.rows > max_rows:
            raise OverBound
        for row in rows:
            _count(walk, row)
        walk.rows_read = len(rows) < page
        if rows:
            walk.after = list(position(rows[-1]))
        if stop():
            return walk.done
    return advance_cost(deps, walk.cost, fills=fills, carries=carries, stop=stop, max_entries=max_entries)


def _count(walk: StatsWalk, row: Knowledge) -> None:
    walk.parse[row.parse_status.value] += 1
    walk.enable[row.enable_status.value] += 1
    walk.summary[row.summary_status.value] += 1
    walk.chunks += row.chunk_count
    walk.bytes += row.file_size
    waits = is_in_flight(row.parse_status) and row.queued_stage and row.queued_at
    if waits and (walk.oldest is None or row.queued_at < walk.oldest["since"]):
        walk.oldest = {
            "knowledge_id": row.id,
            "file_name": row.file_name or row.title,
            "parse_status": row.parse_status.value,
            "queue": row.queued_stage,
            "since": row.queued_at,
        }


def stats_of(deps: Dependencies, walk: StatsWalk) -> dict[str, Any]:
    """The report of a walk that is done."""
    cost = cost_of(deps, walk.cost)
    return {
        "kb_id": walk.kb_id,
        "documents": sum(walk.parse.values()),
        "parse_status": dict(sorted(walk.parse.items())),
        "enable_status": dict(sorted(walk.enable.items())),
        "summary_status": dict(sorted(walk.summary.items())),
        "chunks": walk.chunks,
        "bytes": walk.bytes,
        "cost": {
            "currency": cost["currency"],
            "aws_dollars": cost["aws_dollars"],
            "model_dollars": cost["model_dollars"],
            "workflow_pending": cost["workflow_pending"],
        },
        "oldest_waiting": _waiting(walk.oldest) if walk.oldest is not None else None,
    }


def _waiting(oldest: Mapping[str, Any]) -> dict[str, Any]:
    since = datetime.fromisoformat(oldest["since"].replace("Z", "+00:00"))
    return {**oldest, "waited_seconds": max(0, round((utcnow() - since).total_seconds()))}
