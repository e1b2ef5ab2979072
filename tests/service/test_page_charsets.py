"""A page (or an HTML upload) naming a codec that is no text charset (`undefined`, `punycode`) in its
Content-Type or <meta> is read once, as a page of unknown charset: before, decode_html raised a bare
UnicodeError, the docreader retried it as a bug (re-downloading the URL) and the row ended `unknown`
(a reviewer's proof)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import UrlImportRequest
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus
from chalicelib.net.ssrf import AllowList
from chalicelib.net.urlimport import SafeUrlImporter
from chalicelib.operations.create import create_from_url

from .conftest import deliver, upload

BODY = (
    b"<html><head><title>Keeper</title></head><body><p>The keeper logs the weather at dawn and at dusk, "
    b"and trims the wick at noon; see page-2.</p></body></html>"
)


def _meta(charset: str) -> bytes:
    return BODY.replace(b"<head>", f'<head><meta charset="{charset}">'.encode())


@pytest.fixture
def page_server() -> Iterator[tuple[int, list[str]]]:
    served: list[str] = []

    class Page(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            served.append(self.path)
            where, _, charset = self.path.strip("/").partition("/")
            body = _meta(charset) if where == "meta" else BODY
            self.send_response(200)
            self.send_header(
                "Content-Type", "text/html" if where == "meta" else f"text/html; charset={charset}"
            )
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield int(server.server_address[1]), served
    finally:
        server.shutdown()


def _read(deps: Services, knowledge: Knowledge) -> tuple[int, Knowledge]:
    receives = 0
    while deps.queue.waiting("docreader") and receives < 8:  # type: ignore[attr-defined]
        deliver(deps, "docreader")
        receives += 1
    row = deps.knowledge.get(knowledge.id)
    assert row is not None
    return receives, row


@pytest.mark.parametrize(
    "path", ["/header/undefined", "/meta/undefined", "/header/punycode", "/meta/punycode"]
)
def test_a_page_naming_a_codec_that_is_no_charset_is_read_once(
    deps: Services, kb: KnowledgeBase, page_server: tuple[int, list[str]], path: str
) -> None:
    port, served = page_server
    deps.urls = SafeUrlImporter(AllowList.parse([f"127.0.0.1:{port}"]))
    knowledge = create_from_url(
        deps, kb.tenant_id, kb.id, UrlImportRequest(url=f"http://127.0.0.1:{port}{path}")
    )
    receives, row = _read(deps, knowledge)
    assert (receives, len(served)) == (1, 1), (row.error_code, row.error_message)
    assert row.parse_status != ParseStatus.FAILED, (row.error_code, row.error_message)


@pytest.mark.parametrize("charset", ["undefined", "punycode"])
def test_an_uploaded_page_naming_a_codec_that_is_no_charset_is_read_once(
    deps: Services, kb: KnowledgeBase, charset: str
) -> None:
    receives, row = _read(deps, upload(deps, kb, "page.html", _meta(charset)))
    assert receives == 1, (row.error_code, row.error_message)
    assert row.parse_status != ParseStatus.FAILED, (row.error_code, row.error_message)
