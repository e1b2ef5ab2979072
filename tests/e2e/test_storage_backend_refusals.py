"""A named storage backend whose S3-compatible endpoint refuses the backend's keys (AccessDenied) or has no
such bucket (NoSuchBucket), through the public API and the pipeline: the upload route answers 503 with a
stable code (the operator's backend is misconfigured, not the tenant's request at fault), a stored document
fails at once with that code, a download link answers 503 with it too, and nothing the endpoint wrote in its
error's message reaches an answer, a row or the log.

Regression: botocore's ClientError went through: a 500 `internal_error` on the API, and in the stage a bug
retried on every try whose logged traceback carried the server's message, the document failing `unknown`."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest

from chalicelib.bootstrap import Services, get_deps, set_deps
from chalicelib.local.moto_server import shared_moto_server
from chalicelib.local.runtime import LocalRuntime
from chalicelib.observability import SERVICE
from chalicelib.settings import get_settings

from .conftest import Api

TEXT = b"# Tide tables\n\nSpring tides follow the new and the full moon; neap tides the quarter moons.\n"
#: what the endpoint writes in its error's Message: never to be seen in an answer, a row or a log
REMOTE = "REMOTE-SAID policy arn:acme:bucket/kb-documents denies AKLAB"


class RefusingEndpoint:
    """A minimal S3-compatible endpoint (path style, objects kept in memory) that answers the calls named in
    `refused` ("PUT", "GET", "HEAD") with the S3 error `refusal` and REMOTE as its message."""

    def __init__(self) -> None:
        self.refusal = "AccessDenied"
        self.refused: set[str] = set()
        self.objects: dict[str, bytes] = {}
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_: Any) -> None:
                pass

            def _refuse(self, method: str) -> bool:
                if method not in endpoint.refused:
                    return False
                status = 404 if endpoint.refusal == "NoSuchBucket" else 403
                body = (
                    f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{endpoint.refusal}</Code>'
                    f"<Message>{REMOTE}</Message><RequestId>r1</RequestId></Error>"
                ).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if method != "HEAD":
                    self.wfile.write(body)
                return True

            def do_PUT(self) -> None:
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self._refuse("PUT"):
                    return
                endpoint.objects[self.path.split("?")[0]] = data
                self.send_response(200)
                self.send_header("ETag", '"0"')
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _object(self, method: str) -> None:
                if self._refuse(method):
                    return
                data = endpoint.objects.get(self.path.split("?")[0])
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if method == "GET":
                    self.wfile.write(data)

            def do_GET(self) -> None:
                self._object("GET")

            def do_HEAD(self) -> None:
                self._object("HEAD")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[RefusingEndpoint]:
    served = RefusingEndpoint()
    yield served
    served.stop()


@pytest.fixture
def backends(
    runtime: LocalRuntime, endpoint: RefusingEndpoint, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Services]:
    """The operator configures `locked` (MinIO-style, keys in SSM) on the refusing endpoint."""
    shared_moto_server()
    parameter = f"/{get_settings().prefix}/storage/locked"
    keys = {"access_key_id": "AKLAB", "secret_access_key": "lab-secret"}
    boto3.client("ssm").put_parameter(
        Name=parameter, Value=json.dumps(keys), Type="SecureString", Overwrite=True
    )
    configured = {
        "locked": {
            "provider": "minio",
            "bucket": "kb-documents",
            "endpoint": endpoint.url,
            "credentials": f"ssm:{parameter}",
        }
    }
    monkeypatch.setenv("WEKNORA_STORAGE_BACKENDS", json.dumps(configured))
    get_settings.cache_clear()
    set_deps(None)
    yield get_deps()
    monkeypatch.delenv("WEKNORA_STORAGE_BACKENDS")
    get_settings.cache_clear()
    set_deps(None)


@pytest.mark.parametrize(
    ("refusal", "code"),
    [("AccessDenied", "storage_access_denied"), ("NoSuchBucket", "storage_bucket_missing")],
)
def test_a_refusing_backend_is_a_503_with_a_stable_code_on_upload(
    api: Api, backends: Services, endpoint: RefusingEndpoint, refusal: str, code: str
) -> None:
    kb = api.create_kb(storage_backend="locked")
    endpoint.refusal, endpoint.refused = refusal, {"PUT"}
    answer = api.upload(kb["id"], "tides.md", TEXT)
    assert answer.status_code == 503, answer.json_body
    assert answer.json_body["error"]["code"] == code
    assert REMOTE not in json.dumps(answer.json_body)
    listed = api.get(f"/knowledge-bases/{kb['id']}/knowledge").json_body["data"]
    assert listed["items"] == []  # nothing was created


def test_a_document_on_a_backend_that_refuses_reads_fails_at_once_with_the_stable_code(
    api: Api,
    runtime: LocalRuntime,
    backends: Services,
    endpoint: RefusingEndpoint,
    caplog: pytest.LogCaptureFixture,
) -> None:
    kb = api.create_kb(storage_backend="locked")
    created = api.upload(kb["id"], "tides.md", TEXT).json_body["data"]  # the PUT is taken
    grant = api.get(f"/knowledge/{created['id']}/file-url?kind=original").json_body["data"]["url"]
    endpoint.refused = {"GET", "HEAD"}  # then the backend's keys are revoked
    with caplog.at_level(logging.INFO, logger=SERVICE):
        runtime.drain(timeout=180)
        redeemed = api.client.http.get(urlsplit(grant).path)
    row = api.knowledge(created["id"])
    assert row["parse_status"] == "failed" and row["error_code"] == "storage_access_denied", row
    assert REMOTE not in json.dumps(row)
    stored = backends.knowledge.get(created["id"])
    assert stored is not None and REMOTE not in (stored.error_message or "")
    # the download link: the object cannot even be looked at
    assert redeemed.status_code == 503, redeemed.json_body
    assert redeemed.json_body["error"]["code"] == "storage_access_denied"
    assert REMOTE not in json.dumps(redeemed.json_body)
    assert REMOTE not in caplog.text
