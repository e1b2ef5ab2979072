"""A link in a document whose host does not parse (`http://[oops/x`: urlsplit and urljoin raise ValueError on
a bracket they cannot close) is kept as written: it failed the parse as a bug, four tries, a dead letter and
the code `unknown` (a web archive: the whole archive; a URL import: the page fetched four times)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import UrlImportRequest
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus
from chalicelib.net.ssrf import AllowList
from chalicelib.net.urlimport import SafeUrlImporter
from chalicelib.operations.create import create_from_url

from .conftest import deliver, upload

MARKDOWN = b"# Notes\n\nThe keeper logs the weather at dawn and at dusk, and trims the wick.\n\n![map](http://[oops/map.png)\n"
MHTML = (
    b'MIME-Version: 1.0\r\nContent-Type: multipart/related; boundary="B"\r\n\r\n--B\r\n'
    b"Content-Type: text/html; charset=utf-8\r\nContent-Location: http://example.com/page.html\r\n\r\n"
    b"<html><body><h1>Notes</h1><p>The keeper logs the weather at dawn and at dusk.</p>"
    b'<img src="//[oops/map.png"></body></html>\r\n--B--\r\n'
)
PAGE = b"<html><head><title>t</title></head><body><p>Short. <a href='//[oops/x'>more</a></p></body></html>"


def _parsed_once(deps: Services, queue: MemoryTaskQueue, knowledge: Knowledge) -> Knowledge:
    """The document after its docreader message, delivered as often as the queue brings it back."""
    receives = 0
    while queue.waiting("docreader") and receives < 6:
        deliver(deps, "docreader")
        receives += 1
    row = deps.knowledge.get(knowledge.id)
    assert row is not None
    assert receives == 1, f"parsed {receives} times: {row.error_message}"
    assert row.parse_status != ParseStatus.FAILED, row.error_message
    return row


@pytest.mark.parametrize(("name", "data"), [("notes.md", MARKDOWN), ("page.mhtml", MHTML)])
def test_a_malformed_link_in_a_file_is_kept_as_written(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, name: str, data: bytes
) -> None:
    _parsed_once(deps, queue, upload(deps, kb, name, data))


@pytest.fixture
def page_server() -> Iterator[tuple[int, list[str]]]:
    served: list[str] = []

    class Page(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            served.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(PAGE)))
            self.end_headers()
            self.wfile.write(PAGE)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server.server_address[1], served
    finally:
        server.shutdown()


def test_a_fetched_page_with_a_malformed_link_is_fetched_and_read_once(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, page_server: tuple[int, list[str]]
) -> None:
    port, served = page_server
    deps.urls = SafeUrlImporter(AllowList.parse([f"127.0.0.1:{port}"]))
    knowledge = create_from_url(
        deps, kb.tenant_id, kb.id, UrlImportRequest(url=f"http://127.0.0.1:{port}/page")
    )
    _parsed_once(deps, queue, knowledge)
    assert len(served) == 1
