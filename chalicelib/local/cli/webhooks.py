"""`webhook`: a knowledge base's webhooks (list, create, show, update, rotate-secret, delete) and their
delivery log."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from chalicelib.domain.webhooks import PREVIOUS_SECRET_SECONDS
from chalicelib.local.cli.client import MINE
from chalicelib.local.cli.output import client, command, emit, plain, print_json, print_rows


def cmd_webhook(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    base = f"/knowledge-bases/{api.kb_id(args.kb)}/webhooks"
    if args.action == "list":
        hooks = api.call("GET", base)
        return emit(
            args, console, hooks, lambda: print_rows(console, ("id", "url", "event_types", "enabled"), hooks)
        )
    if args.action == "create":
        body: dict[str, Any] = {
            "url": args.url,
            "event_types": args.event_types,
            "enabled": not args.disabled,
        }
        if args.description:
            body["description"] = args.description
        made = api.call("POST", base, json=body)
        return emit(args, console, made, lambda: print_json(console, made))  # the secret: shown this once
    one = f"{base}/{args.webhook_id}"
    if args.action == "show":
        hook = api.call("GET", one)
        return emit(args, console, hook, lambda: print_json(console, hook))
    if args.action == "update":
        changes: dict[str, Any] = {}
        if args.url:
            changes["url"] = args.url
        if args.event_types:
            changes["event_types"] = args.event_types
        if args.description is not None:
            changes["description"] = args.description
        if args.enabled is not None:
            changes["enabled"] = args.enabled == "true"
        hook = api.call("PUT", one, json=changes)
        return emit(args, console, hook, lambda: print_json(console, hook))
    if args.action == "rotate-secret":
        grace = {"previous_secret_expires_in_seconds": args.keep_previous}
        rotated = api.call("POST", f"{one}/rotate-secret", json=grace)
        return emit(
            args, console, rotated, lambda: print_json(console, rotated)
        )  # the new secret: shown once
    if args.action == "delete":
        gone = api.call("DELETE", one)
        return emit(args, console, gone, lambda: plain(console, f"webhook {args.webhook_id} deleted"))
    log = api.call("GET", f"{one}/deliveries")
    items = log.get("items", log) if isinstance(log, dict) else log
    columns = ("at", "event_type", "attempt", "outcome", "status_class", "duration_ms")
    return emit(args, console, log, lambda: print_rows(console, columns, items))


def register(sub: Any) -> None:
    # every action names one of the tenant's own knowledge bases: webhooks are its owner's (kb_scope)
    wh = sub.add_parser("webhook", help="a knowledge base's webhooks and their deliveries")
    wh_sub = wh.add_subparsers(dest="action", required=True)
    command(wh_sub, "list", "the knowledge base's webhooks", cmd_webhook, kb_scope=MINE).add_argument("kb")
    sp = command(wh_sub, "create", "a webhook (its signing secret is shown once)", cmd_webhook, kb_scope=MINE)
    sp.add_argument("kb")
    sp.add_argument("url")
    sp.add_argument("event_types", nargs="+", help='event types (detail-types), e.g. "Knowledge Completed"')
    sp.add_argument("--description", default="")
    sp.add_argument("--disabled", action="store_true", help="create it switched off")
    for action, text in (
        ("show", "one webhook"),
        ("delete", "delete a webhook"),
        ("deliveries", "a webhook's delivery log"),
    ):
        sp = command(wh_sub, action, text, cmd_webhook, kb_scope=MINE)
        sp.add_argument("kb")
        sp.add_argument("webhook_id")
    sp = command(
        wh_sub,
        "rotate-secret",
        "a new signing secret (shown once), the old ones kept a while",
        cmd_webhook,
        kb_scope=MINE,
    )
    sp.add_argument("kb")
    sp.add_argument("webhook_id")
    sp.add_argument(
        "--keep-previous",
        type=int,
        default=PREVIOUS_SECRET_SECONDS,
        metavar="SECONDS",
        help="how long the replaced secret still signs deliveries (default 86400, at most 604800; 0: it and "
        "the secrets earlier rotations replaced stop now)",
    )
    sp = command(wh_sub, "update", "change a webhook", cmd_webhook, kb_scope=MINE)
    sp.add_argument("kb")
    sp.add_argument("webhook_id")
    sp.add_argument("--url")
    sp.add_argument("--event-types", dest="event_types", nargs="+")
    sp.add_argument("--description")
    sp.add_argument("--enabled", choices=("true", "false"))
