"""The CLI against the local stack's HTTP API, where the fast tests (tests/local/test_cli_kb_names_and_ends.py)
use answers from memory: a name resolves to the tenant's own knowledge base (a shared one of that name needs
no acceptance and is never ingested into), `watch` does not settle on a big knowledge base's stored report
while documents uploaded since are pending, and `ingest` ends at once on a presigned upload the API rejected
when it arrived (first found by the rev_console audit)."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from chalicelib.bootstrap import Services
from chalicelib.local import cli
from chalicelib.local.cli import client as cli_client
from chalicelib.local.runtime import LocalRuntime
from chalicelib.operations import kb_reports
from chalicelib.operations.tenants import create_tenant_with_key

from .conftest import API_KEY, Api
from .test_console_browser import served  # noqa: F401

TEXT = b"# Breakwater\n\nThe pilot boards the ship at the breakwater before the tide turns.\n"


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = cli.main(argv, Console(file=out, width=200))
    return code, out.getvalue()


def test_ingest_by_name_creates_the_tenant_s_own_kb_not_the_one_shared_with_it(
    served: str,  # noqa: F811
    api: Api,
    services: Services,
    tmp_path: Path,
) -> None:
    reader, reader_key = create_tenant_with_key(services, "reader-cli")
    theirs = api.create_kb("docs")
    assert api.post(f"/knowledge-bases/{theirs['id']}/shares", {"tenant_id": reader.id}).status_code == 201
    path = tmp_path / "notes.md"
    path.write_text("# Notes\n\nthe reader's own notes\n", encoding="utf-8")
    common = ["--api", f"{served}/api/v1", "--key", reader_key]

    code, out = run(["ingest", "--kb", "docs", str(path), *common, "--json", "--timeout", "1"])
    rows = json.loads(out)  # left pending: the queues are not drained
    own = [
        kb for kb in Api(api.client, reader_key).get("/knowledge-bases").json_body["data"] if not kb["shared"]
    ]
    assert [kb["name"] for kb in own] == ["docs"] and own[0]["id"] != theirs["id"]
    assert rows[0]["parse_status"] == "pending" and rows[0]["knowledge_id"], rows
    # a command that reads takes the reader's own one too; `share decline` the shared one
    code, out = run(["kb", "show", "docs", *common, "--json"])
    assert code == 0 and json.loads(out)["id"] == own[0]["id"], out
    code, out = run(["share", "decline", "docs", *common, "--json"])
    assert code == 0, out
    assert [kb["id"] for kb in Api(api.client, reader_key).get("/knowledge-bases").json_body["data"]] == [
        own[0]["id"]
    ]


def test_watch_does_not_settle_on_a_stored_report_while_documents_are_pending(
    served: str,  # noqa: F811
    api: Api,
    runtime: LocalRuntime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kb = api.create_kb()
    for n in range(2):
        assert api.upload(kb["id"], f"pilot-{n}.md", TEXT + f"berth {n}\n".encode()).status_code == 200
    runtime.drain(timeout=180)
    monkeypatch.setattr(kb_reports, "INLINE_USAGE_ENTRIES", 2)  # a big knowledge base (bounds patched small)
    monkeypatch.setattr(kb_reports, "INLINE_ROWS", 1)
    assert api.get(f"/knowledge-bases/{kb['id']}/stats").status_code == 202
    runtime.drain(timeout=180)  # the refresh stores its report: two completed documents
    for n in range(3):  # left pending (the queues are not drained)
        assert api.upload(kb["id"], f"late-{n}.md", TEXT + f"late {n}\n".encode()).status_code == 200
    argv = ["watch", kb["id"], "--api", f"{served}/api/v1", "--key", API_KEY, "--interval", "1"]

    code, out = run([*argv, "--timeout", "3"])
    assert code == 1 and "settled" not in out and "stopped: 2 documents: completed 2" in out, out
    runtime.drain(timeout=180)
    code, out = run([*argv, "--timeout", "30"])  # the stored report still says 2: the rows say settled
    assert code == 0 and "settled:" in out, out


def test_ingest_ends_at_once_when_the_presigned_upload_was_rejected(
    served: str,  # noqa: F811
    api: Api,
    runtime: LocalRuntime,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    kb = api.create_kb()
    assert api.upload(kb["id"], "first.md", TEXT).status_code == 200
    runtime.drain(timeout=120)
    monkeypatch.setattr(cli_client, "DIRECT_UPLOAD_MAX_BYTES", 0)  # every file on the presigned path
    path = tmp_path / "second-name.md"
    path.write_bytes(TEXT)  # the same bytes: rejected as a duplicate when the object arrives

    out = io.StringIO()
    result: list[int] = []
    argv = ["ingest", "--kb", kb["id"], str(path), "--api", f"{served}/api/v1", "--key", API_KEY,
            "--json", "--timeout", "60"]  # fmt: skip
    started = time.monotonic()
    worker = threading.Thread(target=lambda: result.append(cli.main(argv, Console(file=out, width=200))))
    worker.start()
    while worker.is_alive():  # the storage event is handled by the uploads queue
        runtime.drain(timeout=30)
        time.sleep(0.5)
    worker.join()
    elapsed = time.monotonic() - started
    rows = json.loads(out.getvalue())
    assert result == [1] and rows[0]["parse_status"] == "upload failed", rows
    assert rows[0]["error"].startswith("duplicate_file: already exists as knowledge"), rows
    assert elapsed < 40, f"waited {elapsed:.0f}s for an upload the API had rejected"
