"""The webhooks' slow lane shares its 2 workers between tenants (services/lane_shares.py): one tenant's
backlog of degraded tries held both workers (each try up to the receiver's timeout), and another tenant's one
try waited behind all of it. A tenant now holds at most one worker: its other tries go back on the lane,
unclaimed and unposted, and the second worker reaches the other tenant's try."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from typing import Any

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain import lane_share
from chalicelib.domain.events import EventType, knowledge_event
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations import webhooks
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.operations.webhooks import CreateWebhookRequest
from chalicelib.ports import WebhookAnswer
from chalicelib.services import lane_shares
from chalicelib.services.events import announce
from chalicelib.services.webhook_messages import DEGRADED_SCORE, DeliveryMessage
from chalicelib.stages import webhooks as delivery

SLOW = "webhooks-slow"
BUSY_URL, QUIET_URL = "https://busy.example.com/hook", "https://quiet.example.com/hook"


class SlowForBusy:
    """The busy tenant's receiver answers only once released (at most 3 s); the quiet one's at once."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.busy_posting = threading.Event()
        self.posts: list[str] = []

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> WebhookAnswer:
        self.posts.append(url)
        if url == BUSY_URL:
            self.busy_posting.set()
            self.release.wait(timeout=3)
        return WebhookAnswer(204, 3)


def degraded_webhook(deps: Services, kb: KnowledgeBase, url: str) -> str:
    body = CreateWebhookRequest(url=url, event_types=["Knowledge Created"])
    hook_id = str(webhooks.create_webhook(deps, kb.tenant_id, kb.id, body)["id"])
    hook = deps.webhooks.get(kb.id, hook_id)
    assert hook is not None
    deps.webhooks.put(replace(hook, failure_score=DEGRADED_SCORE))
    return hook_id


def created(kb: KnowledgeBase, n: int) -> Any:
    return knowledge_event(
        EventType.KNOWLEDGE_CREATED,
        tenant_id=kb.tenant_id,
        kb_id=kb.id,
        knowledge_id=f"k{n}",
        status="pending",
        attempt=1,
    )


def tenant_kb(deps: Services, name: str) -> KnowledgeBase:
    tenant, _ = create_tenant_with_key(deps, name)
    return create_kb(deps, tenant.id, CreateKnowledgeBase(name=f"{name}'s"))


def one_message(deps: Services, queue: MemoryTaskQueue) -> None:
    event = queue.receive(SLOW, max_messages=1)
    queue.settle(event, delivery.handle_slow(deps, event, None))


def test_a_tenants_one_try_is_delivered_while_another_tenants_backlog_holds_a_worker(
    deps: Services, queue: MemoryTaskQueue
) -> None:
    receiver = SlowForBusy()
    deps.webhook_sender = receiver
    busy, quiet = tenant_kb(deps, "busy"), tenant_kb(deps, "quiet")
    degraded_webhook(deps, busy, BUSY_URL)
    degraded_webhook(deps, quiet, QUIET_URL)
    announce(deps, *(created(busy, n) for n in range(50)), created(quiet, 0))
    assert len(queue.waiting(SLOW)) == 51  # the busy tenant's 50 first, the quiet one's last

    first = threading.Thread(target=one_message, args=(deps, queue))  # worker 1: the busy tenant's first try
    first.start()
    try:
        assert receiver.busy_posting.wait(timeout=5)
        deadline = time.monotonic() + 2.5  # worker 2, while worker 1 still waits on the busy receiver
        while QUIET_URL not in receiver.posts and time.monotonic() < deadline:
            one_message(deps, queue)
        assert QUIET_URL in receiver.posts, f"the quiet tenant's try waited: posts {receiver.posts}"
        assert receiver.posts.count(BUSY_URL) == 1  # the busy tenant's other tries went back, unposted
    finally:
        receiver.release.set()
        first.join()
    put_back = [DeliveryMessage.model_validate(m.json()) for m in queue.waiting(SLOW)]
    assert len(put_back) == 49 and {(m.attempt, m.parked, m.paused) for m in put_back} == {(1, 0, 0)}
    assert {m.delay_seconds for m in queue.waiting(SLOW)} == {lane_shares.SHARE_WAIT_SECONDS}
    # worker 1 gave its slot back: the busy tenant's tries run again, each delivered once
    while queue.waiting(SLOW):
        one_message(deps, queue)
    assert receiver.posts.count(BUSY_URL) == 50


def test_a_copy_of_a_running_try_neither_waits_nor_gives_the_slot_back() -> None:
    """An SQS duplicate of the try holding the slot may run (its claim then tells it is in flight), and it
    gives back nothing: the copy that took the slot does."""
    may, owned, book = lane_share.take({}, "try-1", 0.0, 120, 1)
    assert (may, owned) == (True, True)
    assert lane_share.take(book, "try-1", 1.0, 120, 1)[:2] == (True, False)
    assert lane_share.take(book, "try-2", 1.0, 120, 1)[:2] == (False, False)
    assert lane_share.take(book, "try-2", 121.0, 120, 1)[:2] == (True, True)  # a slot never given back lapses
    assert lane_share.take(lane_share.give_back(book, "try-1", 2.0), "try-2", 2.0, 120, 1)[:2] == (True, True)
