"""Operators (the operator key): `tenant` (create, list, quotas, recount), `key` (issue, list, revoke) and
`dlq` (list, redrive)."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

from chalicelib.local.cli.client import operator_client
from chalicelib.local.cli.output import command, emit, plain, print_rows


def _operator(args: argparse.Namespace) -> Any:
    return operator_client(args.api, args.operator_key)


def _key_access(args: argparse.Namespace) -> dict[str, Any]:
    """A key's scope and, when given, the only knowledge bases it may touch."""
    return {"scope": args.scope, **({"kb_ids": args.kb} if args.kb else {})}


def _shown_once(console: Console, data: dict[str, Any]) -> None:
    plain(console, f"API key {data['key']['id']}: {data['api_key']}")
    console.print("the key is shown only now: keep it (only its hash is stored)")


def cmd_tenant(args: argparse.Namespace, console: Console) -> int:
    client = _operator(args)
    if args.action == "list":
        tenants = client.every("/admin/tenants")
        return emit(
            args,
            console,
            tenants,
            lambda: print_rows(console, ("id", "name", "created_at", "storage_used"), tenants),
        )
    if args.action == "recount":
        return _recount(args, console, client)
    if args.action == "quotas":
        body = {"storage_quota": args.storage, "document_quota": args.documents}
        if args.requests_per_second is not None:  # left out, the rate set before stays
            body["requests_per_second"] = args.requests_per_second
        data = client.call("PUT", f"/admin/tenants/{args.tenant_id}/quotas", json=body)
        return emit(args, console, data, lambda: plain(console, f"tenant {args.tenant_id} quotas: {data}"))
    body = {"name": args.name, "key_name": args.key_name, **_key_access(args)}
    data = client.call("POST", "/admin/tenants", json=body)

    def render() -> None:
        plain(console, f"tenant {data['tenant']['id']} ({data['tenant']['name']})")
        _shown_once(console, data)

    return emit(args, console, data, render)


#: the sums of a storage recount's pages
_RECOUNT_SUMS = ("documents", "corrected", "skipped", "bytes_before", "bytes_after")


def _recount(args: argparse.Namespace, console: Console, client: Any) -> int:
    """Every page of the tenant's storage recount, one request each, summed."""
    path = f"/admin/tenants/{args.tenant_id}/storage-recount"
    total: dict[str, Any] = dict.fromkeys(_RECOUNT_SUMS, 0)
    cursor = ""
    while True:
        params: dict[str, Any] = {"limit": args.limit, **({"cursor": cursor} if cursor else {})}
        page = client.call("POST", path, params=params)
        for name in _RECOUNT_SUMS:
            total[name] += page[name]
        total.setdefault("usage_before", page["usage_before"])
        total["usage_after"] = page["usage_after"]
        cursor = page["next_cursor"] or ""
        if not cursor:
            break

    def render() -> None:
        plain(
            console,
            f"tenant {args.tenant_id}: {total['documents']} document(s), {total['corrected']} corrected, "
            f"{total['skipped']} skipped; documents {total['bytes_before']} -> {total['bytes_after']} bytes, "
            f"usage {total['usage_before']} -> {total['usage_after']} bytes",
        )

    return emit(args, console, total, render)


def cmd_key(args: argparse.Namespace, console: Console) -> int:
    client = _operator(args)
    base = f"/admin/tenants/{args.tenant_id}/api-keys"
    if args.action == "list":
        rows = client.every(base)
        columns = ("id", "name", "scope", "kb_ids", "status", "created_at", "revoked_at")
        return emit(args, console, rows, lambda: print_rows(console, columns, rows))
    if args.action == "issue":
        data = client.call("POST", base, json={"name": args.name, **_key_access(args)})
        return emit(args, console, data, lambda: _shown_once(console, data))
    data = client.call("DELETE", f"{base}/{args.key_id}")
    return emit(args, console, data, lambda: plain(console, f"API key {data['id']} {data['status']}"))


def cmd_dlq(args: argparse.Namespace, console: Console) -> int:
    client = _operator(args)
    if args.action == "list":
        params: dict[str, Any] = {"limit": args.limit}
        if args.queue:
            params["queue"] = args.queue
        letters = client.call("GET", "/admin/dlq", params=params)
        rows = [
            {
                **letter,
                "status": (letter.get("row") or {}).get(
                    "parse_status", "gone" if letter.get("knowledge_id") else ""
                ),
            }
            for letter in letters
        ]

        def render() -> None:
            print_rows(console, ("queue", "knowledge_id", "attempt", "status", "reason", "message_id"), rows)
            console.print(f"{len(letters)} dead letter(s)", highlight=False)

        return emit(args, console, letters, render)
    body: dict[str, Any] = {"limit": args.limit}
    if args.queue:
        body["queue"] = args.queue
    report = client.call("POST", "/admin/dlq/redrive", json=body)

    def show() -> None:
        print_rows(console, ("queue", "message_id", "outcome", "knowledge_id", "attempt"), report["messages"])
        counts = ", ".join(f"{k}={v}" for k, v in sorted(report["counts"].items())) or "nothing to redrive"
        plain(console, counts)

    return emit(args, console, report, show)


def register(sub: Any) -> None:
    def access_opts(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--scope", choices=("read", "write", "admin"), default="admin", help="the key's scope"
        )
        sp.add_argument(
            "--kb", action="append", default=[], help="limit the key to this knowledge base (repeat)"
        )

    te = sub.add_parser("tenant", help="operators: create or list tenants, set quotas")
    te_sub = te.add_subparsers(dest="action", required=True)
    te_new = command(te_sub, "create", "a new tenant and its first API key (shown once)", cmd_tenant, True)
    te_new.add_argument("name")
    te_new.add_argument("--key-name", default="", help="a label for the first key")
    access_opts(te_new)
    command(te_sub, "list", "every tenant", cmd_tenant, True)
    te_q = command(
        te_sub,
        "quotas",
        "set a tenant's storage and document quotas (0: none) and request rate",
        cmd_tenant,
        True,
    )
    te_q.add_argument("tenant_id")
    te_q.add_argument("--storage", type=int, default=0, help="bytes")
    te_q.add_argument("--documents", type=int, default=0, help="documents")
    te_q.add_argument(
        "--requests-per-second",
        type=int,
        default=None,
        help="the tenant's request rate (0: the deployment's; left out: as it is)",
    )
    te_r = command(
        te_sub,
        "recount",
        "set what each of a tenant's documents counts on its storage quota to what it stores",
        cmd_tenant,
        True,
    )
    te_r.add_argument("tenant_id")
    te_r.add_argument("--limit", type=int, default=50, help="documents per request (1-100)")

    ke = sub.add_parser("key", help="operators: a tenant's API keys")
    ke_sub = ke.add_subparsers(dest="action", required=True)
    ke_issue = command(ke_sub, "issue", "another key for a tenant (shown once)", cmd_key, True)
    ke_issue.add_argument("tenant_id")
    ke_issue.add_argument("--name", default="", help="a label for the key")
    access_opts(ke_issue)
    command(ke_sub, "list", "a tenant's keys (never the keys themselves)", cmd_key, True).add_argument(
        "tenant_id"
    )
    ke_revoke = command(ke_sub, "revoke", "revoke a key (refused at once)", cmd_key, True)
    ke_revoke.add_argument("tenant_id")
    ke_revoke.add_argument("key_id")

    dl = sub.add_parser("dlq", help="operators: dead-letter queues")
    dl_sub = dl.add_subparsers(dest="action", required=True)
    for action, text in (
        ("list", "what the DLQs hold, with each row's state"),
        ("redrive", "failed rows start over at a new attempt; letters of deleted rows are dropped"),
    ):
        sp = command(dl_sub, action, text, cmd_dlq, True)
        sp.add_argument("--queue", help="one stage queue (default: every queue)")
        sp.add_argument("--limit", type=int, default=100, help="at most this many messages")
