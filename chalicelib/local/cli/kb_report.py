"""A knowledge base's `cost` or `stats` report for `kb stats`, `kb watch` and `cost --kb`: a big knowledge
base answers the report its last refresh stored (`fresh: false`, `as_of`) or, before the first one, 202
`report_pending` with the refresh task's id (operations/kb_reports.py)."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console

from chalicelib.local.cli.client import ApiClient
from chalicelib.local.cli.output import plain

#: the answer's code while a big knowledge base's first report is computed (202, with its refresh task)
REPORT_PENDING = "report_pending"


def kb_report(
    api: ApiClient,
    kb_id: str,
    kind: str,
    console: Console,
    quiet: bool = False,
    interval: float = 0.5,
    timeout: float = 900,
    longest_wait: float = 10.0,
) -> dict[str, Any]:
    """The report; a first one being computed is waited for by reading the report's URL again (not the
    task: a reader of a shared knowledge base cannot read the owner's task, and the API starts no second
    refresh for repeated reads), every `interval` seconds, doubling up to `longest_wait`. A refresh that
    failed answers 503 `report_unavailable` saying why: the CLIError ends the wait and the command."""

    def read() -> dict[str, Any]:
        return (
            api.stats(kb_id) if kind == "stats" else dict(api.call("GET", f"/knowledge-bases/{kb_id}/{kind}"))
        )

    report = read()
    deadline = time.monotonic() + timeout
    if report.get("code") == REPORT_PENDING and report.get("task_id") and not quiet:
        plain(console, f"the {kind} report of {kb_id} is being computed (task {report['task_id']})")
    while report.get("code") == REPORT_PENDING and time.monotonic() < deadline:
        time.sleep(interval)
        interval = min(longest_wait, interval * 2)
        report = read()
    return report


def as_of_note(report: dict[str, Any]) -> str:
    """'' for a fresh report; else when the stored one was computed (and whether a refresh runs)."""
    if report.get("fresh", True):
        return ""
    if report.get("code") == REPORT_PENDING:
        return f"being computed (task {report.get('task_id')})"
    note = f"as of {report.get('as_of')}"
    return note + (" (refreshing)" if report.get("refreshing") else "")
