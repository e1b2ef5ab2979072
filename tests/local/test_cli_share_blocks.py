"""`share block|unblock|blocked`: the CLI's calls of the blocked-tenants routes and what it prints."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from chalicelib.local import cli
from chalicelib.local.cli import share_blocks


class Recorded:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def call(self, method: str, path: str, **kw: Any) -> Any:
        self.calls.append((method, path, kw.get("json")))
        if method == "POST":
            return {"tenant_id": kw["json"]["tenant_id"], "blocked": True, "removed_kb_ids": ["kb-1", "kb-2"]}
        if method == "GET":
            return {"tenant_ids": ["t-a", "t-b"], "limit": 1000}
        return {"tenant_id": path.rsplit("/", 1)[1], "blocked": False}


def _run(monkeypatch: pytest.MonkeyPatch, api: Recorded, *argv: str) -> tuple[int, str]:
    monkeypatch.setattr(share_blocks, "client", lambda args: api)
    out = io.StringIO()
    code = cli.main(list(argv), Console(file=out, width=200))
    return code, out.getvalue()


def test_share_block_unblock_and_blocked(monkeypatch: pytest.MonkeyPatch) -> None:
    api = Recorded()
    code, out = _run(monkeypatch, api, "share", "block", "t-a")
    assert code == 0 and "t-a blocked: 2 of its knowledge bases no longer shared with you" in out
    code, out = _run(monkeypatch, api, "share", "blocked")
    assert code == 0 and out.split() == ["t-a", "t-b"]
    code, out = _run(monkeypatch, api, "share", "blocked", "--json")
    assert code == 0 and json.loads(out)["tenant_ids"] == ["t-a", "t-b"]
    code, out = _run(monkeypatch, api, "share", "unblock", "t:a/b")
    assert code == 0 and "t:a/b unblocked" in out
    assert api.calls == [
        ("POST", "/shared-knowledge-bases/blocked-tenants", {"tenant_id": "t-a"}),
        ("GET", "/shared-knowledge-bases/blocked-tenants", None),
        ("GET", "/shared-knowledge-bases/blocked-tenants", None),
        ("DELETE", "/shared-knowledge-bases/blocked-tenants/t%3Aa%2Fb", None),
    ]
