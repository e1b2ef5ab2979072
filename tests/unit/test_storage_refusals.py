"""A named storage backend whose endpoint refuses its keys (AccessDenied, InvalidAccessKeyId,
SignatureDoesNotMatch, a bare 403 to a HEAD) or has no bucket (NoSuchBucket): the operator's configuration is
wrong, and no retry cures it.

Regression: every such answer surfaced as botocore's ClientError, which the stage runner treats as a bug or
an outage: the docreader was retried on every try, logged a traceback carrying the server's own error
message (an S3-compatible server writes it freely), and failed the document as `unknown` only on the last
try; the API answered 500. Now it is a StorageRefused (permanent, a stable code, the call and the HTTP status
only): the document fails at once with the code, and nothing the server wrote reaches the row or a log.
Throttling and 5xx answers are StorageUnavailable (transient; tests/service/test_storage_unavailable.py).

Also: the backends' clients waited botocore's 60 s for a connection and again for each answer, so a dead
endpoint held a function for minutes; they now have short timeouts and a bounded number of tries."""

from __future__ import annotations

import json
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from chalicelib.adapters.aws_errors import is_transient
from chalicelib.adapters.storage import BackendFileStore, RoutingFileStore, S3FileStore
from chalicelib.bootstrap import Services, memory_deps
from chalicelib.domain.types import ParseStatus
from chalicelib.settings import load_settings

#: what the server writes in its error's Message: never to be seen in an error, a row or a log
REMOTE = "REMOTE-SAID bucket acl=tenant-x key=AKIDSECRET"


def s3_client() -> Any:
    return boto3.client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")


def _calls(store: S3FileStore) -> dict[str, Callable[[], Any]]:
    url = store.url_for("t1/k1/source.md")
    return {
        "get_object": lambda: store.read(url),
        "put_object": lambda: store.save("t1/k1/source.md", b"# Notes\n"),
        "head_object": lambda: store.exists(url),
        "copy_object": lambda: store.copy(url, "t1/k2/source.md"),
        "delete_object": lambda: store.delete(url),
    }


@pytest.mark.parametrize(
    ("operation", "code", "status", "stable"),
    [
        ("get_object", "AccessDenied", 403, "storage_access_denied"),
        ("get_object", "InvalidAccessKeyId", 403, "storage_access_denied"),
        ("get_object", "SignatureDoesNotMatch", 403, "storage_access_denied"),
        ("get_object", "NoSuchBucket", 404, "storage_bucket_missing"),
        ("put_object", "AccessDenied", 403, "storage_access_denied"),
        ("put_object", "NoSuchBucket", 404, "storage_bucket_missing"),
        ("head_object", "403", 403, "storage_access_denied"),  # a HEAD answer has no body: the bare status
        ("copy_object", "SignatureDoesNotMatch", 403, "storage_access_denied"),
        ("delete_object", "NoSuchBucket", 404, "storage_bucket_missing"),
    ],
)
def test_a_refusal_is_a_permanent_storage_error_without_the_servers_words(
    operation: str, code: str, status: int, stable: str
) -> None:
    from chalicelib.ports.storage import StorageRefused

    client = s3_client()
    store = S3FileStore(client, "docs")
    with Stubber(client) as stub:
        stub.add_client_error(
            operation, service_error_code=code, service_message=REMOTE, http_status_code=status
        )
        with pytest.raises(StorageRefused) as raised:
            _calls(store)[operation]()
    error = raised.value
    assert (error.code, error.http_status, error.status) == (stable, status, 503)
    assert not is_transient(error) and not isinstance(error, FileNotFoundError | ClientError)
    # neither its text nor its traceback (a log's exc_info) carries what the server wrote
    assert REMOTE not in error.message and REMOTE not in str(error)
    assert error.__cause__ is None and error.__context__ is None
    assert REMOTE not in "".join(traceback.format_exception(error))


@pytest.mark.parametrize(
    ("code", "status"), [("SlowDown", 503), ("InternalError", 500), ("RequestTimeout", 400)]
)
def test_only_a_refusal_is_permanent_throttling_and_5xx_stay_transient(code: str, status: int) -> None:
    from chalicelib.ports.storage import StorageRefused, StorageUnavailable

    client = s3_client()
    store = S3FileStore(client, "docs")
    with Stubber(client) as stub:
        stub.add_client_error("get_object", service_error_code="AccessDenied", http_status_code=403)
        stub.add_client_error(
            "get_object", service_error_code=code, service_message=REMOTE, http_status_code=status
        )
        with pytest.raises(StorageRefused):
            store.read(store.url_for("t1/k1/a.md"))
        with pytest.raises(StorageUnavailable) as raised:
            store.read(store.url_for("t1/k1/a.md"))
    error = raised.value
    assert (error.code, error.http_status, error.status) == ("storage_unavailable", status, 503)
    assert not isinstance(error, StorageRefused | ClientError)
    assert error.__cause__ is None and error.__context__ is None
    assert REMOTE not in "".join(traceback.format_exception(error))


# -- the backend's client: bounded timeouts and tries


def _backend_config(endpoint: str) -> Any:
    (config,) = load_settings(
        {
            "WEKNORA_STORAGE_BACKENDS": json.dumps(
                {
                    "lab": {
                        "provider": "minio",
                        "bucket": "docs",
                        "endpoint": endpoint,
                        "credentials": "ssm:/x",
                    }
                }
            )
        }
    ).storage_backends
    return config


KEYS = {"access_key_id": "AKLAB", "secret_access_key": "lab-secret"}


def test_a_backends_client_has_short_timeouts_and_bounded_tries() -> None:
    from chalicelib.adapters.storage_backends import s3_compatible_client

    client = s3_compatible_client(_backend_config("http://127.0.0.1:9"), "us-east-1", KEYS)
    config = client.meta.config
    assert config.connect_timeout <= 10 and config.read_timeout <= 30  # botocore's default: 60 s each
    assert config.retries == {"mode": "standard", "total_max_attempts": 3}
    assert config.s3 == {"addressing_style": "path"} and config.signature_version == "s3v4"


@pytest.fixture
def silent_endpoint() -> Iterator[tuple[str, list[socket.socket]]]:
    """An endpoint that takes every connection and never answers (a hung S3-compatible server)."""
    server = socket.create_server(("127.0.0.1", 0))
    taken: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                taken.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}", taken
    stop.set()
    thread.join()
    for connection in taken:
        connection.close()
    server.close()


def test_an_endpoint_that_never_answers_fails_the_call_after_the_bounded_tries(
    silent_endpoint: tuple[str, list[socket.socket]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rule's timeout is what the client waits (shortened here to keep the test quick), and a call is
    tried STORAGE_MAX_ATTEMPTS times, not for minutes."""
    from chalicelib.adapters import storage_backends
    from chalicelib.ports.storage import StorageUnavailable

    monkeypatch.setattr(storage_backends, "STORAGE_READ_TIMEOUT_SECONDS", 0.5)
    endpoint, taken = silent_endpoint
    store = S3FileStore(
        storage_backends.s3_compatible_client(_backend_config(endpoint), "us-east-1", KEYS), "docs"
    )
    started = time.monotonic()
    with pytest.raises(StorageUnavailable, match="ReadTimeoutError"):
        store.read(store.url_for("t1/k1/a.md"))
    assert time.monotonic() - started < 10
    assert len(taken) == storage_backends.STORAGE_MAX_ATTEMPTS == 3


# -- a document on a backend that refuses: it fails at once with the stable code, nothing of the server's
# -- words in its row, its trace or the log


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.data


def refusing_client(code: str, status: int) -> Any:
    """A client whose endpoint answers every request with the S3 error `code` and REMOTE as its message."""
    client = s3_client()
    body = (
        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code><Message>{REMOTE}</Message>'
        "<RequestId>r1</RequestId></Error>"
    ).encode()

    def answer(request: Any, **_: Any) -> AWSResponse:
        sent = body if request.method != "HEAD" else b""
        return AWSResponse(request.url, status, {"Content-Type": "application/xml"}, _Body(sent))  # type: ignore[arg-type]

    client.meta.events.register("before-send.s3", answer)
    return client


@pytest.fixture
def deps(tmp_path: Path) -> Iterator[Services]:
    configured = load_settings(
        {
            "WEKNORA_STORAGE_BACKENDS": json.dumps(
                {
                    "tc": {
                        "provider": "cos",
                        "bucket": "docs",
                        "region": "ap-guangzhou",
                        "credentials": "ssm:/p",
                    }
                }
            )
        }
    ).storage_backends
    from chalicelib.adapters.memory import memory_settings

    services = memory_deps(memory_settings(storage_backends=configured), index_dir=tmp_path / "index")
    yield services
    for engine in services._engines.values():
        engine.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("code", "status", "stable"),
    [("AccessDenied", 403, "storage_access_denied"), ("NoSuchBucket", 404, "storage_bucket_missing")],
)
def test_a_document_on_a_refusing_backend_fails_at_once_with_the_stable_code(
    deps: Services, caplog: pytest.LogCaptureFixture, code: str, status: int, stable: str
) -> None:
    import logging

    from chalicelib import stages
    from chalicelib.adapters.memory import MemoryTaskQueue
    from chalicelib.commands import CreateKnowledgeBase
    from chalicelib.observability import SERVICE
    from chalicelib.operations.create import FileUpload, create_from_file
    from chalicelib.operations.knowledge_bases import create_kb
    from chalicelib.operations.tenants import create_tenant_with_key

    tenant, _ = create_tenant_with_key(deps, "acme")
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="handbook", storage_backend="tc"))
    created = create_from_file(
        deps, tenant.id, kb.id, FileUpload(data=b"# Tides\n\nSpring tides.\n", file_name="t.md")
    )
    # the stored source now sits behind an endpoint that refuses the backend's keys (rotated, revoked, ...)
    routing = deps.files
    assert isinstance(routing, RoutingFileStore)
    backend = routing.backend("tc")
    assert isinstance(backend, BackendFileStore)
    backend._inner = S3FileStore(refusing_client(code, status), "docs")

    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    with caplog.at_level(logging.DEBUG, logger=SERVICE):  # the project's log, as deployed (not botocore's)
        response = queue.deliver("docreader", stages.docreader.handle, deps)
    assert response["batchItemFailures"] == []  # acknowledged: not retried
    assert queue.waiting("docreader") == [] and queue.dead_letters("docreader") == []
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED
    assert row.error_code == stable
    assert REMOTE not in json.dumps(row.to_dict(), default=str)
    assert REMOTE not in json.dumps(deps.tracker.view(row), default=str)
    assert caplog.records and REMOTE not in caplog.text
    assert not [r for r in caplog.records if REMOTE in r.getMessage()]


def test_the_files_buckets_client_has_the_same_short_timeouts_and_bounded_tries() -> None:
    from chalicelib.bootstrap import _shared_client

    s3 = _shared_client("s3", "us-east-1", "http://127.0.0.1:9").meta.config
    assert (s3.connect_timeout, s3.read_timeout) == (5, 15) and s3.max_pool_connections > 10
    assert s3.retries == {"mode": "standard", "total_max_attempts": 3}
    dynamodb = _shared_client("dynamodb", "us-east-1", "http://127.0.0.1:9").meta.config
    assert dynamodb.read_timeout == 60  # other services keep botocore's waits
