"""What an FAQ import reports of its rows: the first failed rows and the first rows imported without some of
their questions (their first three notes) in the task's progress, their texts clipped to SHOWN_TEXT_BYTES, and
every failed row in a CSV (the worker's side: the API hands the CSV out through `faq/failed_rows.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chalicelib.domain.item_limits import clip_utf8
from chalicelib.domain.types import Task
from chalicelib.faq.rows import failed_rows_csv
from chalicelib.faq.validation import PlannedRow
from chalicelib.ports import Dependencies

#: failed rows, and rows imported without some of their questions, a task's progress lists
MAX_FAILURES_SHOWN = 50
MAX_PARTIALS_SHOWN = 20
SHOWN_TEXT_BYTES = 300


def _shown(text: str) -> str:
    """A row's text as the task's progress shows it: clipped (a cell may hold megabytes; the task is one
    400 KB item, and its event one of 256 KB); the failed-rows CSV has it whole."""
    clipped = clip_utf8(text, SHOWN_TEXT_BYTES)
    return clipped if clipped == text else clipped + "…"


def failures_shown(rows: Sequence[PlannedRow]) -> list[dict[str, Any]]:
    """The first failed rows for the task's progress: row number, question, reason, category."""
    failed = [r for r in rows if r.action == "fail"][:MAX_FAILURES_SHOWN]
    return [
        {
            "row": r.row,
            "question": _shown(r.source.question),
            "reason": _shown(r.reason),
            "category": r.category,
        }
        for r in failed
    ]


def partials_shown(rows: Sequence[PlannedRow]) -> list[dict[str, Any]]:
    """Rows imported without some of their questions, and which went (a `partial` count alone says not)."""
    kept = [r for r in rows if r.partial and r.action != "fail"][:MAX_PARTIALS_SHOWN]
    return [
        {"row": r.row, "question": _shown(r.source.question), "notes": [_shown(n) for n in r.notes[:3]]}
        for r in kept
    ]


def record_failed_rows(deps: Dependencies, task: Task, prefix: str, rows: Sequence[PlannedRow]) -> None:
    """The first failed and partial rows in the task's progress, and every failed row in a CSV under
    `<prefix>results/` (a dry run's too, as an import's: its link is minted per request)."""
    task.progress["failures"] = failures_shown(rows)
    task.progress["partials"] = partials_shown(rows)
    failed = [r for r in rows if r.action == "fail"]
    if failed:
        task.params["failed_rows_url"] = deps.inbox.save(
            f"{prefix}results/{task.id}-failed.csv", failed_rows_csv(failed), "text/csv; charset=utf-8"
        )
