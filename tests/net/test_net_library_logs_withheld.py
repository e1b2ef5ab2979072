"""Nothing a remote server answers reaches a log, and a tenant's URL only redacted: trafilatura logs (on its
own loggers, made when a page's first import loads it) the page's final URL when it discards a page: a
redirect target the server wrote, the tenant's query credentials (a reviewer's proof)."""

from __future__ import annotations

import logging
import socket
import threading

import pytest

from chalicelib.net.ssrf import AllowList
from chalicelib.net.urlimport import SafeUrlImporter

LOOPBACK = AllowList.parse("127.0.0.0/8:*")
MARKER = "SERVER-CHOSEN-internal-10.9.8.7"
#: a page trafilatura discards (no text): it logs "discarding data: <url>" at WARNING
PAGE = b'<html><head><title>t</title></head><body><p></p><img src="http://a.example/b.png" alt="pic"></body></html>'


def _server() -> int:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def serve() -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            if data.split(b" ", 2)[1].startswith(b"/start"):
                conn.sendall(
                    f"HTTP/1.1 302 Found\r\nLocation: /{MARKER}/page\r\nContent-Length: 0\r\n\r\n".encode()
                )
            else:
                head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n"
                conn.sendall(head % len(PAGE) + PAGE)
            conn.close()
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return int(listener.getsockname()[1])


def test_a_discarded_page_is_logged_without_its_url(caplog: pytest.LogCaptureFixture) -> None:
    port = _server()
    with caplog.at_level(logging.WARNING):
        doc = SafeUrlImporter(LOOPBACK).fetch(f"http://127.0.0.1:{port}/start?token=TENANT-SECRET-TOKEN")
    assert doc.file_type == "md"
    logged = [(r.name, r.getMessage(), r.exc_text or "") for r in caplog.records]
    assert any(name.startswith("trafilatura") for name, _, _ in logged), "its logger and level still say it"
    assert not any(MARKER in text or "TENANT-SECRET-TOKEN" in text for record in logged for text in record)


def test_a_library_logger_made_after_the_client_is_covered(caplog: pytest.LogCaptureFixture) -> None:
    """A lazily imported library's loggers appear after the client's import (a filter added then misses them)."""
    late = logging.getLogger("trafilatura.made_later_by_a_lazy_import")
    with caplog.at_level(logging.WARNING):
        try:
            raise ValueError(MARKER)
        except ValueError:
            late.exception("discarding data: %s", f"http://h/?token=TENANT-SECRET-TOKEN&{MARKER}")
    [record] = caplog.records
    assert record.levelno == logging.ERROR and record.name == late.name
    assert MARKER not in record.getMessage() and record.exc_info is None
    assert MARKER not in caplog.text and "TENANT-SECRET-TOKEN" not in caplog.text
