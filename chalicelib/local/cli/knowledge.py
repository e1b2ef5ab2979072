"""Documents: `ls` (with the listing's filters), `show`, `edit`, `publish`, `rm`, `reparse`, `cancel`,
`retry-failed`, `move`, `summary`, `chunks`, `download`, `add-url`, `add-text` and `task`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path, PurePosixPath
from typing import Any

from rich.console import Console

from chalicelib.local.cli.client import MINE, ApiError, CliError, storage_request
from chalicelib.local.cli.kb import _task_started, task_line, wait_task
from chalicelib.local.cli.output import (
    client,
    command,
    emit,
    json_object_arg,
    plain,
    print_fields,
    print_rows,
    read_text,
    write_bytes,
)

LS_COLUMNS = ("id", "file_name", "file_type", "parse_status", "enable_status", "chunk_count", "created_at")


def cmd_ls(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    kb_id = api.kb_id(args.kb)
    filters = {
        "parse_status": args.status,
        "file_type": args.type,
        "tag_id": args.tag,
        "source": args.source,
        "keyword": args.keyword,
        "created_from": args.since,
        "created_to": args.until,
    }
    params = {"page_size": 100, **{k: v for k, v in filters.items() if v}}
    rows = list(api.pages(f"/knowledge-bases/{kb_id}/knowledge", params, limit=args.limit))

    def render() -> None:
        for row in rows:
            row["file_name"] = row.get("file_name") or row.get("title") or ""
        print_rows(console, LS_COLUMNS, rows)
        plain(console, f"{len(rows)} document(s)")

    return emit(args, console, rows, render)


def cmd_show(args: argparse.Namespace, console: Console) -> int:
    row = client(args).knowledge(args.knowledge_id)
    return emit(
        args, console, row, lambda: print_fields(console, row, title=f"knowledge {args.knowledge_id}")
    )


def cmd_edit(args: argparse.Namespace, console: Console) -> int:
    body: dict[str, Any] = dict(args.set or {})
    for name in ("title", "description", "content"):
        if getattr(args, name) is not None:
            body[name] = getattr(args, name)
    if args.tag is not None:
        body["tag_ids"] = args.tag
    if args.enable or args.disable:
        body["enable_status"] = "enabled" if args.enable else "disabled"
    row = client(args).call("PUT", f"/knowledge/{args.knowledge_id}", json=body)
    return emit(
        args, console, row, lambda: print_fields(console, row, title=f"knowledge {args.knowledge_id}")
    )


def cmd_publish(args: argparse.Namespace, console: Console) -> int:
    row = client(args).call("POST", f"/knowledge/{args.knowledge_id}/publish")
    return emit(args, console, row, lambda: plain(console, f"{args.knowledge_id} {row.get('parse_status')}"))


def cmd_rm(args: argparse.Namespace, console: Console) -> int:
    """One id: DELETE /knowledge/{id}; several: one batch-delete in their knowledge base."""
    api = client(args)
    if len(args.ids) == 1 and not args.kb:
        data = api.call("DELETE", f"/knowledge/{args.ids[0]}")
    else:
        kb_id = api.kb_id(args.kb) if args.kb else str(api.knowledge(args.ids[0]).get("kb_id"))
        data = api.call("POST", "/knowledge/batch-delete", json={"kb_id": kb_id, "ids": args.ids})
    return _task_started(args, console, api, data, f"deleting {len(args.ids)} document(s)")


def cmd_reparse(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    extra = {"process_config": args.process_config} if args.process_config else {}
    if len(args.ids) == 1 and not args.kb:
        row = api.call("POST", f"/knowledge/{args.ids[0]}/reparse", json=extra)
        return emit(
            args,
            console,
            row,
            lambda: plain(console, f"{row['id']} attempt {row.get('attempt')} {row.get('parse_status')}"),
        )
    kb_id = api.kb_id(args.kb) if args.kb else str(api.knowledge(args.ids[0]).get("kb_id"))
    data = api.call("POST", "/knowledge/batch-reparse", json={"kb_id": kb_id, "ids": args.ids, **extra})
    return emit(args, console, data, lambda: plain(console, f"reparsing {len(args.ids)} document(s): {data}"))


def cmd_cancel(args: argparse.Namespace, console: Console) -> int:
    row = client(args).call("POST", f"/knowledge/{args.knowledge_id}/cancel")
    return emit(args, console, row, lambda: plain(console, f"{args.knowledge_id} {row.get('parse_status')}"))


def cmd_retry_failed(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    data = api.call("POST", f"/knowledge-bases/{api.kb_id(args.kb)}/retry-failed")
    return _task_started(args, console, api, data, "reparsing the failed documents")


def cmd_move(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    source = api.kb_id(args.kb) if args.kb else str(api.knowledge(args.ids[0]).get("kb_id"))
    body = {"source_kb_id": source, "target_kb_id": api.kb_id(args.to), "ids": args.ids, "mode": args.mode}
    data = api.call("POST", "/knowledge/move", json=body)
    return _task_started(args, console, api, data, f"moving {len(args.ids)} document(s) to {args.to}")


def cmd_summary(args: argparse.Namespace, console: Console) -> int:
    row = client(args).call("POST", f"/knowledge/{args.knowledge_id}/summary/refresh")
    return emit(
        args, console, row, lambda: plain(console, f"{args.knowledge_id} summary {row.get('summary_status')}")
    )


def cmd_task(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    if not args.wait:
        task = api.call("GET", f"/tasks/{args.task_id}")
        return emit(args, console, task, lambda: plain(console, task_line(task)))
    task = wait_task(api, args.task_id, console, quiet=args.json)
    emit(args, console, task, lambda: None)  # wait_task printed its last state
    return 0 if task.get("status") == "completed" else 1


def cmd_chunks(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    base = f"/knowledge/{args.knowledge_id}/chunks"
    if args.action == "list":
        chunks = list(api.pages(base, {"limit": 200}, limit=args.limit))

        def render() -> None:
            for c in chunks:
                c["text"] = " ".join(str(c.get("content", "")).split())[:100]
            print_rows(console, ("chunk_index", "id", "chunk_type", "is_enabled", "text"), chunks)
            plain(console, f"{len(chunks)} chunk(s)")

        return emit(args, console, chunks, render)
    if args.action == "show":
        chunk = api.call("GET", f"{base}/{args.chunk_id}")
    else:
        body: dict[str, Any] = {}
        if args.content is not None:
            body["content"] = args.content
        if args.enable or args.disable:
            body["is_enabled"] = bool(args.enable)
        chunk = api.call("PUT", f"{base}/{args.chunk_id}", json=body)
    return emit(args, console, chunk, lambda: print_fields(console, chunk, title=f"chunk {args.chunk_id}"))


def served_file_name(file_name: str, knowledge_id: str) -> str:
    """The file name the API gave, as a name in the chosen folder only: its last part (a name holding
    `../` or an absolute path never writes outside it); none: the knowledge id."""
    if not file_name:
        return knowledge_id
    base = PurePosixPath(file_name.replace("\\", "/")).name
    if base in ("", ".", ".."):
        raise CliError("unsafe_file_name", f"the API named the file {file_name!r}: give -o PATH")
    return base


def cmd_download(args: argparse.Namespace, console: Console) -> int:
    """The original (or parsed Markdown) through its short-lived link; `-o -` writes to stdout."""
    link = client(args).call("GET", f"/knowledge/{args.knowledge_id}/file-url", params={"kind": args.kind})
    response = storage_request("GET", link["url"])
    if not response.ok:
        raise ApiError(
            response.status_code, "download_failed", f"GET {link['kind']} file failed: {response.text[:200]}"
        )
    if args.output == "-":
        sys.stdout.buffer.write(response.content)
        return 0
    target = Path(args.output or ".")
    if not args.output or target.is_dir():  # a folder: the file takes the API's name in it
        target = target / served_file_name(str(link.get("file_name") or ""), args.knowledge_id)
    write_bytes(target, response.content, overwrite=args.force)
    data = {**link, "path": str(target), "bytes": len(response.content)}
    return emit(
        args, console, data, lambda: plain(console, f"saved {target} ({len(response.content)} bytes)")
    )


def cmd_add_url(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    kb_id = api.kb_id(args.kb)
    body: dict[str, Any] = {"url": args.url}
    if args.title:
        body["title"] = args.title
    if args.tag:
        body["tag_ids"] = args.tag
    row = api.call("POST", f"/knowledge-bases/{kb_id}/knowledge/url", json=body)
    return emit(
        args, console, row, lambda: plain(console, f"{row['id']} {row.get('parse_status')} {args.url}")
    )


def cmd_add_text(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    kb_id = api.kb_id(args.kb)
    content = args.content if args.content is not None else read_text(args.file) if args.file else ""
    body: dict[str, Any] = {
        "title": args.title,
        "content": content,
        "status": "draft" if args.draft else "publish",
    }
    if args.tag:
        body["tag_ids"] = args.tag
    row = api.call("POST", f"/knowledge-bases/{kb_id}/knowledge/manual", json=body)
    return emit(
        args, console, row, lambda: plain(console, f"{row['id']} {row.get('parse_status')} {args.title}")
    )


def register(sub: Any) -> None:
    ls = command(sub, "ls", "a knowledge base's documents, newest first, with the listing's filters", cmd_ls)
    ls.add_argument("kb", help="knowledge base id or name")
    ls.add_argument(
        "--status",
        choices=(
            "draft",
            "pending",
            "processing",
            "finalizing",
            "completed",
            "failed",
            "cancelled",
            "deleting",
        ),
        help="parse status",
    )
    ls.add_argument("--type", help="file type (pdf, md, …)")
    ls.add_argument("--tag", help="tag id")
    ls.add_argument("--source", choices=("file", "url", "manual"))
    ls.add_argument("--keyword", help="in the file name or title")
    ls.add_argument("--since", help="created at or after (ISO time)")
    ls.add_argument("--until", help="created at or before (ISO time)")
    ls.add_argument("--limit", type=int, default=1000, help="at most this many rows (default %(default)s)")

    command(sub, "show", "one document's row", cmd_show).add_argument("knowledge_id")

    ed = command(
        sub, "edit", "change a document's title, description, tags, content or enable status", cmd_edit
    )
    ed.add_argument("knowledge_id")
    ed.add_argument("--title")
    ed.add_argument("--description")
    ed.add_argument("--content", help="a manual document's new content")
    ed.add_argument("--tag", action="append", help="tag id (repeat; replaces the tags)")
    ed.add_argument("--enable", action="store_true")
    ed.add_argument("--disable", action="store_true")
    ed.add_argument(
        "--set", type=json_object_arg, metavar="JSON", help="more fields of the body, as a JSON object"
    )

    command(sub, "publish", "publish a manual draft (it is then processed)", cmd_publish).add_argument(
        "knowledge_id"
    )

    rm = command(sub, "rm", "delete documents (one, or a batch of one knowledge base)", cmd_rm, kb_scope=MINE)
    rm.add_argument("ids", nargs="+", metavar="KNOWLEDGE_ID")
    rm.add_argument("--kb", help="their knowledge base (default: the first one's)")
    rm.add_argument("--wait", action="store_true", help="follow the delete task to its end")

    rp = command(sub, "reparse", "parse documents again as a new attempt", cmd_reparse, kb_scope=MINE)
    rp.add_argument("ids", nargs="+", metavar="KNOWLEDGE_ID")
    rp.add_argument("--kb", help="their knowledge base (default: the first one's)")
    rp.add_argument("--process-config", type=json_object_arg, metavar="JSON", help="process_config overrides")

    command(sub, "cancel", "cancel a document's processing", cmd_cancel).add_argument("knowledge_id")

    rf = command(
        sub,
        "retry-failed",
        "reparse every failed document of a knowledge base",
        cmd_retry_failed,
        kb_scope=MINE,
    )
    rf.add_argument("kb", help="knowledge base id or name")
    rf.add_argument("--wait", action="store_true", help="follow the task to its end")

    mv = command(sub, "move", "move completed documents into another knowledge base", cmd_move, kb_scope=MINE)
    mv.add_argument("ids", nargs="+", metavar="KNOWLEDGE_ID")
    mv.add_argument("--to", required=True, help="target knowledge base id or name")
    mv.add_argument("--kb", help="source knowledge base (default: the first document's)")
    mv.add_argument("--mode", choices=("reuse_vectors", "reparse"), default="reuse_vectors")
    mv.add_argument("--wait", action="store_true", help="follow the task to its end")

    command(sub, "summary", "summarise a document again", cmd_summary).add_argument("knowledge_id")

    tk = command(sub, "task", "a durable task's progress (delete, move, clone, retry, FAQ import)", cmd_task)
    tk.add_argument("task_id")
    tk.add_argument("--wait", action="store_true", help="follow it to its end")

    ch = sub.add_parser("chunks", help="a document's chunks: list, show, edit")
    ch_sub = ch.add_subparsers(dest="action", required=True)
    sp = command(ch_sub, "list", "the chunks in order", cmd_chunks)
    sp.add_argument("knowledge_id")
    sp.add_argument("--limit", type=int, default=1000)
    for action in ("show", "edit"):
        sp = command(ch_sub, action, f"{action} one chunk", cmd_chunks)
        sp.add_argument("knowledge_id")
        sp.add_argument("chunk_id")
        if action == "edit":
            sp.add_argument("--content", help="new text (re-embedded and re-indexed)")
            sp.add_argument("--enable", action="store_true")
            sp.add_argument("--disable", action="store_true")

    dl = command(sub, "download", "download a document's original file or parsed Markdown", cmd_download)
    dl.add_argument("knowledge_id")
    dl.add_argument("--kind", choices=("original", "parsed"), default="original")
    dl.add_argument("-o", "--output", help="file or directory (default: the file's name here; - for stdout)")
    dl.add_argument("--force", action="store_true", help="overwrite a file that is there already")

    au = command(
        sub,
        "add-url",
        "import a web page (the same as `ingest --kb KB URL`, without following)",
        cmd_add_url,
        kb_scope=MINE,
    )
    au.add_argument("kb")
    au.add_argument("url")
    au.add_argument("--title")
    au.add_argument("--tag", action="append", help="tag id (repeat)")

    at = command(sub, "add-text", "create a manual (Markdown) document", cmd_add_text, kb_scope=MINE)
    at.add_argument("kb")
    at.add_argument("title")
    at.add_argument("--content", help="the Markdown (default: --file)")
    at.add_argument("--file", help="read the Markdown from a file (- for stdin)")
    at.add_argument("--draft", action="store_true", help="keep it a draft (publish later)")
    at.add_argument("--tag", action="append", help="tag id (repeat)")
