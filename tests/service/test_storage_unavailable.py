"""A storage backend (S3 or an S3-compatible server) that throttles, answers a 5xx or breaks its answer
off: the port's StorageUnavailable (transient; the API answers 503 `storage_unavailable`), and one that
answers another 4xx: StorageRefused `storage_request_refused` (permanent).

Regression (found by an audit): such answers propagated as botocore's ClientError, whose text is the server's
own <Message>; the stage runner logged it with its traceback and the Lambda error carried it, and the API
answered 500. Now neither the error's text nor its cause or context holds anything the server wrote."""

from __future__ import annotations

import http.server
import json
import logging
import threading
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from chalice.test import Client
from marker_servers import chunk_size_marker_server

from chalicelib.adapters.storage import BackendFileStore, RoutingFileStore, S3FileStore
from chalicelib.bootstrap import Services, memory_deps
from chalicelib.domain.types import KnowledgeBase, ParseStatus, Tenant
from chalicelib.ports.storage import StorageRefused, StorageUnavailable
from chalicelib.settings import load_settings

from .conftest import TEXT, deliver, failed_ids

MARKER = "SECRET-MARKER-123"


def _serve(status: int, body: bytes) -> Iterator[str]:
    class Answer(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _answer

        def log_message(self, *_: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _error_body(code: str) -> bytes:
    return f"<Error><Code>{code}</Code><Message>{MARKER} leaked body</Message></Error>".encode()


@pytest.fixture
def failing_endpoint() -> Iterator[str]:
    yield from _serve(500, _error_body("InternalError"))


@pytest.fixture
def refusing_endpoint() -> Iterator[str]:
    yield from _serve(400, _error_body("InvalidArgument"))


@pytest.fixture
def broken_body_endpoint() -> Iterator[str]:
    """Answers 200 chunked, with the marker where the first chunk's size belongs."""
    with chunk_size_marker_server(MARKER, "application/octet-stream") as port:
        yield f"http://127.0.0.1:{port}"


def s3_store(endpoint: str) -> S3FileStore:
    client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="a",
        aws_secret_access_key="b",
        config=Config(retries={"max_attempts": 1}, s3={"addressing_style": "path"}),
    )
    return S3FileStore(client, "docs")


def assert_no_marker(error: BaseException) -> None:
    """Neither the error's text nor its chain (what a logged traceback prints) holds the server's words."""
    assert MARKER not in str(error)
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__
    assert MARKER not in "".join(traceback.format_exception(error))


def test_a_5xx_is_storage_unavailable_without_the_servers_message(failing_endpoint: str) -> None:
    store = s3_store(failing_endpoint)
    url = store.url_for("t1/k1/a.md")
    for call in (lambda: store.read(url), lambda: store.save("t1/k1/a.md", b"x"), lambda: store.delete(url)):
        with pytest.raises(StorageUnavailable) as raised:
            call()
        error = raised.value
        assert (error.status, error.code, error.http_status) == (503, "storage_unavailable", 500)
        assert_no_marker(error)


def test_a_body_broken_off_is_storage_unavailable_without_the_bytes_sent(broken_body_endpoint: str) -> None:
    store = s3_store(broken_body_endpoint)
    with pytest.raises(StorageUnavailable) as raised:
        store.read(store.url_for("t1/k1/a.md"))
    assert raised.value.code == "storage_unavailable"
    assert_no_marker(raised.value)


def test_another_4xx_is_a_permanent_refusal_with_a_stable_code(refusing_endpoint: str) -> None:
    store = s3_store(refusing_endpoint)
    with pytest.raises(StorageRefused) as raised:
        store.save("t1/k1/a.md", b"x")
    error = raised.value
    assert (error.code, error.http_status, error.status) == ("storage_request_refused", 400, 503)
    assert_no_marker(error)


# -- through the docreader stage and the API, on a named backend whose endpoint fails


@pytest.fixture
def deps(tmp_path: Path) -> Iterator[Services]:
    backends = {
        "tc": {"provider": "cos", "bucket": "docs", "region": "ap-guangzhou", "credentials": "ssm:/p"}
    }
    configured = load_settings({"WEKNORA_STORAGE_BACKENDS": json.dumps(backends)}).storage_backends
    from chalicelib.adapters.memory import memory_settings

    services = memory_deps(memory_settings(storage_backends=configured), index_dir=tmp_path / "index")
    yield services
    for engine in services._engines.values():
        engine.close()  # type: ignore[attr-defined]


@pytest.fixture
def owner(deps: Services) -> tuple[Tenant, str]:
    from chalicelib.operations.tenants import create_tenant_with_key

    return create_tenant_with_key(deps, "acme")


@pytest.fixture
def kb(deps: Services, owner: tuple[Tenant, str]) -> KnowledgeBase:
    from chalicelib.commands import CreateKnowledgeBase
    from chalicelib.operations.knowledge_bases import create_kb

    return create_kb(deps, owner[0].id, CreateKnowledgeBase(name="handbook", storage_backend="tc"))


def _backend(deps: Services) -> BackendFileStore:
    routing = deps.files
    assert isinstance(routing, RoutingFileStore)
    backend = routing.backend("tc")
    assert isinstance(backend, BackendFileStore)
    return backend


def test_a_document_whose_backend_fails_is_retried_and_nothing_of_the_server_is_logged(
    deps: Services, kb: KnowledgeBase, failing_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    from chalicelib.observability import SERVICE
    from chalicelib.operations.create import FileUpload, create_from_file

    created = create_from_file(deps, kb.tenant_id, kb.id, FileUpload(data=TEXT, file_name="t.md"))
    _backend(deps)._inner = s3_store(failing_endpoint)
    with caplog.at_level(logging.DEBUG, logger=SERVICE):
        response = deliver(deps, "docreader")
    assert len(failed_ids(response)) == 1  # transient: the message comes back
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status != ParseStatus.FAILED
    assert caplog.records and MARKER not in caplog.text
    assert MARKER not in json.dumps(row.to_dict(), default=str)
    assert MARKER not in json.dumps(deps.tracker.view(row), default=str)


def test_a_document_whose_backend_never_serves_fails_on_its_last_try_with_the_stable_code(
    deps: Services, kb: KnowledgeBase, failing_endpoint: str
) -> None:
    from chalicelib.operations.create import FileUpload, create_from_file

    created = create_from_file(deps, kb.tenant_id, kb.id, FileUpload(data=TEXT, file_name="t.md"))
    _backend(deps)._inner = s3_store(failing_endpoint)
    for _ in range(deps.settings.stage_max_receives):
        deliver(deps, "docreader")
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED
    assert row.error_code == "storage_unavailable"  # was `unknown`: a bug's code
    assert MARKER not in row.error_message


def test_an_upload_to_a_failing_backend_answers_503_with_a_stable_code(
    deps: Services, owner: tuple[Tenant, str], kb: KnowledgeBase, client: Client, failing_endpoint: str
) -> None:
    _backend(deps)._inner = s3_store(failing_endpoint)
    body = (
        b'--b\r\nContent-Disposition: form-data; name="file"; filename="notes.md"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n" + TEXT + b"\r\n--b--\r\n"
    )
    answer = client.http.post(
        f"/api/v1/knowledge-bases/{kb.id}/knowledge/file",
        headers={"X-API-Key": owner[1], "Content-Type": "multipart/form-data; boundary=b"},
        body=body,
    )
    assert answer.status_code == 503, answer.body
    assert answer.json_body["error"]["code"] == "storage_unavailable"
    assert MARKER not in answer.body.decode()
