"""A receiver that answers a delivery with a redirect answered it: the README says anything but a 2xx is
retried (then parked after the last try). It is not a URL the SSRF check refused, so its try is not logged
`refused` and parked at once with the SSRF reason (a tenant whose endpoint moved http→https was told its
URL was blocked). The redirect is never followed either way."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase
from chalicelib.net.ssrf import AllowList
from chalicelib.net.webhooks import SafeWebhookSender
from chalicelib.operations import webhooks
from chalicelib.operations.webhooks import CreateWebhookRequest
from chalicelib.stages import webhooks as delivery

from .conftest import upload


class _Redirecting(BaseHTTPRequestHandler):
    posts: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).posts.append(self.path)
        self.send_response(301)
        self.send_header("Location", "http://169.254.169.254/latest/meta-data/")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def redirecting() -> Iterator[int]:
    _Redirecting.posts = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Redirecting)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_redirect_answer_is_retried_like_any_other_non_2xx_not_refused_as_ssrf(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, redirecting: int
) -> None:
    deps.webhook_sender = SafeWebhookSender(AllowList.parse(f"127.0.0.1:{redirecting}"), timeout=5.0)
    url = f"http://127.0.0.1:{redirecting}/hook"
    hook = webhooks.create_webhook(
        deps, kb.tenant_id, kb.id, CreateWebhookRequest(url=url, event_types=["Knowledge Created"])
    )
    upload(deps, kb)
    queue.deliver("webhooks", delivery.handle, deps)  # the first try only (the retry waits in the queue)

    assert _Redirecting.posts == ["/hook"]  # posted once; the redirect's target never asked
    (logged,) = webhooks.list_deliveries(deps, kb.tenant_id, kb.id, str(hook["id"]))
    assert logged["outcome"] == "retrying"
    assert not queue.dead_letters("webhooks")
    (retry,) = queue.waiting("webhooks")
    assert retry.json()["attempt"] == 2
