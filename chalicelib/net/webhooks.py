"""WebhookSender over the SSRF-safe client: a tenant-named URL is validated and its address pinned on every
delivery (a name that now resolves to an internal address is refused), redirects are not followed, and of
the receiver's answer only the status code and the time it took leave this module."""

from __future__ import annotations

import time

from chalicelib.net.client import SafeHttpClient
from chalicelib.net.ssrf import AllowList, Resolver
from chalicelib.ports import WebhookAnswer

#: the client's cap on a body it reads; a receiver's answer body is never read (status_only)
MAX_ANSWER_BYTES = 256 * 1024


class SafeWebhookSender:
    def __init__(self, allow_list: AllowList, *, timeout: float = 5.0, resolver: Resolver | None = None):
        self.client = SafeHttpClient(
            allow_list, max_bytes=MAX_ANSWER_BYTES, timeout=timeout, max_redirects=0, resolver=resolver
        )

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> WebhookAnswer:
        started = time.monotonic()
        # FetchError: blocked (permanent), no status line in time; the answer's body is not read
        answer = self.client.post(url, body, headers, status_only=True)
        return WebhookAnswer(answer.status, int((time.monotonic() - started) * 1000))
