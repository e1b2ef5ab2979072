"""The delivery breaker (stages/webhooks.py) on the fakes: a webhook whose posted tries fail in a row is paused,
so one tenant's receiver that never answers (each try costs the whole timeout) no longer holds every tenant's
deliveries behind it; a paused webhook's tries are logged `paused` and kept on their retry chain without being
posted, save one probe at a time, whose success resumes it; GET shows the pause."""

from __future__ import annotations

import time

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue, MemoryWebhookRepo
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations import dlq, webhooks
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.operations.webhooks import CreateWebhookRequest, UpdateWebhookRequest
from chalicelib.ports import FetchFailed, WebhookAnswer, WebhookRepo
from chalicelib.services import webhook_messages
from chalicelib.services.webhook_messages import DeliveryMessage
from chalicelib.stages import webhooks as delivery

from .conftest import upload
from .test_webhooks import Receiver, drain_webhooks
from .webhook_pause_contract import WebhookPauseContract

#: infra/stack.py MAXIMUM_CONCURRENCY["webhooks"] and app.py's batch of the webhooks queue
CONCURRENCY, BATCH = 5, 5
#: the breaker's threshold (stages/webhooks.PAUSE_AFTER_FAILURES, 5)
PAUSE_AFTER = 5


@pytest.fixture(autouse=True)
def _one_lane(monkeypatch: pytest.MonkeyPatch) -> None:
    """The breaker alone, in the webhooks queue: no webhook here is degraded to the slow lane (the lanes,
    and the breaker in the slow one: test_webhook_lanes.py)."""
    monkeypatch.setattr(webhook_messages, "DEGRADED_SCORE", 10**6)


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


def test_a_paused_webhook_is_shown_its_tries_keep_their_attempt_until_the_next_probe_and_a_day_then_park(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev_hooks2 #3: a paused try no longer uses up an attempt (before, an outage longer than one retry
    chain parked every delivery, and so did the wait for the next probe after the receiver was back): it
    is sent again at the same attempt, due when the next probe may go, until its event is a day old."""
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
    (put_off,) = [m for m in queue.waiting("webhooks") if m.json()["attempt"] == 1]
    assert put_off.json()["paused"] == 1  # the same attempt, a try of its own
    hook = deps.webhooks.get(kb.id, hook_id)
    assert hook is not None
    # due at the probe's time (900 s after the pause here), not after the attempt's backoff (10 s at most)
    assert hook.probe_at - int(time.time()) <= put_off.delay_seconds <= 900

    # its next put-off, and the retries of the five, still paused: kept at their attempt
    queue.deliver("webhooks", delivery.handle, deps)
    assert len(receiver.posts) == PAUSE_AFTER and not queue.dead_letters("webhooks")
    assert sorted(m.json()["attempt"] for m in queue.waiting("webhooks")) == [1] + [2] * PAUSE_AFTER

    monkeypatch.setattr(delivery, "PAUSED_KEEP_SECONDS", 0, raising=False)  # a day has passed
    drain_webhooks(deps)
    assert len(receiver.posts) == PAUSE_AFTER
    letters = queue.dead_letters("webhooks")
    assert len(letters) == PAUSE_AFTER + 1
    assert all("the webhook is paused" in m.attributes["reason"] for m in letters)
    assert sorted(m.json()["attempt"] for m in letters) == [1] + [2] * PAUSE_AFTER


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


def first_tries(queue: MemoryTaskQueue) -> list[DeliveryMessage]:
    """The deliveries waiting, taken off the queue to be run by hand as concurrent workers would."""
    messages = [DeliveryMessage.model_validate(body) for body in queue.bodies("webhooks")]
    queue.purge("webhooks")
    return messages


class Concurrent:
    """A WebhookSender whose post `i` runs `during[i]` (other workers' tries, posted while it is in flight)
    and then answers `answers[i]` (0: no answer in time)."""

    def __init__(self, deps: Services, answers: list[int], during: dict[int, list[DeliveryMessage]]):
        self.deps, self.answers, self.during, self.posts = deps, answers, during, 0

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> WebhookAnswer:
        i, self.posts = self.posts, self.posts + 1
        for message in self.during.get(i, []):
            delivery.deliver(self.deps, message)
        if not self.answers[i]:
            raise FetchFailed("download timed out", permanent=False)
        return WebhookAnswer(self.answers[i], 3)


def test_a_delivered_try_clears_the_failures_other_workers_counted_while_it_was_posted(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev_hooks2 #1: worker 1 read the webhook (no failures) and posts slowly; workers 2..6 fail meanwhile
    and pause it; worker 1's try is delivered. Before, the clear hung on worker 1's stale read (nothing to
    clear), so the webhook stayed paused although its last posted try was delivered."""
    monkeypatch.setattr(delivery, "PROBE_SECONDS", 900, raising=False)
    hook_id = create(deps, kb, "https://slow.example.com/hook")
    for n in range(PAUSE_AFTER + 1):
        upload(deps, kb, f"n{n}.md", f"# doc {n}\n\nbody {n}\n".encode())
    tries = first_tries(queue)
    deps.webhook_sender = Concurrent(deps, [204] + [503] * PAUSE_AFTER, {0: tries[1:]})
    assert delivery.deliver(deps, tries[0]) == "delivered"
    shown = webhooks.get_webhook(deps, kb.tenant_id, kb.id, hook_id)
    assert (shown["delivery_status"], shown["paused_at"], shown["failures_in_a_row"]) == ("active", None, 0)


def test_the_tries_in_flight_when_the_pause_landed_do_not_stretch_the_probe_interval(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev_hooks2 #2: five workers on a receiver that never answers; four more tries were in flight when the
    fifth failure paused it, so nine failures are counted. Before, the wait after the first probe was taken
    from failures - 5 (480 s); it is the second probe's wait, 2 x PROBE_SECONDS."""
    hook_id = create(deps, kb, "https://tarpit.example.com/hook")
    for n in range(2 * PAUSE_AFTER):
        upload(deps, kb, f"n{n}.md", f"# doc {n}\n\nbody {n}\n".encode())
    tries = first_tries(queue)
    monkeypatch.setattr(delivery, "PROBE_SECONDS", 0, raising=False)  # the first probe is due at once
    deps.webhook_sender = Concurrent(deps, [0] * len(tries), {i: [tries[i + 1]] for i in range(8)})
    delivery.deliver(deps, tries[0])
    hook = deps.webhooks.get(kb.id, hook_id)
    assert hook is not None and hook.paused_at and hook.failures_in_a_row == 9

    monkeypatch.setattr(delivery, "PROBE_SECONDS", 30, raising=False)
    before = int(time.time())
    assert delivery.deliver(deps, tries[9]) == "retrying"  # the first probe, which fails
    after = int(time.time())
    hook = deps.webhooks.get(kb.id, hook_id)
    assert hook is not None
    assert before + 30 <= hook.probe_at <= after + 30  # the next probe in PROBE_SECONDS, not 480 s
    assert hook.probes == 1


def test_a_redrive_once_the_receiver_is_back_posts_the_letters_whatever_the_probe_time(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev_hooks2 #3: letters parked while the webhook was paused, the receiver back, the operator redrives.
    Before, each letter met the pause (its probe 900 s away) and was parked again without a post."""
    monkeypatch.setattr(delivery, "PROBE_SECONDS", 900, raising=False)
    monkeypatch.setattr(delivery, "PAUSED_KEEP_SECONDS", 0, raising=False)  # paused tries are parked now
    receiver = Receiver(*([503] * PAUSE_AFTER), 204)
    deps.webhook_sender = receiver
    hook_id = create(deps, kb, "https://back.example.com/hook")
    for n in range(PAUSE_AFTER + 3):
        upload(deps, kb, f"n{n}.md", f"# doc {n}\n\nbody {n}\n".encode())
    drain_webhooks(deps)
    parked = len(queue.dead_letters("webhooks"))
    assert len(receiver.posts) == PAUSE_AFTER and parked == PAUSE_AFTER + 3

    report = dlq.redrive(deps, "webhooks", 100)
    assert {o["outcome"] for o in report.outcomes} == {"resent"}
    drain_webhooks(deps)
    assert len(receiver.posts) == PAUSE_AFTER + parked and not queue.dead_letters("webhooks")
    assert webhooks.get_webhook(deps, kb.tenant_id, kb.id, hook_id)["delivery_status"] == "active"


@pytest.mark.parametrize("change", ["url", "enabled"])
def test_a_put_that_changes_the_url_or_switches_the_webhook_on_resumes_it(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch, change: str
) -> None:
    """rev_hooks2 #4: before, the PUT answered `paused` and new deliveries were not posted to the fixed URL
    until the next probe (up to 15 minutes)."""
    monkeypatch.setattr(delivery, "PROBE_SECONDS", 900, raising=False)
    receiver = Receiver(*([503] * PAUSE_AFTER), 204)
    deps.webhook_sender = receiver
    hook_id = create(deps, kb, "https://broken.example.com/hook")
    for n in range(PAUSE_AFTER):
        upload(deps, kb, f"n{n}.md", f"# doc {n}\n\nbody {n}\n".encode())
    for _ in range(PAUSE_AFTER):
        queue.deliver("webhooks", delivery.handle, deps, due_only=True)
    if change == "enabled":
        off = UpdateWebhookRequest(enabled=False)
        assert webhooks.update_webhook(deps, kb.tenant_id, kb.id, hook_id, off)["delivery_status"] == "paused"
        fix = UpdateWebhookRequest(enabled=True)
    else:
        fix = UpdateWebhookRequest(url="https://fixed.example.org/hook")
    shown = webhooks.update_webhook(deps, kb.tenant_id, kb.id, hook_id, fix)
    assert (shown["delivery_status"], shown["paused_at"], shown["failures_in_a_row"]) == ("active", None, 0)
    assert webhooks.get_webhook(deps, kb.tenant_id, kb.id, hook_id)["delivery_status"] == "active"

    upload(deps, kb, "new.md", b"# new\n\nnew\n")
    queue.deliver("webhooks", delivery.handle, deps, due_only=True)
    assert len(receiver.posts) == PAUSE_AFTER + 1
    # the log is newest first by claim time in milliseconds: the new try may tie with an earlier one
    assert "delivered" in [d["outcome"] for d in webhooks.list_deliveries(deps, kb.tenant_id, kb.id, hook_id)]


def test_a_put_that_changes_neither_leaves_the_pause(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delivery, "PROBE_SECONDS", 900, raising=False)
    deps.webhook_sender = Receiver(503)
    hook_id = create(deps, kb, "https://broken.example.com/hook")
    for n in range(PAUSE_AFTER):
        upload(deps, kb, f"n{n}.md", f"# doc {n}\n\nbody {n}\n".encode())
    for _ in range(PAUSE_AFTER):
        queue.deliver("webhooks", delivery.handle, deps, due_only=True)
    same = UpdateWebhookRequest(url="https://broken.example.com/hook", enabled=True, description="x")
    assert webhooks.update_webhook(deps, kb.tenant_id, kb.id, hook_id, same)["delivery_status"] == "paused"


class Slow:
    """A receiver that answers 2xx after `answered_in_ms` (the sender's measure)."""

    def __init__(self, answered_in_ms: int) -> None:
        self.answered_in_ms, self.posts = answered_in_ms, 0

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> WebhookAnswer:
        self.posts += 1
        return WebhookAnswer(204, self.answered_in_ms)


@pytest.mark.parametrize(("share_of_timeout", "paused"), [(0.98, True), (0.4, False)])
def test_a_receiver_that_answers_2xx_slower_than_half_the_timeout_is_paused_its_tries_delivered(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    monkeypatch: pytest.MonkeyPatch,
    share_of_timeout: float,
    paused: bool,
) -> None:
    """rev_hooks2 #5: a receiver that answers 2xx just inside the timeout holds a worker nearly as long as
    one that never answers, and was never paused (its tries were never failures in a row)."""
    monkeypatch.setattr(delivery, "PROBE_SECONDS", 900, raising=False)
    receiver = Slow(int(deps.settings.webhook_timeout_seconds * 1000 * share_of_timeout))
    deps.webhook_sender = receiver
    hook_id = create(deps, kb, "https://slow.example.com/hook")
    for n in range(PAUSE_AFTER + 1):
        upload(deps, kb, f"n{n}.md", f"# doc {n}\n\nbody {n}\n".encode())
    for _ in range(PAUSE_AFTER + 1):
        queue.deliver("webhooks", delivery.handle, deps, due_only=True)
    shown = webhooks.get_webhook(deps, kb.tenant_id, kb.id, hook_id)
    assert shown["delivery_status"] == ("paused" if paused else "active")
    assert receiver.posts == (PAUSE_AFTER if paused else PAUSE_AFTER + 1)
    outcomes = [e["outcome"] for e in webhooks.list_deliveries(deps, kb.tenant_id, kb.id, hook_id)]
    assert outcomes.count("delivered") == receiver.posts  # each slow try was delivered all the same


def test_a_redriven_letter_that_loses_the_probe_waits_for_the_next_one_whatever_its_age(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """rev_hooks2 #3: a letter redriven while another try holds the probe is put off, not parked again at
    once for its event's age."""
    monkeypatch.setattr(delivery, "PROBE_SECONDS", 900, raising=False)
    deps.webhook_sender = Receiver(503)
    hook_id = create(deps, kb, "https://down.example.com/hook")
    for n in range(PAUSE_AFTER + 1):
        upload(deps, kb, f"n{n}.md", f"# doc {n}\n\nbody {n}\n".encode())
    tries = first_tries(queue)
    for message in tries[:PAUSE_AFTER]:
        delivery.deliver(deps, message)
    old_event = {**tries[PAUSE_AFTER].event, "time": "2020-01-01T00:00:00.000Z"}
    letter = tries[PAUSE_AFTER].model_copy(update={"event": old_event, "parked": 1, "redriven": True})
    hook = deps.webhooks.get(kb.id, hook_id)
    assert hook is not None and hook.paused_at
    monkeypatch.setattr(deps.webhooks, "claim_probe", lambda *_: False)  # another try holds the probe
    queue.purge("webhooks")
    assert delivery.deliver(deps, letter) == "paused"
    (again,) = queue.bodies("webhooks")
    assert (again["attempt"], again["paused"], again["redriven"]) == (1, 1, False)
    assert not queue.dead_letters("webhooks")
    assert (
        delivery.deliver(deps, DeliveryMessage.model_validate(again)) == "dead_lettered"
    )  # still paused, old
