"""`weknora-ingest webhook rotate-secret <kb> <webhook_id> [--keep-previous SECONDS]` posts to the route
with the grace period (24 h unless told) and prints the answer, the new secret in it."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from chalicelib.local.cli import main, webhooks


class Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def kb_id(self, ref: str) -> str:
        return f"id-of-{ref}"

    def call(self, method: str, path: str, **kw: Any) -> Any:
        self.calls.append((method, path, kw.get("json")))
        return {"id": "wh1", "secret": "whsec_new", "previous_secrets_expire_at": []}


@pytest.mark.parametrize(
    ("extra", "grace"), [([], 86400), (["--keep-previous", "0"], 0), (["--keep-previous", "600"], 600)]
)
def test_rotate_secret_posts_the_grace_period_and_prints_the_new_secret(
    monkeypatch: pytest.MonkeyPatch, extra: list[str], grace: int
) -> None:
    api = Recording()
    monkeypatch.setattr(webhooks, "client", lambda args: api)
    out = io.StringIO()
    assert main(["webhook", "rotate-secret", "docs", "wh1", *extra, "--json"], Console(file=out)) == 0
    assert api.calls == [
        (
            "POST",
            "/knowledge-bases/id-of-docs/webhooks/wh1/rotate-secret",
            {"previous_secret_expires_in_seconds": grace},
        )
    ]
    assert json.loads(out.getvalue())["secret"] == "whsec_new"
