"""`watch`: a knowledge base's live counts by state, until nothing is in flight (and the counts `kb stats`
shows)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from chalicelib.local.cli.client import ApiClient
from chalicelib.local.cli.kb_report import REPORT_PENDING, as_of_note, kb_report
from chalicelib.local.cli.output import client, markup_safe, plain, print_json, seconds, visible

IN_FLIGHT = ("pending", "processing", "finalizing", "deleting")


def stats_view(stats: dict[str, Any]) -> Table:
    table = Table(
        title=Text(visible(f"knowledge base {stats.get('kb_id')}")), expand=False, show_header=False
    )
    table.add_column("what", style="bold")
    table.add_column("count", overflow="fold")

    def counts(values: dict[str, Any]) -> str:
        return ", ".join(f"{k}={v}" for k, v in values.items()) or "-"

    if note := as_of_note(stats):
        table.add_row("report", markup_safe(note))
    table.add_row("documents", markup_safe(stats.get("documents", 0)))
    table.add_row("parse_status", markup_safe(counts(stats.get("parse_status") or {})))
    table.add_row("enable_status", markup_safe(counts(stats.get("enable_status") or {})))
    table.add_row("summary_status", markup_safe(counts(stats.get("summary_status") or {})))
    table.add_row("chunks", markup_safe(stats.get("chunks", 0)))
    table.add_row("bytes", f"{stats.get('bytes', 0):,}")
    cost = stats.get("cost") or {}
    table.add_row(
        "cost",
        f"${float(cost.get('aws_dollars') or 0):.6f} AWS + ${float(cost.get('model_dollars') or 0):.6f} models",
    )
    oldest = stats.get("oldest_waiting")
    if oldest:
        table.add_row(
            "oldest waiting",
            markup_safe(
                f"{oldest.get('file_name')} ({oldest.get('knowledge_id')}) {oldest.get('parse_status')} "
                f"in {oldest.get('queue')} for {seconds(float(oldest.get('waited_seconds') or 0))}"
            ),
        )
    return table


def settled(stats: dict[str, Any]) -> bool:
    """The report's counts hold nothing in flight (a report still being computed holds no counts)."""
    if stats.get("code") == REPORT_PENDING:
        return False
    return not any((stats.get("parse_status") or {}).get(state) for state in IN_FLIGHT)


def any_in_flight(api: ApiClient, kb_id: str) -> bool:
    """Whether a document of the knowledge base is in flight, read from its rows: the listing filtered by
    each in-flight state, newest first, up to the first row found (a few requests when one is; a walk of the
    knowledge base, MAX_READ rows a request, when none is)."""
    path = f"/knowledge-bases/{kb_id}/knowledge"
    return any(
        next(api.pages(path, {"page_size": 1, "parse_status": state}, limit=1), None) is not None
        for state in IN_FLIGHT
    )


def kb_settled(api: ApiClient, kb_id: str, stats: dict[str, Any]) -> bool:
    """Nothing in flight: a fresh report's counts say so. A big knowledge base's stored report (`fresh:
    false`) is as of its last refresh, up to minutes old: documents uploaded or reparsed since are not in
    it, so the rows themselves are read."""
    if stats.get("fresh", True):
        return settled(stats)
    return stats.get("code") != REPORT_PENDING and not any_in_flight(api, kb_id)


def watch_line(stats: dict[str, Any]) -> str:
    parse = stats.get("parse_status") or {}
    line = f"{stats.get('documents', 0)} documents: " + (
        ", ".join(f"{k} {v}" for k, v in parse.items()) or "none"
    )
    line += f"; {stats.get('chunks', 0)} chunks"
    if note := as_of_note(stats):  # a big knowledge base's stored report: its counts may be behind
        line += f"; report {note}"
    oldest = stats.get("oldest_waiting")
    if oldest:
        line += (
            f"; oldest waiting {oldest.get('file_name')} in {oldest.get('queue')} "
            f"{seconds(float(oldest.get('waited_seconds') or 0))}"
        )
    return line


def cmd_watch(args: argparse.Namespace, console: Console) -> int:
    """A knowledge base's counts by state, refreshed until Ctrl-C or until nothing is in flight."""
    api = client(args)
    kb_id = api.kb_id(args.kb)
    started = time.monotonic()
    live = Live(console=console, refresh_per_second=4) if console.is_terminal and not args.json else None
    shown = ""
    stats: dict[str, Any] = {}
    timed_out = done = False
    if live is not None:
        live.start()
    try:
        while True:
            stats = kb_report(api, kb_id, "stats", console, quiet=True)
            if args.json:
                print_json(console, stats, lines=True)  # one document a look: JSON Lines
            elif live is not None:
                live.update(Group(stats_view(stats), f"elapsed {seconds(time.monotonic() - started)}"))
            else:
                line = watch_line(stats)
                if line != shown:
                    shown = line
                    plain(console, line)
            if not args.forever and (done := kb_settled(api, kb_id, stats)):
                break
            if args.timeout and time.monotonic() - started > args.timeout:
                timed_out = True
                break
            time.sleep(args.interval)
    except KeyboardInterrupt:
        pass
    finally:
        if live is not None:
            live.stop()
    if args.forever:  # stopped by Ctrl-C: no more requests; a stored report's counts settle nothing
        done = bool(stats.get("fresh", True)) and settled(stats)
    if not args.json:
        plain(console, ("settled: " if done else "stopped: ") + watch_line(stats))
    gave_up = timed_out and not done  # a script waiting on the KB learns it did not settle
    return 1 if gave_up else 0
