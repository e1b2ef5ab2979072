"""The 20-webhooks cap of a knowledge base is the write's own condition, not a count read before it: creates
at the same moment (concurrent Lambdas) never pass it, and a delete gives its place back once."""

from __future__ import annotations

import contextlib
import threading

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations import webhooks
from chalicelib.operations.webhooks import MAX_WEBHOOKS_PER_KB, CreateWebhookRequest

BODY = CreateWebhookRequest(url="https://hooks.example.com/x", event_types=["Knowledge Created"])


def test_concurrent_creates_never_pass_the_cap(deps: Services, kb: KnowledgeBase) -> None:
    for _ in range(MAX_WEBHOOKS_PER_KB - 1):
        webhooks.create_webhook(deps, kb.tenant_id, kb.id, BODY)
    racers = 30
    gate = threading.Barrier(racers)
    real_list, real_check = deps.webhooks.list_kb, deps.urls.check

    def all_at_once() -> None:
        with contextlib.suppress(threading.BrokenBarrierError):  # a racer that failed early frees the rest
            gate.wait(timeout=10)

    def list_kb(kb_id: str):  # type: ignore[no-untyped-def]
        found = real_list(kb_id)
        all_at_once()  # every request read the count (19) before any wrote, as concurrent Lambdas can
        return found

    def check(url: str) -> None:  # every request is past its URL check before any writes
        real_check(url)
        all_at_once()

    refused: list[str] = []

    def create() -> None:
        try:
            webhooks.create_webhook(deps, kb.tenant_id, kb.id, BODY)
        except BadRequest as error:
            refused.append(error.code)

    deps.webhooks.list_kb = list_kb  # type: ignore[method-assign]
    deps.urls.check = check  # type: ignore[method-assign]
    try:
        threads = [threading.Thread(target=create) for _ in range(racers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        deps.webhooks.list_kb = real_list  # type: ignore[method-assign]
        deps.urls.check = real_check  # type: ignore[method-assign]
    assert len(deps.webhooks.list_kb(kb.id)) == MAX_WEBHOOKS_PER_KB
    assert refused == ["too_many_webhooks"] * (racers - 1)


def test_a_delete_gives_its_place_back_once(deps: Services, kb: KnowledgeBase) -> None:
    made = [webhooks.create_webhook(deps, kb.tenant_id, kb.id, BODY) for _ in range(MAX_WEBHOOKS_PER_KB)]
    with pytest.raises(BadRequest) as refused:
        webhooks.create_webhook(deps, kb.tenant_id, kb.id, BODY)
    assert refused.value.code == "too_many_webhooks"
    gone = str(made[0]["id"])
    webhooks.delete_webhook(deps, kb.tenant_id, kb.id, gone)
    assert not deps.webhooks.delete(kb.id, gone)  # a delete sent again: nothing more given back
    webhooks.create_webhook(deps, kb.tenant_id, kb.id, BODY)
    with pytest.raises(BadRequest):
        webhooks.create_webhook(deps, kb.tenant_id, kb.id, BODY)
    assert len(deps.webhooks.list_kb(kb.id)) == MAX_WEBHOOKS_PER_KB
