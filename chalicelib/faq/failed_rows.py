"""An FAQ import's failed rows (a CSV the worker writes under `faq-imports/`, which the bucket expires) are
handed out as download grants (`/r/{token}`, services/resources.py), minted for the request that asks (the
task's view, the knowledge base's last result) and valid `download_url_seconds`: a link ends with the key
or the share that minted it, and none is ever stored. A task or a result saved before grants held a
presigned URL; it is never shown again.

What the rows are and where the CSV is written is the worker's (`faq/row_report.py`): this module, which the
API loads, reads neither files nor rows."""

from __future__ import annotations

from typing import Any

from chalicelib.domain.clock import to_iso
from chalicelib.domain.types import Task, TaskKind
from chalicelib.ports import Dependencies
from chalicelib.services import resources


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
