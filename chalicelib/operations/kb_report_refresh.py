"""The `kb_report` task's work: a big knowledge base's cost or stats report, read whole in the lifecycle
function with the functions a request uses within its bound (so both agree by construction), then stored
(operations/kb_reports.py). Idempotent: a redelivery reads again and stores a newer report; its workflow
fills and carries rewrite the same entries."""

from __future__ import annotations

from typing import Any

from chalicelib.domain.clock import now_iso
from chalicelib.domain.errors import AppError
from chalicelib.domain.types import Task
from chalicelib.operations.cost import REFRESH_USAGE_CARRIES, REFRESH_WORKFLOW_FILLS, kb_cost_report
from chalicelib.operations.kb_reports import COST, REPORT, STATS, save_refreshed
from chalicelib.operations.stats import kb_stats_report
from chalicelib.ports import Dependencies
from chalicelib.services.kb_rows import kb_rows


def whole_report(deps: Dependencies, kb_id: str, kind: str) -> dict[str, Any]:
    """The report of every entry (and row): what a request computes when the knowledge base is small."""
    entries = deps.usage.for_kb(kb_id)
    if kind == COST:
        return kb_cost_report(
            deps, kb_id, entries, fills=REFRESH_WORKFLOW_FILLS, carries=REFRESH_USAGE_CARRIES
        )
    if kind == STATS:
        return kb_stats_report(
            deps,
            kb_id,
            kb_rows(deps, kb_id),
            entries,
            fills=REFRESH_WORKFLOW_FILLS,
            carries=REFRESH_USAGE_CARRIES,
        )
    raise AppError(f"no such report: {kind!r}", code="unknown_report")


def refresh_report(deps: Dependencies, task: Task) -> None:
    """Reads the task's knowledge base's report whole and stores it (unless a newer one is stored); a
    knowledge base gone meanwhile has none."""
    if deps.kbs.get(task.kb_id) is None:
        return
    as_of = now_iso()  # before the read: the report holds at least what was there then
    save_refreshed(deps, task, as_of, whole_report(deps, task.kb_id, str(task.params[REPORT])))
