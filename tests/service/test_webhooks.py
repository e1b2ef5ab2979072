"""Webhooks on the fakes: the SSRF check at creation, fan-out to the webhooks that asked for an event type,
signed deliveries, retries with backoff, the DLQ after the last try, and a log that keeps nothing of what
the receiver answered but its status-code class."""

from __future__ import annotations

import json
import time
from dataclasses import replace

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue, ScriptedUrlImporter
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.types import KnowledgeBase, ParseStatus
from chalicelib.domain.webhooks import retry_delay, verify
from chalicelib.operations import webhooks
from chalicelib.operations.webhooks import CreateWebhookRequest, UpdateWebhookRequest
from chalicelib.ports import FetchFailed, WebhookAnswer
from chalicelib.ports.events import DeliveryTry
from chalicelib.stages import webhooks as delivery

from .conftest import MAIN_STAGES, drain, upload

URL = "https://hooks.example.com/weknora"


class Receiver:
    """A WebhookSender that records each post and answers from a script (a status or an exception)."""

    def __init__(self, *answers: int | Exception) -> None:
        self.answers = list(answers) or [204]
        self.posts: list[tuple[str, bytes, dict[str, str]]] = []

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> WebhookAnswer:
        self.posts.append((url, body, headers))
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return WebhookAnswer(answer, 3)


def drain_webhooks(deps: Services) -> None:
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    while queue.waiting("webhooks"):
        queue.deliver("webhooks", delivery.handle, deps)


def hook_on(deps: Services, kb: KnowledgeBase, *types: str) -> dict[str, object]:
    body = CreateWebhookRequest(url=URL, event_types=list(types or ["Knowledge Created"]))
    return webhooks.create_webhook(deps, kb.tenant_id, kb.id, body)


def test_a_blocked_url_is_refused_at_creation_and_on_change_with_the_url_imports_code(
    deps: Services, kb: KnowledgeBase, urls: ScriptedUrlImporter
) -> None:
    urls.blocked.add("http://127.0.0.1:9000/x")
    with pytest.raises(BadRequest) as refused:
        webhooks.create_webhook(
            deps,
            kb.tenant_id,
            kb.id,
            CreateWebhookRequest(url="http://127.0.0.1:9000/x", event_types=["Task Failed"]),
        )
    assert refused.value.code == "ssrf_blocked"
    hook = hook_on(deps, kb)
    with pytest.raises(BadRequest):
        webhooks.update_webhook(
            deps, kb.tenant_id, kb.id, str(hook["id"]), UpdateWebhookRequest(url="http://127.0.0.1:9000/x")
        )
    assert webhooks.get_webhook(deps, kb.tenant_id, kb.id, str(hook["id"]))["url"] == URL


def test_unknown_event_types_are_a_validation_error() -> None:
    with pytest.raises(ValueError, match="unknown event types"):
        CreateWebhookRequest(url=URL, event_types=["Knowledge Exploded"])


def test_the_secret_is_shown_once_and_deliveries_are_signed_with_it(
    deps: Services, kb: KnowledgeBase
) -> None:
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    hook = hook_on(deps, kb, "Knowledge Created")
    secret = str(hook["secret"])
    assert "secret" not in webhooks.get_webhook(deps, kb.tenant_id, kb.id, str(hook["id"]))
    assert all("secret" not in h for h in webhooks.list_webhooks(deps, kb.tenant_id, kb.id))

    knowledge = upload(deps, kb)
    drain_webhooks(deps)

    ((url, body, headers),) = receiver.posts
    assert url == URL and headers["Content-Type"] == "application/json"
    assert verify(secret, headers["X-Weknora-Signature"], body, now=int(time.time()))
    assert not verify(secret, headers["X-Weknora-Signature"], body + b" ", now=int(time.time()))
    assert not verify(secret, headers["X-Weknora-Signature"], body, now=int(time.time()) + 3600)  # a replay
    assert json.loads(body)["knowledge_id"] == knowledge.id
    (logged,) = webhooks.list_deliveries(deps, kb.tenant_id, kb.id, str(hook["id"]))
    assert (logged["outcome"], logged["status_class"], logged["attempt"]) == ("delivered", "2xx", 1)


def test_only_enabled_webhooks_that_asked_for_the_type_are_sent_it(deps: Services, kb: KnowledgeBase) -> None:
    receiver = Receiver(200)
    deps.webhook_sender = receiver
    hook_on(deps, kb, "Knowledge Completed")  # not this event
    paused = hook_on(deps, kb, "Knowledge Created")
    webhooks.update_webhook(deps, kb.tenant_id, kb.id, str(paused["id"]), UpdateWebhookRequest(enabled=False))
    upload(deps, kb)
    drain_webhooks(deps)
    assert receiver.posts == []


def test_a_failing_receiver_is_retried_with_backoff_then_parked_in_the_dlq(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    deps.settings = replace(deps.settings, webhook_max_attempts=3)
    receiver = Receiver(500, FetchFailed("download timed out", permanent=False), 503)
    deps.webhook_sender = receiver
    hook = hook_on(deps, kb)
    upload(deps, kb)
    drain_webhooks(deps)

    assert len(receiver.posts) == 3
    assert len({headers["X-Weknora-Delivery"] for _, _, headers in receiver.posts}) == 1
    log = webhooks.list_deliveries(deps, kb.tenant_id, kb.id, str(hook["id"]))
    assert sorted((d["attempt"], d["outcome"], d["status_class"]) for d in log) == [
        (1, "retrying", "5xx"),
        (2, "retrying", "none"),
        (3, "dead_lettered", "5xx"),
    ]
    (parked,) = queue.dead_letters("webhooks")
    assert json.loads(parked.body)["attempt"] == 3
    assert parked.attributes["reason"] == "not delivered after 3 tries (last answer: 5xx)"


def delivery_of(hook: dict[str, object], kb: KnowledgeBase, attempt: int = 1) -> dict[str, object]:
    return {
        "kb_id": kb.id,
        "webhook_id": hook["id"],
        "delivery_id": "d1",
        "attempt": attempt,
        "event": {"event_id": "e1", "type": "Knowledge Created"},
    }


def test_a_redelivered_message_neither_forks_the_retries_nor_parks_twice(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    deps.settings = replace(deps.settings, webhook_max_attempts=3)
    receiver = Receiver(503)
    deps.webhook_sender = receiver
    hook = hook_on(deps, kb)
    queue.send_raw("webhooks", delivery_of(hook, kb))
    queue.send_raw("webhooks", delivery_of(hook, kb))  # SQS delivers the same message a second time
    drain_webhooks(deps)

    assert len(receiver.posts) == 3  # one post per try: the copy was dropped, the chain did not fork
    log = webhooks.list_deliveries(deps, kb.tenant_id, kb.id, str(hook["id"]))
    assert sorted(d["attempt"] for d in log) == [1, 2, 3]
    (parked,) = queue.dead_letters("webhooks")
    assert json.loads(parked.body)["attempt"] == 3


def test_a_try_held_by_a_worker_comes_back_and_is_taken_over_once_its_holder_is_stale(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    hook = hook_on(deps, kb)
    held = DeliveryTry(str(hook["id"]), "d1", parked=0, attempt=1)
    first = deps.webhooks.claim_try(kb.id, held, delivery.STALE_TRY_SECONDS)  # a worker that then died
    queue.send_raw("webhooks", delivery_of(hook, kb))

    response = queue.deliver("webhooks", delivery.handle, deps)
    assert len(response["batchItemFailures"]) == 1 and receiver.posts == []  # busy: back on the queue
    assert len(queue.waiting("webhooks")) == 1

    monkeypatch.setattr(delivery, "STALE_TRY_SECONDS", 0)  # the visibility timeout passed: the claim is stale
    drain_webhooks(deps)
    assert len(receiver.posts) == 1
    (logged,) = webhooks.list_deliveries(deps, kb.tenant_id, kb.id, str(hook["id"]))
    assert (logged["outcome"], logged["attempt"], logged["at"]) == ("delivered", 1, first.at)
    assert deps.webhooks.claim_try(kb.id, held, 0).state == "finished"


def test_a_parked_letter_sent_back_unchanged_is_tried_again_and_parked_once_more(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    deps.settings = replace(deps.settings, webhook_max_attempts=1)
    receiver = Receiver(503)
    deps.webhook_sender = receiver
    hook = hook_on(deps, kb)
    queue.send_raw("webhooks", delivery_of(hook, kb))
    drain_webhooks(deps)
    (letter,) = queue.dead_letters("webhooks")
    assert json.loads(letter.body)["parked"] == 1

    queue.send_raw("webhooks", json.loads(letter.body))  # an SQS redrive of the DLQ, twice delivered
    queue.send_raw("webhooks", json.loads(letter.body))
    drain_webhooks(deps)
    assert len(receiver.posts) == 2
    assert [json.loads(m.body)["parked"] for m in queue.dead_letters("webhooks")] == [1, 2]


def test_the_operators_redrive_tries_a_parked_delivery_again(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """`/admin/dlq` redrive: a parked delivery is sent back for one more try (it was kept as `unreadable`,
    having no knowledge id); a body that is no webhook message stays for a person to look at."""
    from chalicelib.operations.dlq import redrive

    deps.settings = replace(deps.settings, webhook_max_attempts=1)
    deps.webhook_sender = Receiver(503)
    hook = hook_on(deps, kb)
    queue.send_raw("webhooks", delivery_of(hook, kb))
    drain_webhooks(deps)
    queue.dead_letter("webhooks", '{"kb_id": "x"}', "not a webhook delivery: 4 error(s)")
    assert len(queue.dead_letters("webhooks")) == 2

    receiver = Receiver(204)  # the receiver is back
    deps.webhook_sender = receiver
    report = redrive(deps, "webhooks", 10).as_dict()
    assert report["counts"] == {"resent": 1, "unreadable": 1}
    drain_webhooks(deps)
    assert len(receiver.posts) == 1
    (kept,) = queue.dead_letters("webhooks")
    assert json.loads(kept.body) == {"kb_id": "x"}


def test_an_event_that_holds_the_word_announce_is_delivered_not_misread(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    hook = hook_on(deps, kb)
    message = delivery_of(hook, kb)
    message["event"] = {"event_id": "e1", "type": "Knowledge Created", "metadata": {"announce": "yes"}}
    queue.send_raw("webhooks", message)
    drain_webhooks(deps)
    assert len(receiver.posts) == 1 and not queue.dead_letters("webhooks")


def test_a_url_refused_at_delivery_is_parked_at_once(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    receiver = Receiver(
        FetchFailed("URL blocked: the address is not allowed", permanent=True, code="ssrf_blocked")
    )
    deps.webhook_sender = receiver
    hook = hook_on(deps, kb)
    upload(deps, kb)
    drain_webhooks(deps)
    assert len(receiver.posts) == 1
    (logged,) = webhooks.list_deliveries(deps, kb.tenant_id, kb.id, str(hook["id"]))
    assert (logged["outcome"], logged["status_class"]) == ("refused", "none")
    assert len(queue.dead_letters("webhooks")) == 1


def test_a_deleted_webhooks_pending_deliveries_are_dropped(deps: Services, kb: KnowledgeBase) -> None:
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    hook = hook_on(deps, kb)
    upload(deps, kb)
    webhooks.delete_webhook(deps, kb.tenant_id, kb.id, str(hook["id"]))
    drain_webhooks(deps)
    assert receiver.posts == []
    with pytest.raises(Exception, match="not found"):
        webhooks.get_webhook(deps, kb.tenant_id, kb.id, str(hook["id"]))


def test_the_backoff_doubles_with_jitter_up_to_the_sqs_limit() -> None:
    assert [retry_delay(n, 10, 1.0) for n in (1, 2, 3, 4)] == [10, 20, 40, 80]
    assert retry_delay(2, 10, 0.5) == 10
    assert retry_delay(20, 10, 1.0) == 900
    assert retry_delay(1, 0, 1.0) == 1


def test_deleting_the_knowledge_base_deletes_its_webhooks(deps: Services, kb: KnowledgeBase) -> None:
    from chalicelib.operations.knowledge_changes import delete_kb
    from chalicelib.stages import lifecycle

    hook = hook_on(deps, kb)
    delete_kb(deps, kb.tenant_id, kb.id)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    while queue.waiting("lifecycle"):
        queue.deliver("lifecycle", lifecycle.handle, deps)
    assert deps.webhooks.get(kb.id, str(hook["id"])) is None


def test_the_machines_announcement_reaches_each_webhook_once_and_only_for_a_completed_row(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    hook = hook_on(deps, kb, "Knowledge Completed")
    knowledge = upload(deps, kb)
    drain(deps, MAIN_STAGES)
    drain_webhooks(deps)
    announcement = {"announce": "Knowledge Completed", "knowledge_id": knowledge.id, "attempt": 1}
    queue.send_raw("webhooks", announcement)  # the machine's promotion did not complete the row: not told
    drain_webhooks(deps)
    assert receiver.posts == []
    completed = deps.knowledge.settle_plan(knowledge.id, 1, 0, {"planned": [], "not_planned": {}})
    assert completed is not None and completed.parse_status == ParseStatus.COMPLETED
    queue.send_raw("webhooks", announcement)
    queue.send_raw("webhooks", announcement)  # SQS delivers the machine's message a second time
    drain_webhooks(deps)

    (post,) = receiver.posts
    assert json.loads(post[1])["knowledge_id"] == knowledge.id
    (logged,) = webhooks.list_deliveries(deps, kb.tenant_id, kb.id, str(hook["id"]))
    assert logged["outcome"] == "delivered"
