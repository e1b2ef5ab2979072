"""Remote images in a Markdown/HTML document are fetched within a time budget: the client built for them
has the image limits (not the 60 s, 10-redirect default), the pass stops fetching once its own wall budget
or the stage's Lambda deadline is spent, and the images not fetched stay as the links they were."""

from __future__ import annotations

import contextlib
import http.server
import io
import time
from collections.abc import Callable
from pathlib import Path

from loopback import LoopbackServer

from chalicelib.bootstrap import memory_deps
from chalicelib.net import AllowList, SafeHttpClient
from chalicelib.parsers import images
from chalicelib.parsers.images import ImageResolver
from chalicelib.services.deadline import stage_deadline

LOOPBACK = AllowList.parse("127.0.0.0/8:*")


def picture() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (200, 150), (10, 200, 30)).save(buf, "PNG")
    return buf.getvalue()


def slow_picture(delay_s: float) -> Callable[[http.server.BaseHTTPRequestHandler], None]:
    data = picture()

    def route(h: http.server.BaseHTTPRequestHandler) -> None:
        time.sleep(delay_s)
        h.send_response(200)
        h.send_header("Content-Type", "image/png")
        h.send_header("Content-Length", str(len(data)))
        with contextlib.suppress(ConnectionError):  # the client gave up waiting: the test wanted that
            h.end_headers()
            h.wfile.write(data)

    return route


def client_for_any_name() -> SafeHttpClient:
    """Every host name resolves to the loopback server: each link is its own host (a failed host is not
    asked twice, which would hide the budget)."""
    return SafeHttpClient(LOOPBACK, resolver=lambda _host, _port: ["127.0.0.1"])


def links(server: LoopbackServer, count: int) -> list[str]:
    return [f"http://h{n}.example.test:{server.port}/x.png" for n in range(count)]


def stored(data: bytes, ext: str) -> str:
    return f"s3://bucket/{len(data)}{ext}"


def test_the_image_client_the_docreader_gets_has_the_remote_image_limits(tmp_path: Path) -> None:
    deps = memory_deps(index_dir=tmp_path / "index")
    client = deps.image_resolver(stored).http
    assert client is not None
    assert client.timeout == images.REMOTE_TIMEOUT_S
    assert client.max_redirects == images.REMOTE_MAX_REDIRECTS
    assert client.max_bytes == images.MAX_IMAGE_BYTES


def test_no_remote_image_is_fetched_once_the_stage_is_out_of_time(server: LoopbackServer) -> None:
    server.routes["/x.png"] = slow_picture(0)
    urls = links(server, 3)
    markdown = " ".join(f"![i]({url})" for url in urls)
    token = stage_deadline.set(time.monotonic() - 1)  # the Lambda's time is already spent
    try:
        result = ImageResolver(stored, http=client_for_any_name()).resolve(markdown)
    finally:
        stage_deadline.reset(token)
    assert server.seen == []
    assert result.images == [] and result.failed == 3
    assert all(f"![i]({url})" in result.markdown for url in urls)  # left as the links they were


def test_remote_fetches_stop_at_the_pass_budget_and_leave_the_rest_as_links(server: LoopbackServer) -> None:
    server.routes["/x.png"] = slow_picture(0.2)
    urls = links(server, 10)
    markdown = "\n\n".join(f"![i{n}]({url})" for n, url in enumerate(urls))
    started = time.monotonic()
    result = ImageResolver(stored, http=client_for_any_name(), remote_budget_s=0.5).resolve(markdown)
    took = time.monotonic() - started
    assert took < 0.5 + 1.0  # the budget, and no fetch started after it (all ten: 2 s)
    fetched = len(server.seen)
    assert 1 <= fetched < len(urls)
    assert all(f"![i{n}]({url})" in result.markdown for n, url in enumerate(urls) if n >= fetched)
    assert result.failed >= len(urls) - fetched


def test_one_slow_image_is_cut_at_the_pass_budget(server: LoopbackServer) -> None:
    server.routes["/x.png"] = slow_picture(2.0)
    url = server.url("/x.png")
    started = time.monotonic()
    result = ImageResolver(stored, http=SafeHttpClient(LOOPBACK), remote_budget_s=0.3).resolve(f"![i]({url})")
    assert time.monotonic() - started < 1.5  # not the 2 s answer, nor the client's own 15 s
    assert result.images == [] and f"![i]({url})" in result.markdown
