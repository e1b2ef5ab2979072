"""`weknora-ingest tenant recount TENANT_ID`: every page of the operator's storage recount, one request
each (the cursor of one sent with the next), summed into one report."""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console

from chalicelib.local.cli import operator

PAGES = [
    {
        "documents": 2,
        "corrected": 1,
        "skipped": 0,
        "bytes_before": 10,
        "bytes_after": 15,
        "usage_before": 10,
        "usage_after": 15,
        "next_cursor": "c1",
    },
    {
        "documents": 1,
        "corrected": 0,
        "skipped": 1,
        "bytes_before": 5,
        "bytes_after": 5,
        "usage_before": 15,
        "usage_after": 15,
        "next_cursor": None,
    },
]


class _Operator:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    def call(self, method: str, path: str, **kw: Any) -> Any:
        self.calls.append((method, path, kw))
        return PAGES[len(self.calls) - 1]


def test_the_recount_command_walks_every_page_and_sums_them() -> None:
    client = _Operator()
    console = Console(record=True, width=200)
    args = argparse.Namespace(tenant_id="t1", limit=2, json=True, action="recount")
    assert operator._recount(args, console, client) == 0
    path = "/admin/tenants/t1/storage-recount"
    assert client.calls == [
        ("POST", path, {"params": {"limit": 2}}),
        ("POST", path, {"params": {"limit": 2, "cursor": "c1"}}),
    ]
    report = json.loads(console.export_text())
    assert report == {
        "documents": 3,
        "corrected": 1,
        "skipped": 1,
        "bytes_before": 15,
        "bytes_after": 20,
        "usage_before": 10,
        "usage_after": 15,
    }
