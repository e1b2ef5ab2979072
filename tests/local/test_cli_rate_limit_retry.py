"""The CLI on a tenant's rate limit: a request refused with 429 `tenant_rate_limited` (refused before any
work) is sent again after its Retry-After, an upload with its file read again; other 429s are errors."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from threading import Thread
from typing import Any

import pytest

from chalicelib.local.cli import client as client_module
from chalicelib.local.cli.client import ApiClient, ApiError


class _Server:
    def __init__(self, refusals: int, code: str) -> None:
        self.refusals, self.code, self.bodies = refusals, code, []  # type: list[bytes]


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[tuple[str, _Server]]:
    refusals, code = request.param
    state = _Server(refusals, code)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            state.bodies.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if state.refusals:
                state.refusals -= 1
                body = {"success": False, "error": {"code": state.code, "message": "slow down"}}
                self._send(429, body, {"Retry-After": "0"})
            else:
                self._send(200, {"success": True, "data": {"ok": True}}, {})

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            for name, value in {**headers, "Content-Type": "application/json"}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", state
    finally:
        httpd.shutdown()


@pytest.mark.parametrize("server", [(2, "tenant_rate_limited")], indirect=True)
def test_a_rate_limited_upload_is_sent_again_with_its_file(server: tuple[str, _Server]) -> None:
    url, state = server
    api = ApiClient(url, "key")
    answer = api.call(
        "POST", "/upload", files={"file": ("a.txt", io.BytesIO(b"the file's bytes"), "text/plain")}
    )
    assert answer == {"ok": True}
    assert len(state.bodies) == 3 and all(b"the file's bytes" in body for body in state.bodies)


@pytest.mark.parametrize("server", [(client_module.RATE_LIMIT_RETRIES, "tenant_rate_limited")], indirect=True)
def test_a_limit_that_does_not_lift_is_an_error(server: tuple[str, _Server]) -> None:
    url, state = server
    with pytest.raises(ApiError) as refused:
        ApiClient(url, "key").call("POST", "/x", json={})
    assert (
        refused.value.code == "tenant_rate_limited" and len(state.bodies) == client_module.RATE_LIMIT_RETRIES
    )


@pytest.mark.parametrize("server", [(1, "throttled")], indirect=True)
def test_another_429_is_not_sent_again(server: tuple[str, _Server]) -> None:
    url, state = server
    with pytest.raises(ApiError) as refused:
        ApiClient(url, "key").call("POST", "/x", json={})
    assert refused.value.code == "throttled" and len(state.bodies) == 1
