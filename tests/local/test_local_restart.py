"""`weknora-ingest up` keeps its local state across a stop and a restart (issue 9, item 6).

The real project app on the real template, started, fed through its HTTP API, stopped and started again
in this process (as `make run` twice): every completed document is still searchable, a document that was
in flight when the stack stopped is started over by housekeeping on start and completes, a tenant created
through the admin API keeps its key, and `up --fresh` starts from nothing.
"""

from __future__ import annotations

import io
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
from project_paths import ROOT, corpus_bytes
from rich.console import Console

from chalicelib.local import cli
from chalicelib.ports import ReadRequest, ReadResult

OPERATOR_KEY = "op-restart-test"
KEY = "restart-test-key"
DOCS = {
    "debian.md": corpus_bytes("debian-faq-getting-debian.md")[:3000],
    "lighthouse.md": b"# Lighthouses\n\nThe keeper trims the wick at noon and logs the fog horn.\n",
}


class Stack:
    """One `weknora-ingest up` in a thread, driven over HTTP."""

    def __init__(self, *extra: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.out = io.StringIO()
        self.stop_event = threading.Event()
        args = cli.build_parser().parse_args(
            ["up", "--port", str(self.port), "--snapshot-interval", "0", *extra]
        )
        console = Console(file=self.out, width=250, force_terminal=False, color_system=None)
        self.result: list[int] = []
        self.thread = threading.Thread(
            target=lambda: self.result.append(cli.cmd_up(args, console, self.stop_event)), daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 120
        while "weknora-ingest up" not in self.out.getvalue():
            assert self.thread.is_alive() and time.monotonic() < deadline, self.out.getvalue()
            time.sleep(0.1)
        self.base = f"http://127.0.0.1:{self.port}/api/v1"

    def call(self, method: str, path: str, key: str = KEY, **kw: Any) -> Any:
        response = requests.request(method, self.base + path, headers={"X-API-Key": key}, timeout=60, **kw)
        return response

    def data(self, method: str, path: str, **kw: Any) -> Any:
        response = self.call(method, path, **kw)
        assert response.ok, response.text
        return response.json()["data"]

    def upload(self, kb_id: str, name: str, data: bytes) -> str:
        return str(
            self.data("POST", f"/knowledge-bases/{kb_id}/knowledge/file", files={"file": (name, data)})["id"]
        )

    def wait_for(
        self, knowledge_id: str, done: Callable[[dict[str, Any]], bool], timeout: float = 180
    ) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            row = self.data("GET", f"/knowledge/{knowledge_id}")
            if done(row):
                return row
            assert time.monotonic() < deadline, row
            time.sleep(0.2)

    def search(self, kb_id: str, text: str) -> set[str]:
        hits = self.data(
            "POST", f"/knowledge-bases/{kb_id}/hybrid-search", json={"query_text": text, "match_count": 5}
        )
        return {h["knowledge_id"] for h in hits}

    def stop(self) -> str:
        self.stop_event.set()
        self.thread.join(60)
        assert self.result == [0], self.out.getvalue()
        return self.out.getvalue()


def run_cli(*argv: str, api: str) -> tuple[int, str]:
    buf = io.StringIO()
    console = Console(file=buf, width=250, force_terminal=False, color_system=None)
    code = cli.main([*argv, "--api", api, "--operator-key", OPERATOR_KEY], console)
    return code, buf.getvalue()


class ReaderDown:
    """The parser service is down: the document stays `processing` while its message waits for a retry."""

    def __init__(self) -> None:
        self.calls = 0

    def read(self, request: ReadRequest) -> ReadResult:
        self.calls += 1
        raise RuntimeError("parser service down")

    def engines(self) -> list[dict[str, object]]:
        return []


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    saved_env = dict(os.environ)
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("WEKNORA_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("WEKNORA_API_KEY", KEY)
    monkeypatch.setenv("WEKNORA_OPERATOR_KEY", OPERATOR_KEY)
    yield tmp_path / "state"
    from chalicelib.bootstrap import set_deps

    set_deps(None)
    os.environ.clear()
    os.environ.update(saved_env)


@pytest.mark.timeout(900)  # three starts of the whole stack on a shared machine
def test_completed_documents_survive_a_restart_and_an_in_flight_one_completes(project: Path) -> None:
    from chalicelib.bootstrap import get_deps

    first = Stack()
    kb = first.data("POST", "/knowledge-bases", json={"name": "restart"})
    done = {first.upload(kb["id"], name, data) for name, data in DOCS.items()}
    for knowledge_id in done:
        first.wait_for(knowledge_id, lambda row: row["parse_status"] == "completed")
    assert first.search(kb["id"], "keeper trims the wick") & done
    code, out = run_cli("tenant", "create", "acme", "--key-name", "first", api=first.base)
    assert code == 0, out
    acme_key = re.search(r"API key key_\w+: (wk-\S+)", out).group(1)  # type: ignore[union-attr]
    tenant_id = re.search(r"tenant (\S+) \(acme\)", out).group(1)  # type: ignore[union-attr]
    code, out = run_cli("key", "issue", tenant_id, "--name", "spare", api=first.base)
    spare_id, spare_key = re.search(r"API key (key_\w+): (wk-\S+)", out).groups()  # type: ignore[union-attr]
    assert first.call("GET", "/knowledge-bases", key=spare_key).status_code == 200
    # A letter of a document that no longer exists, waiting in a DLQ when the stack stops.
    sqs = boto3.client("sqs")
    dlq_url = sqs.get_queue_url(QueueName="weknora-chunking-dlq")["QueueUrl"]
    sqs.send_message(
        QueueUrl=dlq_url, MessageBody='{"tenant_id": "local", "knowledge_id": "gone", "attempt": 1}'
    )

    reader = ReaderDown()
    get_deps().replace_docreader(reader)
    in_flight = first.upload(
        kb["id"], "harbour.md", b"# Harbour\n\nBoats bring oil, wicks and bread on Mondays.\n"
    )
    first.wait_for(in_flight, lambda row: row["parse_status"] == "processing" and reader.calls > 0)
    stopped = first.stop()
    assert "saved" in stopped and "dead letter" in stopped

    second = Stack()
    started = second.out.getvalue()
    assert "restored" in started and "1 in-flight document(s) started over" in started, started
    for knowledge_id in done:
        row = second.data("GET", f"/knowledge/{knowledge_id}")
        assert row["parse_status"] == "completed" and row["attempt"] == 1
    assert any(kid in second.search(kb["id"], "keeper trims the wick at noon") for kid in done)
    assert second.search(kb["id"], "Debian") & done
    recovered = second.wait_for(in_flight, lambda row: row["parse_status"] in ("completed", "failed"))
    assert (recovered["parse_status"], recovered["attempt"]) == ("completed", 2)
    assert in_flight in second.search(kb["id"], "boats bring oil wicks and bread")
    assert second.call("GET", "/knowledge-bases", key=acme_key).status_code == 200
    code, out = run_cli("key", "revoke", tenant_id, spare_id, api=second.base)
    assert code == 0 and "revoked" in out, out
    assert second.call("GET", "/knowledge-bases", key=spare_key).status_code == 401
    code, out = run_cli("key", "list", tenant_id, api=second.base)
    assert "first" in out and "spare" in out and "revoked" in out and spare_key not in out
    code, out = run_cli("dlq", "list", api=second.base)
    assert code == 0 and "chunking" in out and "gone" in out and "1 dead letter(s)" in out, out
    code, out = run_cli("dlq", "redrive", "--queue", "chunking", api=second.base)
    assert code == 0 and "dropped_deleted=1" in out, out
    code, out = run_cli("dlq", "list", api=second.base)
    assert "0 dead letter(s)" in out
    second.stop()

    fresh = Stack("--fresh")
    assert fresh.data("GET", "/knowledge-bases") == []
    assert fresh.call("GET", "/knowledge-bases", key=acme_key).status_code == 401
    fresh.stop()
