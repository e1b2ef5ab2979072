"""The webhooks' slow lane (stages/webhooks.py) on the fakes: a webhook whose receiver fails most of its tries
(four in five: never five in a row, so the breaker never pauses it) is degraded by its score and its tries
go to the `webhooks-slow` queue, which has workers of its own, instead of taking most of the main lane's; a
try forwarded there keeps its attempt, and a copy forwarded twice is posted once; the breaker works there as
in the main lane; either lane's DLQ is listed and redriven back to its lane; GET shows the lane."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue, MemoryWebhookRepo
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.events import EventType, knowledge_event
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations import dlq, webhooks
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.operations.webhooks import CreateWebhookRequest, UpdateWebhookRequest
from chalicelib.ports import WebhookAnswer, WebhookRepo
from chalicelib.services.events import announce
from chalicelib.services.webhook_messages import DEGRADED_SCORE, DeliveryMessage, FanOutMessage
from chalicelib.stages import webhooks as delivery

from .webhook_lane_contract import WebhookLaneContract

MAIN, SLOW = "webhooks", "webhooks-slow"
HANDLERS = {MAIN: delivery.handle, SLOW: delivery.handle_slow}


class TestMemoryWebhookLanes(WebhookLaneContract):
    @pytest.fixture
    def hooks(self) -> WebhookRepo:
        return MemoryWebhookRepo()


class Script:
    """A WebhookSender answering each URL from its pattern (`F`: a 503, `D`: a 204), in a loop, and
    recording which lane each post came from (set by `drain`)."""

    def __init__(self, **patterns: str) -> None:
        self.patterns = {f"https://{name}.example.com/hook": p for name, p in patterns.items()}
        self.lane = ""
        self.posts: list[tuple[str, str]] = []  # (url, lane)

    def url(self, name: str) -> str:
        return f"https://{name}.example.com/hook"

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> WebhookAnswer:
        pattern = self.patterns[url]
        n = sum(1 for u, _ in self.posts if u == url)
        self.posts.append((url, self.lane))
        return WebhookAnswer(503 if pattern[n % len(pattern)] == "F" else 204, 3)

    def lanes(self, name: str) -> list[str]:
        return [lane for u, lane in self.posts if u == self.url(name)]


def drain(deps: Services, queue: MemoryTaskQueue, script: Script | None = None) -> None:
    """Both lanes until empty, the main lane first (retries included: delays are not waited for)."""
    while True:
        for lane in (MAIN, SLOW):
            if queue.waiting(lane):
                if script is not None:
                    script.lane = lane
                queue.deliver(lane, HANDLERS[lane], deps)
                break
        else:
            return


def create(deps: Services, kb: KnowledgeBase, url: str) -> str:
    body = CreateWebhookRequest(url=url, event_types=["Knowledge Created"])
    return str(webhooks.create_webhook(deps, kb.tenant_id, kb.id, body)["id"])


def created(kb: KnowledgeBase, n: int) -> Any:
    return knowledge_event(
        EventType.KNOWLEDGE_CREATED,
        tenant_id=kb.tenant_id,
        kb_id=kb.id,
        knowledge_id=f"k{n}",
        status="pending",
        attempt=1,
    )


def shown(deps: Services, kb: KnowledgeBase, hook_id: str) -> dict[str, Any]:
    return webhooks.get_webhook(deps, kb.tenant_id, kb.id, hook_id)


def degrade(deps: Services, kb: KnowledgeBase, hook_id: str, score: int = DEGRADED_SCORE) -> None:
    hook = deps.webhooks.get(kb.id, hook_id)
    assert hook is not None
    deps.webhooks.put(replace(hook, failure_score=score))


def test_a_receiver_failing_four_tries_in_five_is_degraded_to_the_slow_lane_one_failing_one_in_five_not(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    script = Script(mostly_down="FFFFD", mostly_up="FDDDD")
    deps.webhook_sender = script
    down = create(deps, kb, script.url("mostly_down"))
    up = create(deps, kb, script.url("mostly_up"))
    for n in range(10):
        announce(deps, created(kb, n))
        drain(deps, queue, script)

    down_shown, up_shown = shown(deps, kb, down), shown(deps, kb, up)
    assert (down_shown["delivery_lane"], down_shown["delivery_status"]) == ("slow", "active")  # never paused
    assert down_shown["failure_score"] >= DEGRADED_SCORE
    assert (up_shown["delivery_lane"], up_shown["failure_score"]) == ("normal", 0)
    # the failing receiver's first tries in the main lane, until its score reached the threshold; every
    # later one (first tries, retries) in the slow lane; the healthy one's all in the main lane
    lanes = script.lanes("mostly_down")
    assert lanes[:DEGRADED_SCORE] == [MAIN] * DEGRADED_SCORE
    assert set(lanes[DEGRADED_SCORE:]) == {SLOW} and len(lanes) > 20
    assert set(script.lanes("mostly_up")) == {MAIN} and len(script.lanes("mostly_up")) >= 10


def test_new_deliveries_and_deferred_fan_outs_go_to_the_lane_of_their_webhook(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    script = Script(bad="F", good="D")
    deps.webhook_sender = script
    bad, good = create(deps, kb, script.url("bad")), create(deps, kb, script.url("good"))
    degrade(deps, kb, bad)
    announce(deps, created(kb, 1))
    assert [m.json()["webhook_id"] for m in queue.waiting(MAIN)] == [good]
    assert [m.json()["webhook_id"] for m in queue.waiting(SLOW)] == [bad]
    drain(deps, queue)
    # a fan-out left to the queue (the table did not answer at the announcement) routes the same way
    queue.send_raw(MAIN, FanOutMessage.of(created(kb, 2)).model_dump(mode="json"))
    queue.deliver(MAIN, delivery.handle, deps)
    assert [m.json()["webhook_id"] for m in queue.waiting(MAIN)] == [good]
    assert [m.json()["webhook_id"] for m in queue.waiting(SLOW)] == [bad]


def test_a_try_forwarded_to_the_slow_lane_keeps_its_attempt_and_a_copy_forwarded_twice_is_posted_once(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    script = Script(flaky="D")
    deps.webhook_sender = script
    hook_id = create(deps, kb, script.url("flaky"))
    degrade(deps, kb, hook_id)  # degraded after its try was queued in the main lane
    message = DeliveryMessage(
        kb_id=kb.id,
        webhook_id=hook_id,
        delivery_id="d-1",
        attempt=3,
        parked=1,
        paused=2,
        event=dict(created(kb, 1).detail),
    )
    for _ in range(2):  # SQS delivers it twice (at least once): each copy is forwarded
        queue.send_raw(MAIN, message.model_dump(mode="json"))
    while queue.waiting(MAIN):
        script.lane = MAIN
        queue.deliver(MAIN, delivery.handle, deps)

    assert script.posts == []  # forwarded unposted
    assert webhooks.list_deliveries(deps, kb.tenant_id, kb.id, hook_id) == []  # nor logged, nor claimed
    forwarded = [DeliveryMessage.model_validate(m.json()) for m in queue.waiting(SLOW)]
    assert forwarded == [message, message]  # same attempt, parked, put-offs
    drain(deps, queue, script)
    assert script.posts == [(script.url("flaky"), SLOW)]  # the claim runs the try once
    (logged,) = webhooks.list_deliveries(deps, kb.tenant_id, kb.id, hook_id)
    assert (logged["attempt"], logged["outcome"]) == (3, "delivered")
    assert shown(deps, kb, hook_id)["failure_score"] == DEGRADED_SCORE - 1


def test_a_slow_lane_try_of_a_webhook_well_again_is_posted_and_its_next_try_returns_to_the_main_lane(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    script = Script(recovering="D")
    deps.webhook_sender = script
    hook_id = create(deps, kb, script.url("recovering"))
    degrade(deps, kb, hook_id)
    announce(deps, created(kb, 1))
    assert len(queue.waiting(SLOW)) == 1
    degrade(deps, kb, hook_id, score=0)  # well again before its try came
    script.patterns[script.url("recovering")] = "F"
    script.lane = SLOW
    queue.deliver(SLOW, delivery.handle_slow, deps)
    assert script.posts == [(script.url("recovering"), SLOW)]  # posted where it was
    (retry,) = queue.waiting(MAIN)  # score 1 after that failure: the retry in the main lane
    assert retry.json()["attempt"] == 2 and queue.waiting(SLOW) == []
    # and a degraded webhook's retry stays in the slow lane
    degrade(deps, kb, hook_id, score=DEGRADED_SCORE + 1)
    queue.deliver(MAIN, delivery.handle, deps)  # forwarded
    queue.deliver(SLOW, delivery.handle_slow, deps)  # posted, failed again
    (again,) = queue.waiting(SLOW)
    assert again.json()["attempt"] == 3 and queue.waiting(MAIN) == []


def test_the_breaker_pauses_probes_and_resumes_a_webhook_in_the_slow_lane(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    script = Script(dead="F")
    deps.webhook_sender = script
    deps.settings = replace(deps.settings, webhook_max_attempts=20)
    hook_id = create(deps, kb, script.url("dead"))
    degrade(deps, kb, hook_id)
    for n in range(delivery.PAUSE_AFTER_FAILURES):
        announce(deps, created(kb, n))
    script.lane = SLOW
    while any(not m.json()["paused"] and m.json()["attempt"] == 1 for m in queue.waiting(SLOW)):
        queue.deliver(SLOW, delivery.handle_slow, deps)
    assert len(script.posts) == delivery.PAUSE_AFTER_FAILURES
    assert shown(deps, kb, hook_id)["delivery_status"] == "paused"
    queue.deliver(SLOW, delivery.handle_slow, deps)  # the retries, before the probe's time: put off
    assert len(script.posts) == delivery.PAUSE_AFTER_FAILURES and queue.waiting(MAIN) == []
    assert {(m.json()["attempt"], m.json()["paused"]) for m in queue.waiting(SLOW)} == {(2, 1)}
    log = webhooks.list_deliveries(deps, kb.tenant_id, kb.id, hook_id)
    assert [d["outcome"] for d in log].count("paused") == delivery.PAUSE_AFTER_FAILURES
    hook = deps.webhooks.get(kb.id, hook_id)
    assert hook is not None
    deps.webhooks.put(replace(hook, probe_at=0))  # the probe is due
    script.patterns[script.url("dead")] = "D"  # the receiver is back
    drain(deps, queue, script)
    after = shown(deps, kb, hook_id)
    assert (after["delivery_status"], after["failures_in_a_row"]) == ("active", 0)
    outcomes = [d["outcome"] for d in webhooks.list_deliveries(deps, kb.tenant_id, kb.id, hook_id)]
    assert outcomes.count("delivered") == delivery.PAUSE_AFTER_FAILURES
    assert {lane for _, lane in script.posts} == {SLOW}  # degraded to the end: never in the main lane


def test_a_letter_parked_by_either_lane_is_listed_and_redriven_back_to_its_lane(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    script = Script(gone="F")
    deps.webhook_sender = script
    deps.settings = replace(deps.settings, webhook_max_attempts=1)
    hook_id = create(deps, kb, script.url("gone"))
    degrade(deps, kb, hook_id, score=DEGRADED_SCORE + 5)
    announce(deps, created(kb, 1))
    drain(deps, queue)
    listed = dlq.list_dead_letters(deps, None, 10)
    assert [(v["queue"], v["reason"]) for v in listed] == [
        (SLOW, "not delivered after 1 tries (last answer: 5xx)")
    ]
    assert dlq.list_dead_letters(deps, SLOW, 10) != []  # the operators' queue filter takes the lane
    report = dlq.redrive(deps, None, 10).as_dict()
    assert report["counts"] == {"resent": 1}
    (resent,) = queue.waiting(SLOW)
    assert DeliveryMessage.model_validate(resent.json()).parked == 1  # a fresh claim


def test_get_shows_the_lane_and_a_put_that_resumes_the_webhook_clears_its_score(
    deps: Services, kb: KnowledgeBase
) -> None:
    hook_id = create(deps, kb, "https://fixed.example.com/hook")
    assert (shown(deps, kb, hook_id)["delivery_lane"], shown(deps, kb, hook_id)["failure_score"]) == (
        "normal",
        0,
    )
    degrade(deps, kb, hook_id, score=7)
    assert (shown(deps, kb, hook_id)["delivery_lane"], shown(deps, kb, hook_id)["failure_score"]) == (
        "slow",
        7,
    )
    answer = webhooks.update_webhook(
        deps, kb.tenant_id, kb.id, hook_id, UpdateWebhookRequest(url="https://new.example.com/hook")
    )
    assert (answer["delivery_lane"], answer["failure_score"]) == ("normal", 0)
    assert shown(deps, kb, hook_id)["failure_score"] == 0


def test_one_tenants_degraded_receiver_leaves_the_main_lane_to_another_tenants_deliveries(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """The main lane's tries over a period: after the first few, tenant A's receiver (four failures in
    five) no longer takes any of them, whatever its volume; tenant B's all go there."""
    script = Script(a="FFFFD", b="D")
    deps.webhook_sender = script
    for n in range(5):
        create(deps, kb, script.url("a").replace("/hook", f"/{n}"))
        script.patterns[script.url("a").replace("/hook", f"/{n}")] = "FFFFD"
    other, _ = create_tenant_with_key(deps, "bystander")
    other_kb = create_kb(deps, other.id, CreateKnowledgeBase(name="theirs"))
    create(deps, other_kb, script.url("b"))
    for n in range(8):
        announce(deps, created(kb, n), created(other_kb, n))
        drain(deps, queue, script)
    main_posts = [url for url, lane in script.posts if lane == MAIN]
    a_in_main = [u for u in main_posts if "a.example" in u]
    assert len(a_in_main) == 5 * DEGRADED_SCORE  # each of A's webhooks until it was degraded, then none
    assert main_posts.count(script.url("b")) == 8
    assert all(lane == MAIN for url, lane in script.posts if url == script.url("b"))


def test_two_workers_failing_at_once_log_the_degradation_their_writes_made(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: Any
) -> None:
    """Two workers that read the same score 1 and both fail leave the stored score at 3: the write that made
    it 3 logs `webhook degraded` and its retry goes to the slow lane (each worker decided from its own read,
    and neither logged it: found by a review)."""
    warned: list[str] = []
    real_warning = delivery.logger.warning

    def record(msg: str, *args: Any, **kwargs: Any) -> None:
        warned.append(msg)
        real_warning(msg, *args, **kwargs)

    monkeypatch.setattr(delivery.logger, "warning", record)
    barrier = threading.Barrier(2, timeout=10)

    class Sender:
        def post(self, url: str, body: bytes, headers: dict[str, str]) -> WebhookAnswer:
            barrier.wait()  # both workers have read the webhook (score 1) before either counts
            return WebhookAnswer(503, 3)

    deps.webhook_sender = Sender()
    hook_id = create(deps, kb, "https://flaky.example.com/hook")
    degrade(deps, kb, hook_id, score=1)
    messages = [
        DeliveryMessage(
            kb_id=kb.id,
            webhook_id=hook_id,
            delivery_id=f"d-{n}",
            attempt=1,
            event=dict(created(kb, n).detail),
        )
        for n in range(2)
    ]
    threads = [threading.Thread(target=delivery.deliver, args=(deps, m)) for m in messages]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shown_now = shown(deps, kb, hook_id)
    assert shown_now["delivery_lane"] == "slow"
    assert any(w.startswith("webhook degraded") for w in warned), "degraded, never logged"
    assert len(queue.waiting(SLOW)) >= 1  # the retry of the try whose write made it degraded
