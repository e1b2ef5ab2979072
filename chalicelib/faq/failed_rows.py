"""An FAQ import's failed rows (a CSV the worker writes under `faq-imports/`, which the bucket expires) are
handed out as download grants (`/r/{token}`, services/resources.py), minted for the request that asks (the
task's view, the knowledge base's last result) and valid `download_url_seconds`: a link ends with the key
or the share that minted it, and none is ever stored. A task or a result saved before grants held a
presigned URL; it is never shown again.

The task's progress lists the first failed rows and the first rows imported without some of their
questions (their first three notes), their texts clipped to SHOWN_TEXT_BYTES."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chalicelib.domain.clock import to_iso
from chalicelib.domain.item_limits import clip_utf8
from chalicelib.domain.types import Task, TaskKind
from chalicelib.faq.rows import failed_rows_csv
from chalicelib.faq.validation import PlannedRow
from chalicelib.ports import Dependencies
from chalicelib.services import resources

#: failed rows, and rows imported without some of their questions, a task's progress lists
MAX_FAILURES_SHOWN = 50
MAX_PARTIALS_SHOWN = 20
SHOWN_TEXT_BYTES = 300


def present_task(deps: Dependencies, task: Task, base_url: str) -> dict[str, Any]:
    """A task's view for `GET /tasks/{id}`: an FAQ import's failed rows get a fresh download grant, minted
    for the caller now (a link a task stored before grants, a presigned URL, is never shown)."""
    view = task.to_dict()
    if task.kind != TaskKind.FAQ_IMPORT or "progress" not in view:
        return view
    progress = view["progress"] = dict(view["progress"])
    progress.pop("failed_rows_download", None)
    stored = str(task.params.get("failed_rows_url", ""))
    link = failed_rows_link(deps, task.tenant_id, task.kb_id, task.id, stored, base_url)
    if link is not None:
        progress["failed_rows_download"] = link["url"]
        progress["failed_rows_expires_at"] = link["expires_at"]
    return view


def failed_rows_link(
    deps: Dependencies, tenant_id: str, kb_id: str, task_id: str, stored: str, base_url: str
) -> dict[str, Any] | None:
    """A download grant (`<base_url>/r/{token}`, `download_url_seconds`) on an import's failed-rows CSV,
    minted for the request's key, so it ends with that key or share; None when there is no CSV (none was
    written, or the bucket's `faq-imports/` rule expired it)."""
    if not stored or not deps.inbox.exists(stored):
        return None
    name = f"faq-import-{task_id}-failed.csv"
    resource = resources.register_import_file(
        deps, tenant_id, kb_id, resources.ROLE_FAILED_ROWS, stored, name, "text/csv; charset=utf-8"
    )
    expires = deps.settings.download_url_seconds
    token, expires_at = resources.create_grant(deps, resource, expires)
    return {
        "url": f"{base_url}/r/{token}",
        "file_name": name,
        "expires_in": expires,
        "expires_at": to_iso(expires_at),
        "resource": resource.id,
    }


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
