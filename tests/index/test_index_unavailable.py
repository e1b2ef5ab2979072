"""The engines say "not now" as the port's IndexUnavailable, and only then.

OpenSearch is a scripted server speaking its wire format (a busy node, a throttled bulk item, a refused
mapping, a bad request), reached over real HTTP by opensearch-py; the embedded engine is a SQLite file
another process-like connection holds.
"""

from __future__ import annotations

import gzip
import json
import socket
import sqlite3
import threading
import traceback
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from index_contract import DIM, entry, vec

from chalicelib.adapters.index.embedded import EmbeddedEngine
from chalicelib.adapters.index.opensearch import OpenSearchEngine, build_opensearch_client
from chalicelib.ports import IndexSpace, IndexUnavailable, IndexWriteError
from chalicelib.ports.index import IndexRefused

SPACE = IndexSpace(model_id="m", dimensions=DIM)
ENTRIES = [entry("e1", "one", vector=vec(1)), entry("e2", "two", vector=vec(0, 1))]

#: (method, path) -> (status, body); a bulk answer is built from the request's actions
Script = Callable[[str, str, bytes], tuple[int, Any]]


class _Handler(BaseHTTPRequestHandler):
    script: Script

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.headers.get("Content-Encoding") == "gzip":  # the client compresses its bodies
            body = gzip.decompress(body)
        status, payload = self.script(self.command, self.path.split("?")[0], body)
        data = b"" if self.command == "HEAD" else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _answer

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[Callable[[Script], OpenSearchEngine]]:
    servers: list[ThreadingHTTPServer] = []

    def start(script: Script) -> OpenSearchEngine:
        handler = type("Scripted", (_Handler,), {"script": staticmethod(script)})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        client = build_opensearch_client(f"http://127.0.0.1:{server.server_port}", timeout=5, max_retries=0)
        return OpenSearchEngine(client)

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def bulk_items(*results: dict[str, Any]) -> Script:
    """An index that exists and answers each bulk action with the next result (cycled)."""

    def script(method: str, path: str, body: bytes) -> tuple[int, Any]:
        if method == "HEAD":
            return 200, {}
        if method == "PUT" and path.endswith("/_mapping"):  # the engine's check of its search field
            return 200, {"acknowledged": True}
        assert path == "/_bulk", path
        actions = [json.loads(line) for line in body.splitlines()[::2]]
        items = [
            {"index": {"_id": action["index"].get("_id"), **results[i % len(results)]}}
            for i, action in enumerate(actions)
        ]
        return 200, {"errors": any("error" in r for r in results), "items": items}

    return script


OK = {"status": 201, "result": "created"}
THROTTLED = {"status": 429, "error": {"type": "es_rejected_execution_exception", "reason": "queue full"}}
BLOCKED = {"status": 403, "error": {"type": "cluster_block_exception", "reason": "disk watermark"}}
REFUSED = {"status": 400, "error": {"type": "mapper_parsing_exception", "reason": "bad field"}}


def test_a_bulk_whose_failures_are_all_busy_is_unavailable(
    scripted: Callable[[Script], OpenSearchEngine],
) -> None:
    for busy in (THROTTLED, BLOCKED):
        with pytest.raises(IndexUnavailable, match="rejected as busy"):
            scripted(bulk_items(OK, busy)).batch_index(SPACE, ENTRIES)


def test_a_refused_item_is_a_write_error_even_beside_busy_ones(
    scripted: Callable[[Script], OpenSearchEngine],
) -> None:
    with pytest.raises(IndexWriteError, match="first index e2: 400"):
        scripted(bulk_items(THROTTLED, REFUSED)).batch_index(SPACE, ENTRIES)


def test_a_write_error_keeps_the_status_and_kind_never_the_servers_reason(
    scripted: Callable[[Script], OpenSearchEngine],
) -> None:
    """The message reaches logs (and a route's traceback): the reason may quote the document."""
    said = {"status": 400, "error": {"type": "mapper_parsing_exception", "reason": "SERVER-SAID [content]"}}
    with pytest.raises(IndexWriteError) as refused:
        scripted(bulk_items(OK, said)).batch_index(SPACE, ENTRIES)
    assert "400 mapper_parsing_exception" in str(refused.value) and "SERVER-SAID" not in str(refused.value)

    def failing_delete(method: str, path: str, body: bytes) -> tuple[int, Any]:
        assert path.endswith("/_delete_by_query"), path
        cause = {"type": "search_phase_execution_exception", "reason": "SERVER-SAID shard"}
        return 200, {"deleted": 0, "failures": [{"status": 500, "cause": cause}]}

    with pytest.raises(IndexWriteError) as failed:
        scripted(failing_delete).delete_by_knowledge(SPACE, "kb1", ["k1"])
    assert "500 search_phase_execution_exception" in str(failed.value)
    assert "SERVER-SAID" not in str(failed.value)


@pytest.mark.parametrize("status", [429, 502, 503, 504])
def test_a_busy_status_is_unavailable_without_the_servers_words(
    scripted: Callable[[Script], OpenSearchEngine], status: int
) -> None:
    secret = "node-7 internal detail"
    engine = scripted(
        lambda method, path, body: (200, {}) if method == "HEAD" else (status, {"error": secret})
    )
    with pytest.raises(IndexUnavailable) as caught:
        engine.batch_index(SPACE, ENTRIES)
    assert str(caught.value) == f"index busy (HTTP {status})"
    with pytest.raises(IndexUnavailable):
        engine.hybrid_search(SPACE, "kb1", "one", None, 5, vector=False)


def test_a_bad_request_or_a_refused_credential_is_not_an_outage(
    scripted: Callable[[Script], OpenSearchEngine],
) -> None:
    for status in (400, 403, 500):
        engine = scripted(lambda method, path, body, s=status: (200, {}) if method == "HEAD" else (s, {}))
        with pytest.raises(IndexRefused) as caught:
            engine.batch_index(SPACE, ENTRIES)
        assert not isinstance(caught.value, IndexUnavailable)
        assert isinstance(caught.value, IndexWriteError)  # a write fails its document at once
        assert str(caught.value) == f"the index refused the call ({status} error)"


MARKER = "SECRET-MARKER-123"


def _chain(error: BaseException) -> str:
    """What a logged traceback of `error` prints."""
    return "".join(traceback.format_exception(error))


def test_a_refusal_keeps_the_status_and_type_never_the_servers_reason(
    scripted: Callable[[Script], OpenSearchEngine],
) -> None:
    """Regression (found by an audit): a 403 security_exception went on as opensearch-py's
    AuthorizationException, whose text quotes the root cause's reason: logged with its traceback, in the
    Lambda's error."""
    said = {"type": "security_exception", "reason": f"{MARKER} no permissions"}
    refusal = {"error": {"root_cause": [said], **said}, "status": 403}
    engine = scripted(lambda method, path, body: (200, {}) if method == "HEAD" else (403, refusal))
    for call in (
        lambda: engine.batch_index(SPACE, ENTRIES),
        lambda: engine.hybrid_search(SPACE, "kb1", "one", None, 5, vector=False),
        lambda: engine.delete_by_knowledge(SPACE, "kb1", ["k1"]),
    ):
        with pytest.raises(IndexRefused) as caught:
            call()
        error = caught.value
        assert str(error) == "the index refused the call (403 security_exception)"
        assert (error.http_status, error.kind) == ("403", "security_exception")
        assert error.__cause__ is None and error.__suppress_context__
        assert MARKER not in _chain(error)


@pytest.mark.parametrize("status", [429, 503])
def test_a_busy_answer_is_not_chained_to_the_servers_reason(
    scripted: Callable[[Script], OpenSearchEngine], status: int
) -> None:
    said = {"type": "es_rejected_execution_exception", "reason": f"{MARKER} queue"}
    busy = {"error": {"root_cause": [said], **said}, "status": status}
    engine = scripted(lambda method, path, body: (200, {}) if method == "HEAD" else (status, busy))
    with pytest.raises(IndexUnavailable) as caught:
        engine.batch_index(SPACE, ENTRIES)
    assert caught.value.__cause__ is None and MARKER not in _chain(caught.value)


def test_an_engine_nobody_answers_is_unavailable() -> None:
    with socket.socket() as probe:  # a port with nothing listening
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    engine = OpenSearchEngine(build_opensearch_client(f"http://127.0.0.1:{port}", timeout=2, max_retries=0))
    with pytest.raises(IndexUnavailable, match=r"index unreachable \(ConnectionError\)"):
        engine.batch_index(SPACE, ENTRIES)
    with pytest.raises(IndexUnavailable):
        engine.count(SPACE, "kb1")


def test_an_embedded_file_held_past_the_busy_timeout_is_unavailable(tmp_path: Path) -> None:
    engine = EmbeddedEngine(tmp_path, busy_timeout_ms=50)
    engine.batch_index(SPACE, ENTRIES[:1])
    holder = sqlite3.connect(engine.path_for(SPACE, "kb1"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's write transaction
    try:
        with pytest.raises(IndexUnavailable, match=r"index file busy \(SQLITE_BUSY"):
            engine.batch_index(SPACE, ENTRIES[1:])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    engine.batch_index(SPACE, ENTRIES[1:])  # the same write goes through once the file is free
    assert engine.count(SPACE, "kb1") == 2
    engine.close()


def test_an_embedded_error_other_than_busy_goes_on_as_it_is(tmp_path: Path) -> None:
    engine = EmbeddedEngine(tmp_path)
    path = engine.path_for(SPACE, "kb1")
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not a database " * 512)  # a damaged file: a fault to see, not an outage to wait out
    with pytest.raises(sqlite3.DatabaseError) as caught:
        engine.batch_index(SPACE, ENTRIES)
    assert not isinstance(caught.value, IndexUnavailable)
    engine.close()
