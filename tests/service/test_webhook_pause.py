"""The delivery breaker (stages/webhooks.py) on the fakes: a webhook whose posted tries fail in a row is paused,
so one tenant's receiver that never answers (each try costs the whole timeout) no longer holds every tenant's
deliveries behind it; a paused webhook's tries are logged `paused` and kept on their retry chain without being
posted, save one probe at a time, whose success resumes it; GET shows the pause."""

from __future__ import annotations

import json

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue, MemoryWebhookRepo
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations import webhooks
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.operations.webhooks import CreateWebhookRequest
from chalicelib.ports import FetchFailed, WebhookAnswer, WebhookRepo
from chalicelib.stages import webhooks as delivery

from .conftest import upload
from .test_webhooks import Receiver, drain_webhooks
from .webhook_pause_contract import WebhookPauseContract

#: infra/stack.py MAXIMUM_CONCURRENCY["webhooks"] and app.py's batch of the webhooks queue
CONCURRENCY, BATCH = 5, 5
#: the breaker's threshold (stages/webhooks.PAUSE_AFTER_FAILURES, 5)
PAUSE_AFTER = 5


class TestMemoryWebhookPause(WebhookPauseContract):
    @pytest.fixture
    def hooks(self) -> WebhookRepo:
        return MemoryWebhookRepo()


class VirtualClock:
    """A WebhookSender on a virtual clock: a post to the tarpit never answers and costs the whole timeout of
    one of CONCURRENCY workers; the bystander's post records when it went."""

    def __init__(self, timeout: float) -> None:
        self.timeout, self.busy_seconds, self.tarpit_posts = timeout, 0.0, 0
        self.bystander_at: float | None = None

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> WebhookAnswer:
        if "tarpit" in url:
            self.tarpit_posts += 1
            self.busy_seconds += self.timeout
            raise FetchFailed("download timed out", permanent=False)
        self.bystander_at = self.busy_seconds / CONCURRENCY
        return WebhookAnswer(204, 1)


def create(deps: Services, kb: KnowledgeBase, url: str) -> str:
    body = CreateWebhookRequest(url=url, event_types=["Knowledge Created"])
    return str(webhooks.create_webhook(deps, kb.tenant_id, kb.id, body)["id"])


@pytest.mark.parametrize("uploads", [10, 50])
def test_another_tenants_first_try_no_longer_waits_behind_a_tarpit_tenant(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch, uploads: int
) -> None:
    """rev_hooks' simulation: tenant A's 20 webhooks on a receiver that never answers, 50 uploads (1,000
    first tries) ahead of tenant B's one. Before, B's first try came after all 1,000 of A's timeouts (1,000
    virtual seconds, growing with A's volume); now after each of A's webhooks failed PAUSE_AFTER times,
    whatever A's volume."""
    monkeypatch.setattr(delivery, "PROBE_SECONDS", 900, raising=False)  # no probe within the test
    clock = VirtualClock(deps.settings.webhook_timeout_seconds)
    deps.webhook_sender = clock
    hooks = 20
    for n in range(hooks):
        create(deps, kb, f"https://tarpit.example.com/{n}")
    for n in range(uploads):
        upload(deps, kb, f"n{n}.md", f"# doc {n}\n\nbody {n}\n".encode())
    other, _ = create_tenant_with_key(deps, "bystander")
    other_kb = create_kb(deps, other.id, CreateKnowledgeBase(name="theirs"))
    create(deps, other_kb, "https://fast.example.net/x")
    upload(deps, other_kb, "b.md", b"# b\n\nb\n")

    while clock.bystander_at is None:  # first tries only, as they come (a retry waits out its delay)
        event = queue.receive("webhooks", BATCH, due_only=True)
        assert event["Records"], "the bystander's delivery was never tried"
        queue.settle(event, delivery.handle(deps, event, None))

    assert clock.tarpit_posts == hooks * PAUSE_AFTER  # not 1,000: the rest were not posted
    assert clock.bystander_at <= hooks * PAUSE_AFTER * deps.settings.webhook_timeout_seconds / CONCURRENCY
    listed = webhooks.list_webhooks(deps, kb.tenant_id, kb.id)
    assert {h["delivery_status"] for h in listed} == {"paused"}


def test_a_paused_webhook_is_shown_its_tries_are_logged_paused_not_posted_and_parked_at_the_last(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery, "PROBE_SECONDS", 900, raising=False)
    receiver = Receiver(503)
    deps.webhook_sender = receiver
    hook_id = create(deps, kb, "https://down.example.com/hook")
    for n in range(PAUSE_AFTER + 1):
        upload(deps, kb, f"n{n}.md", f"# doc {n}\n\nbody {n}\n".encode())
    while any(not m.delay_seconds for m in queue.waiting("webhooks")):  # the first tries
        queue.deliver("webhooks", delivery.handle, deps, due_only=True)

    assert len(receiver.posts) == PAUSE_AFTER  # the sixth first try was not posted
    shown = webhooks.get_webhook(deps, kb.tenant_id, kb.id, hook_id)
    assert (shown["delivery_status"], shown["failures_in_a_row"]) == ("paused", PAUSE_AFTER)
    assert shown["paused_at"]
    log = webhooks.list_deliveries(deps, kb.tenant_id, kb.id, hook_id)
    (skipped,) = [e for e in log if e["outcome"] == "paused"]
    assert skipped["reason"] == f"the webhook is paused after {PAUSE_AFTER} failed tries in a row"

    drain_webhooks(deps)  # every retry comes while it is still paused: none is posted, each is parked
    assert len(receiver.posts) == PAUSE_AFTER
    letters = queue.dead_letters("webhooks")
    assert len(letters) == PAUSE_AFTER + 1
    assert all("the webhook is paused" in m.attributes["reason"] for m in letters)
    assert {json.loads(m.body)["attempt"] for m in letters} == {deps.settings.webhook_max_attempts}
    outcomes = [e["outcome"] for e in webhooks.list_deliveries(deps, kb.tenant_id, kb.id, hook_id, 100)]
    assert outcomes.count("dead_lettered") == PAUSE_AFTER + 1


def test_the_probe_is_posted_when_its_time_comes_and_its_success_resumes_the_webhook(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery, "PROBE_SECONDS", 0, raising=False)  # the first probe is due at once
    receiver = Receiver(*([503] * PAUSE_AFTER), 204)
    deps.webhook_sender = receiver
    hook_id = create(deps, kb, "https://back.example.com/hook")
    for n in range(PAUSE_AFTER):
        upload(deps, kb, f"n{n}.md", f"# doc {n}\n\nbody {n}\n".encode())
    for _ in range(PAUSE_AFTER):
        queue.deliver("webhooks", delivery.handle, deps, due_only=True)
    assert webhooks.get_webhook(deps, kb.tenant_id, kb.id, hook_id)["delivery_status"] == "paused"

    upload(deps, kb, "probe.md", b"# probe\n\nprobe\n")
    queue.deliver("webhooks", delivery.handle, deps, due_only=True)
    assert len(receiver.posts) == PAUSE_AFTER + 1  # the probe
    shown = webhooks.get_webhook(deps, kb.tenant_id, kb.id, hook_id)
    assert (shown["delivery_status"], shown["paused_at"], shown["failures_in_a_row"]) == ("active", None, 0)
    drain_webhooks(deps)  # the retries of the five are posted again, and delivered
    assert len(receiver.posts) == 2 * PAUSE_AFTER + 1 and not queue.dead_letters("webhooks")


def test_a_delivered_try_clears_the_failures_so_scattered_failures_never_pause(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    receiver = Receiver(*([503] * (PAUSE_AFTER - 1)), 204, *([503] * (PAUSE_AFTER - 1)), 204)
    deps.webhook_sender = receiver
    hook_id = create(deps, kb, "https://flaky.example.com/hook")
    for n in range(2 * PAUSE_AFTER):
        upload(deps, kb, f"n{n}.md", f"# doc {n}\n\nbody {n}\n".encode())
    for _ in range(2 * PAUSE_AFTER):
        queue.deliver("webhooks", delivery.handle, deps, due_only=True)
    assert len(receiver.posts) == 2 * PAUSE_AFTER
    shown = webhooks.get_webhook(deps, kb.tenant_id, kb.id, hook_id)
    assert (shown["delivery_status"], shown["failures_in_a_row"]) == ("active", 0)
