"""Nothing a remote server answers reaches a log: urllib3 logs a malformed header line to its own loggers,
with the URL (its query's credentials included) and the bytes it could not parse (a reviewer's proof)."""

from __future__ import annotations

import logging
import socket
import threading

import pytest

from chalicelib.net.ssrf import AllowList
from chalicelib.net.webhooks import SafeWebhookSender

MARKER = "RECEIVER-SAYS-s3cr3t-internal-host-10.1.2.3"


def _answering_a_malformed_header() -> tuple[int, threading.Thread]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]

    def serve() -> None:
        conn, _ = listener.accept()
        conn.settimeout(5)
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        conn.sendall(f"HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n{MARKER}\r\n\r\n".encode())
        conn.close()
        listener.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return port, thread


def test_a_receivers_malformed_header_line_is_logged_without_its_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    port, thread = _answering_a_malformed_header()
    sender = SafeWebhookSender(AllowList.parse(f"127.0.0.1:{port}"), timeout=5)
    with caplog.at_level(logging.WARNING):
        answer = sender.post(f"http://127.0.0.1:{port}/hook?token=TENANT-CREDENTIAL", b"{}", {})
    thread.join(5)
    assert answer.status == 500
    logged = [(r.name, r.getMessage(), r.exc_text or "") for r in caplog.records]
    assert logged, "urllib3 still says something went wrong, by its logger and level"
    assert not any(MARKER in text or "TENANT-CREDENTIAL" in text for record in logged for text in record)
