"""A knowledge base at a glance (GET /knowledge-bases/{id}/stats): its documents counted by state, their
chunks and bytes, what they cost, and the document that has waited longest for a queue. Bounded per request
as the cost is (operations/kb_reports.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from chalicelib.domain.clock import now_iso
from chalicelib.domain.status import is_in_flight
from chalicelib.domain.types import Knowledge, utcnow
from chalicelib.operations import kb_reports
from chalicelib.operations.cost import KB_USAGE_CARRIES, KB_WORKFLOW_FILLS, kb_cost_report
from chalicelib.operations.kb_reports import STATS, OverBound, bounded, fresh, stored_answer
from chalicelib.ports import Dependencies, UsageEntry
from chalicelib.services.kb_rows import kb_rows
from chalicelib.services.ownership import require_kb


def kb_stats(deps: Dependencies, tenant_id: str, kb_id: str) -> dict[str, Any]:
    """Read inline within kb_reports' bounds (rows and usage entries): past either, the stored report of a
    refresh that read it whole (operations/kb_reports.py)."""
    kb = require_kb(deps, tenant_id, kb_id)
    as_of = now_iso()
    try:
        report = kb_stats_report(
            deps,
            kb.id,
            bounded(kb_rows(deps, kb.id), kb_reports.INLINE_ROWS),
            bounded(deps.usage.for_kb(kb.id), kb_reports.INLINE_USAGE_ENTRIES),
            fills=KB_WORKFLOW_FILLS,
            carries=KB_USAGE_CARRIES,
        )
    except OverBound:
        return stored_answer(deps, kb, STATS)
    return fresh(report, as_of)


def kb_stats_report(
    deps: Dependencies,
    kb_id: str,
    rows: Iterable[Knowledge],
    entries: Iterable[UsageEntry],
    *,
    fills: int,
    carries: int,
) -> dict[str, Any]:
    """The stats from the knowledge base's `rows` and its cost from its usage `entries` (every one; a
    request's are bounded, a refresh's are not)."""
    parse: Counter[str] = Counter()
    enable: Counter[str] = Counter()
    summary: Counter[str] = Counter()
    chunks = stored_bytes = 0
    oldest: Knowledge | None = None
    for row in rows:
        parse[row.parse_status.value] += 1
        enable[row.enable_status.value] += 1
        summary[row.summary_status.value] += 1
        chunks += row.chunk_count
        stored_bytes += row.file_size
        waits = is_in_flight(row.parse_status) and row.queued_stage and row.queued_at
        if waits and (oldest is None or row.queued_at < oldest.queued_at):
            oldest = row
    cost = kb_cost_report(deps, kb_id, entries, fills=fills, carries=carries)
    return {
        "kb_id": kb_id,
        "documents": sum(parse.values()),
        "parse_status": dict(sorted(parse.items())),
        "enable_status": dict(sorted(enable.items())),
        "summary_status": dict(sorted(summary.items())),
        "chunks": chunks,
        "bytes": stored_bytes,
        "cost": {
            "currency": cost["currency"],
            "aws_dollars": cost["aws_dollars"],
            "model_dollars": cost["model_dollars"],
            "workflow_pending": cost["workflow_pending"],
        },
        "oldest_waiting": _waiting(oldest) if oldest is not None else None,
    }


def _waiting(row: Knowledge) -> dict[str, Any]:
    since = datetime.fromisoformat(row.queued_at.replace("Z", "+00:00"))
    return {
        "knowledge_id": row.id,
        "file_name": row.file_name or row.title,
        "parse_status": row.parse_status.value,
        "queue": row.queued_stage,
        "since": row.queued_at,
        "waited_seconds": max(0, round((utcnow() - since).total_seconds())),
    }
