"""A host name's lookup is part of the request's time: a name a tenant controls that answers slowly (its own
DNS server) fails the try as the resolver not answering now (retried later), instead of holding a worker shared
with other tenants' deliveries for as long as the lookup takes."""

from __future__ import annotations

import threading

import pytest

from chalicelib.net.ssrf import AllowList
from chalicelib.net.webhooks import SafeWebhookSender
from chalicelib.ports import FetchFailed


def test_a_lookup_past_the_requests_time_is_a_transient_unresolved_host() -> None:
    release = threading.Event()
    looked_up: list[str] = []

    def slow(host: str, port: int) -> list[str]:
        looked_up.append(host)
        release.wait(30)  # held until the test is done: the request must not wait for it
        return ["93.184.216.34"]

    sender = SafeWebhookSender(AllowList(), timeout=0.2, resolver=slow)
    try:
        with pytest.raises(FetchFailed) as failed:
            sender.post("https://hooks.example.com/x", b"{}", {})
    finally:
        release.set()
    assert looked_up == ["hooks.example.com"]
    assert failed.value.code == "host_unresolved" and not failed.value.permanent


def test_a_lookup_that_fails_fails_as_before() -> None:
    def missing(host: str, port: int) -> list[str]:
        raise OSError("no such name")

    sender = SafeWebhookSender(AllowList(), timeout=5, resolver=missing)
    with pytest.raises(FetchFailed) as failed:
        sender.post("https://hooks.example.com/x", b"{}", {})
    assert failed.value.code == "host_unresolved" and failed.value.permanent
