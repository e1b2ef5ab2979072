"""`share block`, `share unblock`, `share blocked`: the owner tenants whose shares this tenant refuses
(registered under `share` by chalicelib/local/cli/kb.py)."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from rich.console import Console

from chalicelib.local.cli.output import client, command, emit, plain

BLOCKED = "/shared-knowledge-bases/blocked-tenants"


def cmd_share_block(args: argparse.Namespace, console: Console) -> int:
    api = client(args)
    if args.action == "blocked":
        data = api.call("GET", BLOCKED)

        def render() -> None:
            for tenant_id in data["tenant_ids"]:
                plain(console, tenant_id)

        return emit(args, console, data, render)
    if args.action == "block":
        data = api.call("POST", BLOCKED, json={"tenant_id": args.tenant_id})
        removed = len(data["removed_kb_ids"])
        text = f"{args.tenant_id} blocked: {removed} of its knowledge bases no longer shared with you"
        return emit(args, console, data, lambda: plain(console, text))
    data = api.call("DELETE", f"{BLOCKED}/{quote(args.tenant_id, safe='')}")
    return emit(
        args, console, data, lambda: plain(console, f"{args.tenant_id} unblocked: it may share again")
    )


def register(sh_sub: Any) -> None:
    command(sh_sub, "blocked", "the tenants whose shares yours refuses", cmd_share_block)
    for action, text in (
        ("block", "remove a tenant's shares with yours and refuse its next ones"),
        ("unblock", "let a blocked tenant share with yours again"),
    ):
        command(sh_sub, action, text, cmd_share_block).add_argument("tenant_id")
