"""Knowledge bases: `kb` (list, create, show, update, delete, stats, clone, graph, wiki), `share`, `tags`,
`search`, `cost`, `watch` (a KB's live counts) and `console` (the browser console on a KB)."""

from __future__ import annotations

import argparse
import json
import time
import webbrowser
from typing import Any
from urllib.parse import quote, urlencode

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from chalicelib.local.cli import share_blocks
from chalicelib.local.cli.client import MINE, READS, SHARED, ApiClient, CliError
from chalicelib.local.cli.kb_report import as_of_note, kb_report
from chalicelib.local.cli.output import (
    client,
    command,
    emit,
    json_object_arg,
    markup_safe,
    plain,
    print_fields,
    print_json,
    print_rows,
    visible,
)
from chalicelib.local.cli.watch import cmd_watch, stats_view

KB_COLUMNS = ("id", "name", "type", "description", "shared", "created_at")


# ---- kb -----------------------------------------------------------------------------------------------------


def _kb_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = dict(args.set or {})
    for name in ("name", "description", "embedding_model_id", "summary_model_id", "retrieval_engine"):
        value = getattr(args, name, None)
        if value is not None:
            body[name] = value
    if getattr(args, "type", None):
        body["type"] = args.type
    if getattr(args, "chunk_size", None) is not None:
        body.setdefault("chunking_config", {})["chunk_size"] = args.chunk_size
    if getattr(args, "apply_to", None):
        body["apply_to"] = args.apply_to
    if getattr(args, "reembed", False):
        body["reembed"] = True
    return body


def cmd_kb(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    action = args.action
    if action == "list":
        kbs = api.knowledge_bases()
        return emit(args, console, kbs, lambda: print_rows(console, KB_COLUMNS, kbs))
    if action == "create":
        kb = api.call("POST", "/knowledge-bases", json=_kb_body(args))
        return emit(
            args, console, kb, lambda: plain(console, f"knowledge base {kb['id']} ({kb['name']}) created")
        )
    kb_id = api.kb_id(args.kb)
    if action == "show":
        kb = api.call("GET", f"/knowledge-bases/{kb_id}")
        return emit(args, console, kb, lambda: print_fields(console, kb, title=f"knowledge base {kb_id}"))
    if action == "update":
        kb = api.call("PUT", f"/knowledge-bases/{kb_id}", json=_kb_body(args))
        return emit(args, console, kb, lambda: print_fields(console, kb, title=f"knowledge base {kb_id}"))
    if action == "delete":
        data = api.call("DELETE", f"/knowledge-bases/{kb_id}")
        return _task_started(args, console, api, data, f"deleting knowledge base {kb_id}")
    if action == "stats":
        stats = kb_report(api, kb_id, "stats", console, quiet=args.json)
        return emit(args, console, stats, lambda: console.print(stats_view(stats)))
    if action == "clone":
        body: dict[str, Any] = {}
        if args.to:
            body["target_kb_id"] = api.kb_id(args.to)
        if args.name:
            body["name"] = args.name
        data = api.call("POST", f"/knowledge-bases/{kb_id}/clone", json=body)
        return _task_started(args, console, api, data, f"cloning {kb_id}")
    if action == "graph":
        graph = api.call(
            "GET", f"/knowledge-bases/{kb_id}/graph", params={"entity": args.entity, "limit": args.limit}
        )
        return emit(args, console, graph, lambda: print_json(console, graph))
    wiki = api.wiki(kb_id)
    return emit(args, console, wiki, lambda: print_json(console, wiki))


def _task_started(args: argparse.Namespace, console: Console, api: ApiClient, data: Any, what: str) -> int:
    """A 202 with a task: its id, and with --wait its end."""
    task_id = str((data or {}).get("task_id") or (data or {}).get("id") or "")
    if getattr(args, "wait", False) and task_id:
        data = wait_task(api, task_id, console, quiet=args.json)  # its last line is the end
        emit(args, console, data, lambda: None)
        return 0 if data.get("status") == "completed" else 1
    return emit(
        args, console, data, lambda: plain(console, f"{what}: task {task_id} (weknora-ingest task {task_id})")
    )


def task_line(task: dict[str, Any]) -> str:
    progress = task.get("progress") or {}
    total = task.get("total") if task.get("total") is not None else progress.get("total")
    done = (
        task.get("done", 0)
        if task.get("total") is not None or "processed" not in progress
        else progress["processed"]
    )
    counts = f"{done}/{total if total is not None else '?'}"
    line = (
        f"task {task.get('id')} {task.get('kind')} {task.get('status')}: {counts} done, "
        f"{task.get('succeeded', 0)} succeeded, {task.get('failed', 0)} failed"
    )
    if progress:
        shown = {
            k: v
            for k, v in progress.items()
            if isinstance(v, int | float | str) and k != "failed_rows_download"
        }
        line += " (" + ", ".join(f"{k}={v}" for k, v in shown.items()) + ")"
    return line


def wait_task(
    api: ApiClient,
    task_id: str,
    console: Console,
    interval: float = 0.5,
    timeout: float = 3600,
    quiet: bool = False,
) -> dict[str, Any]:
    """Poll a task until it ends, a line per change (the progress of an FAQ import, a move, a delete)."""
    deadline = time.monotonic() + timeout
    shown = ""
    while True:
        task = dict(api.call("GET", f"/tasks/{task_id}"))
        line = task_line(task)
        if line != shown and not quiet:
            shown = line
            plain(console, line)
        if task.get("status") not in ("queued", "running") or time.monotonic() > deadline:
            return task
        time.sleep(interval)


# ---- console, cost, search ------------------------------------------------------------------------------------


def console_url(api_base: str, key: str = "", kb_id: str = "", knowledge_id: str = "") -> str:
    """`<api>/console/#kb=…` (with `key` `#key=…&kb=…`): the console served by the API itself (a stage
    prefix kept)."""
    root = api_base.rstrip("/")
    if root.endswith("/api/v1"):
        root = root[: -len("/api/v1")]
    shown = {k: v for k, v in (("key", key), ("kb", kb_id), ("knowledge", knowledge_id)) if v}
    fragment = urlencode(shown, quote_via=quote)
    return f"{root}/console/" + (f"#{fragment}" if fragment else "")


def cmd_console(args: argparse.Namespace, console: Console) -> int:
    """Opens the console without the key: a browser's command line (the URL it is started with) is
    readable by every user of the machine. `--with-key` prints a link carrying the key (the page
    asks before it uses it), and opens nothing."""
    api = client(args)
    kb_id = api.kb_id(args.kb) if args.kb else ""
    url = console_url(args.api, args.key if args.with_key else "", kb_id, args.knowledge or "")
    opened = False if args.no_browser or args.with_key else webbrowser.open(url)
    data = {"url": url, "opened": opened}

    def render() -> None:
        plain(console, f"{'opened' if opened else 'open'} {url}")
        if not args.with_key:
            plain(
                console,
                "sign in there with your API key (WEKNORA_API_KEY; the local stack's is local-dev-key)",
            )

    return emit(args, console, data, render)


def cmd_docs(args: argparse.Namespace, console: Console) -> int:
    """Opens the interactive API docs (Swagger UI, served by the API at /api/v1/docs)."""
    root = args.api.rstrip("/")
    url = f"{root if root.endswith('/api/v1') else root + '/api/v1'}/docs"
    opened = False if args.no_browser else webbrowser.open(url)
    return emit(
        args,
        console,
        {"url": url, "opened": opened},
        lambda: plain(console, f"{'opened' if opened else 'open'} {url}"),
    )


def cost_table(report: dict[str, Any]) -> Group:
    """What the document (or knowledge base) cost so far, priced with the server's dated price table."""
    title = (
        f"cost: ${report.get('aws_dollars', 0):.6f} AWS + ${report.get('model_dollars', 0):.6f} models "
        f"(prices as of {report.get('prices_as_of', '?')})"
    )
    table = Table(expand=False)
    for col in ("unit", "quantity", "dollars"):
        table.add_column(col, justify="left" if col == "unit" else "right")
    for line in list(report.get("lines") or []) + list(report.get("model_tokens") or []):
        table.add_row(markup_safe(str(line["unit"])), f"{line['quantity']:g}", f"{line['dollars']:.6f}")
    if report.get("workflow_pending"):
        table.caption = "the execution is still running: its state transitions are counted when it ends"
    title += f"; {note}" if (note := as_of_note(report)) else ""  # a big knowledge base's stored report
    return Group(
        Text(visible(title)), table
    )  # the line above the table: a title would wrap to the table's width


def cmd_cost(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    if args.kb:
        report = kb_report(api, api.kb_id(args.kb), "cost", console, quiet=args.json)
    elif args.knowledge_id:
        report = api.cost(args.knowledge_id)
    else:
        raise CliError("missing_argument", "give a knowledge id or --kb", exit_code=2)
    return emit(args, console, report, lambda: console.print(cost_table(report)))


def meta_value(text: str) -> Any:
    """One `--meta` value: a JSON number, boolean or "quoted string" as JSON, anything else as text (the
    API compares without coercion, so `year=2024` must send the number and `year='"2024"'` the string)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, str | int | float | bool) else text


def meta_arg(text: str) -> tuple[str, list[Any]]:
    """`--meta key=value` or `--meta key=v1,v2` (argparse type): the key and its values."""
    key, sep, values = text.partition("=")
    if not sep or not key.strip() or not values:
        raise argparse.ArgumentTypeError(f"expected key=value or key=v1,v2, got {text!r}")
    if values.startswith('"') and values.endswith('"') and len(values) > 1:
        return key.strip(), [meta_value(values)]  # one quoted string, commas and all
    return key.strip(), [meta_value(v) for v in values.split(",")]


def search_filters(args: argparse.Namespace) -> dict[str, Any]:
    """The hybrid-search fields the flags set; a flag left out is left to the API's default. Repeating
    `--meta` with one key widens its `in`."""
    merged: dict[str, list[Any]] = {}
    for key, values in args.meta or []:
        known = merged.setdefault(key, [])
        known.extend(v for v in values if v not in known)
    body: dict[str, Any] = {
        "knowledge_ids": args.knowledge,
        "tag_ids": args.tag,
        "file_types": args.type,
        "metadata": {k: v[0] if len(v) == 1 else {"in": v} for k, v in merged.items()} or None,
        "min_score": args.min_score,
        "retriever": args.retriever,
        "vector_weight": args.vector_weight,
        "max_chunks_per_document": args.per_document,
        "collapse_copies": args.collapse_copies or None,
    }
    return {name: value for name, value in body.items() if value is not None}


def cmd_search(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    kb = api.find_kb(args.kb)  # by id, then by name (the tenant's own first)
    if kb is None:
        raise CliError("kb_not_found", f"no knowledge base named {args.kb!r}")
    hits = api.search(str(kb["id"]), args.query, args.n, **search_filters(args))

    def render() -> None:
        if not hits:
            console.print("no results")
        for i, h in enumerate(hits[: args.n], 1):
            head = (
                f"#{i} score={float(h.get('score', 0)):.4f} {h.get('knowledge_title', '')} "
                f"chunk={h.get('chunk_id', '')}"
            )
            copies = [str(c.get("knowledge_title", "")) for c in h.get("copies") or []]
            if copies:
                head += f" (also in {', '.join(copies)})"
            content = Text(visible(h.get("content", ""), multiline=True))
            console.print(Panel(content, title=markup_safe(head), title_align="left"))

    return emit(args, console, hits, render)


# ---- shares and tags ------------------------------------------------------------------------------------------


def cmd_share(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    kb_id = api.kb_id(args.kb)
    base = f"/knowledge-bases/{kb_id}/shares"
    if args.action == "decline":  # one another tenant shared with this one
        data = api.call("DELETE", f"/shared-knowledge-bases/{kb_id}")
        return emit(
            args, console, data, lambda: plain(console, f"{kb_id} declined: no longer shared with you")
        )
    if args.action == "list":
        shares = api.call("GET", base)
        return emit(args, console, shares, lambda: print_json(console, shares))
    if args.action == "add":
        data = api.call("POST", base, json={"tenant_id": args.tenant_id})
        return emit(args, console, data, lambda: plain(console, f"{kb_id} shared with {args.tenant_id}"))
    data = api.call("DELETE", f"{base}/{args.tenant_id}")
    return emit(
        args, console, data, lambda: plain(console, f"{kb_id} no longer shared with {args.tenant_id}")
    )


def cmd_tags(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    kb_id = api.kb_id(args.kb)
    base = f"/knowledge-bases/{kb_id}/tags"
    if args.action == "list":
        tags = api.call("GET", base)
        items = tags.get("items", tags) if isinstance(tags, dict) else tags
        return emit(
            args,
            console,
            tags,
            lambda: print_rows(console, ("id", "name", "color", "knowledge_count"), items),
        )
    if args.action == "create":
        tag = api.call(
            "POST", base, json={"name": args.name, **({"color": args.color} if args.color else {})}
        )
    elif args.action == "show":
        tag = api.call("GET", f"{base}/{args.tag_id}")
    elif args.action == "update":
        body = {k: v for k, v in (("name", args.name), ("color", args.color)) if v is not None}
        tag = api.call("PUT", f"{base}/{args.tag_id}", json=body)
    else:
        tag = api.call("DELETE", f"{base}/{args.tag_id}")
    return emit(
        args, console, tag, lambda: print_fields(console, tag if isinstance(tag, dict) else {"result": tag})
    )


# ---- parsers ----------------------------------------------------------------------------------------------------


def register(sub: Any) -> None:
    kb = sub.add_parser(
        "kb", help="knowledge bases: list, create, show, update, delete, stats, clone, graph, wiki"
    )
    kb_sub = kb.add_subparsers(dest="action", required=True)
    command(kb_sub, "list", "every knowledge base of the tenant (shared ones after its own)", cmd_kb)
    for action, text in (
        ("create", "a new knowledge base"),
        ("update", "change a knowledge base's settings"),
    ):
        sp = command(kb_sub, action, text, cmd_kb, kb_scope=MINE)
        if action == "update":
            sp.add_argument("kb", help="knowledge base id or name")
            sp.add_argument("--name")
            sp.add_argument(
                "--apply-to", choices=("new", "reparse"), help="reparse: apply to existing documents"
            )
            sp.add_argument("--reembed", action="store_true", help="re-embed with a new embedding model")
        else:
            sp.add_argument("name")
            sp.add_argument("--type", choices=("document", "faq"), default=None)
        sp.add_argument("--description")
        sp.add_argument("--embedding-model-id")
        sp.add_argument("--summary-model-id")
        sp.add_argument("--retrieval-engine", choices=("embedded", "opensearch"))
        sp.add_argument("--chunk-size", type=int)
        sp.add_argument(
            "--set", type=json_object_arg, metavar="JSON", help="more fields of the body, as a JSON object"
        )
    for action, text in (
        ("show", "one knowledge base's settings"),
        ("delete", "delete a knowledge base and everything in it (a task)"),
        ("stats", "documents by parse, enable and summary status, chunks, bytes, cost, oldest waiting"),
        ("clone", "clone into a new or an existing knowledge base (a task)"),
        ("graph", "an entity of the knowledge graph and its neighbours"),
        ("wiki", "the knowledge base's wiki"),
    ):
        # delete and clone write (clone into one of the tenant's own; the API refuses a shared source)
        writes = action in ("delete", "clone")
        sp = command(kb_sub, action, text, cmd_kb, kb_scope=MINE if writes else READS)
        sp.add_argument("kb", help="knowledge base id or name")
        if action in ("delete", "clone"):
            sp.add_argument("--wait", action="store_true", help="follow the task to its end")
        if action == "clone":
            sp.add_argument("--to", help="an existing target knowledge base")
            sp.add_argument("--name", help="the new knowledge base's name")
        if action == "graph":
            sp.add_argument("entity")
            sp.add_argument("--limit", type=int, default=50)

    wa = command(
        sub, "watch", "a knowledge base's live counts by state, until all settle or Ctrl-C", cmd_watch
    )
    wa.add_argument("kb", help="knowledge base id or name")
    wa.add_argument("--interval", type=float, default=2.0, help="seconds between looks")
    wa.add_argument("--forever", action="store_true", help="keep watching after everything settled")
    wa.add_argument("--timeout", type=float, default=0, help="stop after this many seconds (0: never)")

    co = command(
        sub,
        "console",
        "open the browser console (<api>/console/#kb=…); sign in there with the key",
        cmd_console,
    )
    co.add_argument("--kb", help="open on this knowledge base (id or name)")
    co.add_argument("--knowledge", help="open on this document")
    co.add_argument("--no-browser", action="store_true", help="print the link only")
    co.add_argument(
        "--with-key",
        action="store_true",
        help="print a link carrying the key (#key=…; the page asks before it uses it), open nothing",
    )

    do = command(sub, "docs", "open the interactive API docs (<api>/api/v1/docs)", cmd_docs)
    do.add_argument("--no-browser", action="store_true", help="print the link only")

    cs = command(sub, "cost", "what a document or a knowledge base cost so far", cmd_cost)
    cs.add_argument("knowledge_id", nargs="?")
    cs.add_argument("--kb", help="the whole knowledge base (id or name)")

    se = command(
        sub,
        "search",
        "search a knowledge base (hybrid BM25 + vector by default); filters combine with AND, "
        "a repeated flag's values with OR",
        cmd_search,
    )
    se.add_argument("--kb", required=True, help="knowledge base id or name")
    se.add_argument("query")
    se.add_argument("-n", type=int, default=5, help="number of chunks")
    se.add_argument("--knowledge", action="append", metavar="ID", help="only this document (repeat)")
    se.add_argument("--tag", action="append", metavar="ID", help="only documents with this tag id (repeat)")
    se.add_argument(
        "--type", action="append", metavar="TYPE", help="only this file type: pdf, md, … (repeat)"
    )
    se.add_argument(
        "--meta",
        action="append",
        type=meta_arg,
        metavar="KEY=VALUE",
        help="document metadata equals VALUE, or one of v1,v2 (KEY=v1,v2); numbers and true/false are sent "
        'as JSON, "quoted" values as strings; dots walk nested fields (repeat: every key must match)',
    )
    se.add_argument("--min-score", type=float, metavar="0..1", help="leave out hits scoring below this")
    se.add_argument(
        "--retriever", choices=("hybrid", "vector", "keyword"), help="which lists to search (default hybrid)"
    )
    se.add_argument(
        "--vector-weight", type=float, metavar="0..1", help="the vector list's share in hybrid fusion"
    )
    se.add_argument(
        "--per-document",
        type=int,
        metavar="N",
        help="at most N hits of one document while other documents have hits (max_chunks_per_document)",
    )
    se.add_argument(
        "--collapse-copies",
        action="store_true",
        help="list another document's hit that repeats a better one under it (collapse_copies)",
    )

    sh = sub.add_parser("share", help="share a knowledge base read-only with another tenant")
    sh_sub = sh.add_subparsers(dest="action", required=True)
    command(
        sh_sub, "list", "the tenants a knowledge base is shared with", cmd_share, kb_scope=MINE
    ).add_argument("kb")
    for action, text in (("add", "share with a tenant"), ("remove", "stop sharing with a tenant")):
        sp = command(sh_sub, action, text, cmd_share, kb_scope=MINE)
        sp.add_argument("kb")
        sp.add_argument("tenant_id")
    command(
        sh_sub,
        "decline",
        "give up a knowledge base another tenant shared with yours",
        cmd_share,
        kb_scope=SHARED,
    ).add_argument("kb")
    share_blocks.register(sh_sub)

    tg = sub.add_parser("tags", help="a knowledge base's tags: list, create, show, update, delete")
    tg_sub = tg.add_subparsers(dest="action", required=True)
    command(tg_sub, "list", "the tags with their document counts", cmd_tags).add_argument("kb")
    sp = command(tg_sub, "create", "a new tag", cmd_tags, kb_scope=MINE)
    sp.add_argument("kb")
    sp.add_argument("name")
    sp.add_argument("--color")
    for action in ("show", "update", "delete"):
        sp = command(
            tg_sub, action, f"{action} a tag", cmd_tags, kb_scope=READS if action == "show" else MINE
        )
        sp.add_argument("kb")
        sp.add_argument("tag_id")
        if action == "update":
            sp.add_argument("--name")
            sp.add_argument("--color")
