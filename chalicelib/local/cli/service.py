"""The service and the tenant: `health`, `models`, `engines`, `openapi`, `settings` and `preview` (the
chunker on a text, a file or a stored document)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from chalicelib.local.cli.output import (
    client,
    command,
    emit,
    json_object_arg,
    plain,
    print_fields,
    print_json,
    print_rows,
    read_text,
)


def cmd_health(args: argparse.Namespace, console: Console) -> int:
    data = client(args).call("GET", "/health")
    return emit(
        args,
        console,
        data,
        lambda: print_fields(console, data if isinstance(data, dict) else {"health": data}),
    )


def cmd_models(args: argparse.Namespace, console: Console) -> int:
    data = client(args).call("GET", "/models")
    return emit(args, console, data, lambda: print_json(console, data))


def cmd_engines(args: argparse.Namespace, console: Console) -> int:
    data = client(args).call("GET", "/parser-engines")
    items = data if isinstance(data, list) else (data or {}).get("engines", [])
    columns = sorted({k for e in items for k in e}) if items else ["name"]
    return emit(args, console, data, lambda: print_rows(console, columns, items))


def cmd_openapi(args: argparse.Namespace, console: Console) -> int:
    data = client(args).call("GET", "/openapi.json")
    print_json(console, data)  # a JSON document either way
    return 0


def cmd_settings(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    if args.action == "show":
        data = api.call("GET", "/tenant/settings")
    else:
        data = api.call("PUT", "/tenant/settings", json={"parser_engine_rules": args.engine_rules or {}})
    return emit(args, console, data, lambda: print_json(console, data))


def cmd_preview(args: argparse.Namespace, console: Console) -> int:
    """How the chunker cuts a text (a file, stdin, or a stored document's Markdown)."""
    api = client(args)
    body: dict[str, Any] = {}
    if args.knowledge:
        body["knowledge_id"] = args.knowledge
    elif args.file:
        body["text"] = read_text(args.file)
    if args.kb:
        body["kb_id"] = api.kb_id(args.kb)
    if args.chunking:
        body["chunking_config"] = args.chunking
    data = api.call("POST", "/chunker/preview", json=body)

    def render() -> None:
        chunks = data.get("chunks", []) if isinstance(data, dict) else []
        for c in chunks:
            c["text"] = " ".join(str(c.get("content", "")).split())[:100]
        print_rows(console, ("seq", "start", "end", "text"), [{"seq": i, **c} for i, c in enumerate(chunks)])
        shown = {k: v for k, v in (data or {}).items() if k != "chunks"} if isinstance(data, dict) else {}
        plain(console, ", ".join(f"{k}={v}" for k, v in shown.items()))

    return emit(args, console, data, render)


def register(sub: Any) -> None:
    command(sub, "health", "the API's health", cmd_health)
    command(sub, "models", "the models the operator offers", cmd_models)
    command(sub, "engines", "the parser engines and whether each is available", cmd_engines)
    command(sub, "openapi", "the API's OpenAPI document", cmd_openapi)
    se = sub.add_parser("settings", help="the tenant's settings (parser engine rules)")
    se_sub = se.add_subparsers(dest="action", required=True)
    command(se_sub, "show", "the tenant's settings", cmd_settings)
    sp = command(se_sub, "set", "set the tenant's parser engine rules", cmd_settings)
    sp.add_argument(
        "--engine-rules", type=json_object_arg, metavar="JSON", help='e.g. {"docx": "markitdown"}'
    )
    pv = command(sub, "preview", "how the chunker cuts a text, a file or a stored document", cmd_preview)
    pv.add_argument("file", nargs="?", help="a text file (- for stdin)")
    pv.add_argument("--knowledge", help="a stored document instead")
    pv.add_argument("--kb", help="use this knowledge base's chunking settings")
    pv.add_argument("--chunking", type=json_object_arg, metavar="JSON", help="chunking_config overrides")
