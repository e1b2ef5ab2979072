"""FAQ knowledge bases: `faq list|add|show|update|rm|tags|import|failed`."""

from __future__ import annotations

import argparse
import csv
import io
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from chalicelib.faq.commands import INLINE_MAX_BYTES, INLINE_MAX_ENTRIES
from chalicelib.local.cli.client import MINE, READS, ApiError, CliError, storage_request
from chalicelib.local.cli.kb import wait_task
from chalicelib.local.cli.output import (
    client,
    command,
    emit,
    plain,
    print_fields,
    print_json,
    print_rows,
    read_text,
    write_bytes,
)


def _entry_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if args.question is not None:
        body["standard_question"] = args.question
    for field, values in (
        ("answers", args.answer),
        ("similar_questions", args.similar),
        ("negative_questions", args.negative),
        ("tags", args.tag),
    ):
        if values:
            body[field] = values
    if args.disable:
        body["is_enabled"] = False
    if args.enable:
        body["is_enabled"] = True
    return body


def cmd_faq(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    kb_id = api.kb_id(args.kb)
    base = f"/knowledge-bases/{kb_id}/faq"
    action = args.action
    if action == "list":
        params = {k: v for k, v in (("tag", args.tag), ("keyword", args.keyword)) if v}
        entries = list(api.pages(f"{base}/entries", {"limit": 100, **params}, limit=args.limit))
        columns = ("id", "standard_question", "answers", "tags", "is_enabled")
        return emit(args, console, entries, lambda: print_rows(console, columns, entries))
    if action == "tags":
        tags = api.every(f"{base}/tags")
        return emit(args, console, tags, lambda: print_json(console, tags))
    if action == "add":
        entry = api.call("POST", f"{base}/entries", json=_entry_body(args))
    elif action == "show":
        entry = api.call("GET", f"{base}/entries/{args.entry_id}")
    elif action == "update":
        entry = api.call("PUT", f"{base}/entries/{args.entry_id}", json=_entry_body(args))
    elif action == "rm":
        entry = api.call("DELETE", f"{base}/entries/{args.entry_id}")
    elif action == "import":
        return _import(args, console, base)
    else:
        result = api.call("GET", f"{base}/import/last-result")
        return emit(args, console, result, lambda: _failed_rows(console, result, args.output))
    return emit(
        args,
        console,
        entry,
        lambda: print_fields(console, entry if isinstance(entry, dict) else {"result": entry}),
    )


def _import(args: argparse.Namespace, console: Console, base: str) -> int:
    """Inline for a small JSON file, else through the presigned upload; then the task's progress."""
    api = client(args)
    path = Path(args.file)
    body: dict[str, Any] = {"mode": args.mode, "dry_run": args.dry_run}
    entries = _inline_entries(path)
    if entries is not None:
        body["entries"] = entries
    else:
        grant = api.call("POST", f"{base}/import/upload-url", json={"file_name": path.name})
        try:
            if path.stat().st_size > int(grant.get("max_size") or 0) > 0:  # storage would refuse it (400)
                raise CliError("file_too_large", f"{path} is over {grant['max_size']:,} bytes: split it")
            api.put_presigned(grant, path)
        except OSError as exc:
            raise CliError("file_unreadable", f"cannot read {path}: {exc.strerror or exc}") from exc
        body["object_key"] = grant["object_key"]
    started = api.call("POST", f"{base}/import", json=body)
    task_id = str(started["task_id"])
    if args.no_wait:
        return emit(args, console, started, lambda: plain(console, f"FAQ import task {task_id}"))
    task = wait_task(api, task_id, console, quiet=args.json)
    emit(args, console, task, lambda: None)  # wait_task printed its last state
    failures = (task.get("progress") or {}).get("failed", 0)
    if failures and not args.json:
        plain(console, f"{failures} row(s) failed: `weknora-ingest faq failed {args.kb}` shows them")
    return 0 if task.get("status") == "completed" else 1


def _inline_entries(path: Path) -> list[Any] | None:
    """A small JSON file's entries, sent in the request; None for a file to upload (big, CSV, XLSX)."""
    try:
        small_json = path.suffix.lower() == ".json" and path.stat().st_size <= INLINE_MAX_BYTES
    except OSError as exc:
        raise CliError("file_unreadable", f"cannot read {path}: {exc.strerror or exc}") from exc
    if not small_json:
        return None
    try:
        loaded = json.loads(read_text(str(path)))
    except json.JSONDecodeError as exc:
        raise CliError("invalid_json", f"{path} is not JSON: {exc}") from exc
    loaded = loaded.get("entries", loaded) if isinstance(loaded, dict) else loaded
    return loaded if isinstance(loaded, list) and len(loaded) <= INLINE_MAX_ENTRIES else None


def _failed_rows(console: Console, result: dict[str, Any], output: str | None) -> None:
    shown = {k: v for k, v in result.items() if k not in ("failures", "failed_rows_download")}
    print_fields(console, shown, title="last FAQ import")
    failures = result.get("failures") or []
    if failures:
        print_rows(console, sorted({k for f in failures for k in f}), failures)
    link = result.get("failed_rows_download")
    url = link.get("url") if isinstance(link, dict) else link
    if not url:
        return
    response = storage_request("GET", str(url))
    if not response.ok:
        raise ApiError(response.status_code, "download_failed", response.text[:200])
    if output:
        write_bytes(Path(output), response.content)
        plain(console, f"failed rows saved to {output}")
        return
    rows = list(csv.DictReader(io.StringIO(response.content.decode("utf-8-sig"))))
    if rows:
        print_rows(console, list(rows[0]), rows)
    plain(console, f"{len(rows)} failed row(s); -o FILE saves the CSV")


def register(sub: Any) -> None:
    fq = sub.add_parser("faq", help="FAQ entries: list, add, show, update, rm, tags, import, failed")
    fq_sub = fq.add_subparsers(dest="action", required=True)
    sp = command(fq_sub, "list", "the entries, with filters", cmd_faq)
    sp.add_argument("kb")
    sp.add_argument("--tag")
    sp.add_argument("--keyword")
    sp.add_argument("--limit", type=int, default=1000)
    command(fq_sub, "tags", "the tag names in use", cmd_faq).add_argument("kb")
    for action in ("add", "update"):
        sp = command(fq_sub, action, f"{action} an entry", cmd_faq, kb_scope=MINE)
        sp.add_argument("kb")
        if action == "update":
            sp.add_argument("entry_id")
            sp.add_argument("--question")
        else:
            sp.add_argument("question")
        sp.add_argument("--answer", action="append", help="an answer (repeat)")
        sp.add_argument("--similar", action="append", help="a similar question (repeat)")
        sp.add_argument("--negative", action="append", help="a negative question (repeat)")
        sp.add_argument("--tag", action="append", help="a tag name (repeat)")
        sp.add_argument("--enable", action="store_true")
        sp.add_argument("--disable", action="store_true")
    for action in ("show", "rm"):
        text = f"{'delete' if action == 'rm' else action} an entry"
        sp = command(fq_sub, action, text, cmd_faq, kb_scope=MINE if action == "rm" else READS)
        sp.add_argument("kb")
        sp.add_argument("entry_id")
    sp = command(fq_sub, "import", "import a JSON, CSV or XLSX file, with progress", cmd_faq, kb_scope=MINE)
    sp.add_argument("kb")
    sp.add_argument("file")
    sp.add_argument("--mode", choices=("append", "replace"), default="append")
    sp.add_argument("--dry-run", action="store_true", help="validate only")
    sp.add_argument("--no-wait", action="store_true", help="print the task id and return")
    sp = command(fq_sub, "failed", "the last import's result and its failed rows", cmd_faq)
    sp.add_argument("kb")
    sp.add_argument("-o", "--output", help="save the failed rows' CSV here")
