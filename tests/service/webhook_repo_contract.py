"""The WebhookRepo contract, run on the in-memory fake (tests/service) and on DynamoDB through moto
(tests/e2e), so the fake cannot drift from the webhooks table. Each test uses fresh ids."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from chalicelib.domain.webhooks import PreviousSecret
from chalicelib.ports import DeliveryRecord, Webhook, WebhookRepo
from chalicelib.ports.events import DeliveryTry


def make_hook(kb_id: str, created_at: str = "2026-01-01T00:00:00.000Z") -> Webhook:
    return Webhook(
        id=str(uuid.uuid4()),
        tenant_id="t",
        kb_id=kb_id,
        url="https://93.184.216.34/hook",
        event_types=["Knowledge Completed"],
        secret="whsec_x",
        description="d",
        created_at=created_at,
        updated_at=created_at,
    )


def read_back(hooks: WebhookRepo, hook: Webhook) -> Webhook:
    """The webhook as stored: what a PUT reads before it changes `hook`'s settings (`update`'s `read`)."""
    stored = hooks.get(hook.kb_id, hook.id)
    assert stored is not None
    return stored


def record(hook: Webhook, attempt: int, at: str, outcome: str = "retrying") -> DeliveryRecord:
    return DeliveryRecord(
        webhook_id=hook.id,
        delivery_id="d1",
        event_id="e1",
        event_type="Knowledge Completed",
        attempt=attempt,
        outcome=outcome,
        status_class="5xx",
        duration_ms=12,
        at=at,
    )


class WebhookRepoContract:
    @pytest.fixture
    def hooks(self) -> WebhookRepo:
        raise NotImplementedError

    @pytest.fixture
    def kb_id(self) -> str:
        return f"kb-{uuid.uuid4()}"

    def test_an_update_never_brings_back_a_deleted_webhook(self, hooks: WebhookRepo, kb_id: str) -> None:
        read = make_hook(kb_id)
        hooks.put(read)
        hook = replace(read, description="changed")
        assert hooks.update(hook, read=read) == "written" and hooks.get(kb_id, hook.id) == hook
        assert hooks.delete(kb_id, hook.id)
        assert hooks.update(hook, read=hook) == "gone"  # a PUT that read it before the DELETE
        assert hooks.get(kb_id, hook.id) is None and hooks.list_kb(kb_id) == []

    def test_webhooks_round_trip_in_their_knowledge_base_oldest_first(
        self, hooks: WebhookRepo, kb_id: str
    ) -> None:
        second = make_hook(kb_id, "2026-01-02T00:00:00.000Z")
        first = make_hook(kb_id)
        hooks.put(second)
        hooks.put(first)
        assert hooks.get(kb_id, first.id) == first
        assert hooks.get(f"{kb_id}-other", first.id) is None
        assert [h.id for h in hooks.list_kb(kb_id)] == [first.id, second.id]
        first.enabled, first.event_types = False, ["Knowledge Failed", "Task Completed"]
        hooks.put(first)
        assert hooks.get(kb_id, first.id) == first

    def test_the_log_is_newest_first_and_goes_with_its_webhook(self, hooks: WebhookRepo, kb_id: str) -> None:
        hook, other = make_hook(kb_id), make_hook(kb_id)
        hooks.put(hook)
        hooks.put(other)
        for attempt, at in ((1, "2026-01-01T00:00:01.000Z"), (2, "2026-01-01T00:00:03.000Z")):
            hooks.log_delivery(kb_id, record(hook, attempt, at))
        hooks.log_delivery(kb_id, record(other, 1, "2026-01-01T00:00:02.000Z", "delivered"))
        assert [(r.attempt, r.outcome) for r in hooks.deliveries(kb_id, hook.id)] == [
            (2, "retrying"),
            (1, "retrying"),
        ]
        assert hooks.deliveries(kb_id, hook.id, limit=1)[0] == record(hook, 2, "2026-01-01T00:00:03.000Z")
        assert hooks.delete(kb_id, hook.id) is True
        assert hooks.delete(kb_id, hook.id) is False
        assert hooks.get(kb_id, hook.id) is None and hooks.deliveries(kb_id, hook.id) == []
        assert [h.id for h in hooks.list_kb(kb_id)] == [other.id]
        assert len(hooks.deliveries(kb_id, other.id)) == 1

    def test_a_try_is_claimed_once_and_taken_over_only_when_its_claim_is_stale(
        self, hooks: WebhookRepo, kb_id: str
    ) -> None:
        hook = make_hook(kb_id)
        hooks.put(hook)
        first = DeliveryTry(hook.id, "d1", parked=0, attempt=1)
        claim = hooks.claim_try(kb_id, first, 120)
        assert claim.state == "claimed" and claim.at
        assert hooks.claim_try(kb_id, first, 120) == replace(claim, state="busy")  # a redelivered copy
        # its holder died (the claim is older than the stale limit): taken over, keeping its first time
        assert hooks.claim_try(kb_id, first, 0) == claim
        # other tries of the delivery (the next attempt, a redriven letter) are claims of their own
        assert hooks.claim_try(kb_id, replace(first, attempt=2), 120).state == "claimed"
        assert hooks.claim_try(kb_id, replace(first, parked=1), 120).state == "claimed"
        hooks.finish_try(kb_id, first)
        assert hooks.claim_try(kb_id, first, 120) == replace(claim, state="finished")
        assert hooks.claim_try(kb_id, first, 0) == replace(claim, state="finished")
        assert hooks.deliveries(kb_id, hook.id) == []  # claims are not log entries

    def test_claims_go_with_their_webhook(self, hooks: WebhookRepo, kb_id: str) -> None:
        hook = make_hook(kb_id)
        hooks.put(hook)
        first = DeliveryTry(hook.id, "d1", parked=0, attempt=1)
        hooks.claim_try(kb_id, first, 120)
        hooks.finish_try(kb_id, first)
        assert hooks.delete(kb_id, hook.id)
        hooks.finish_try(kb_id, replace(first, attempt=2))  # never claimed: writes nothing
        hooks.put(hook)
        assert hooks.claim_try(kb_id, first, 120).state == "claimed"
        assert hooks.claim_try(kb_id, replace(first, attempt=2), 120).state == "claimed"

    def test_a_rotation_writes_the_secrets_only_while_the_secret_read_is_still_stored(
        self, hooks: WebhookRepo, kb_id: str
    ) -> None:
        hook = make_hook(kb_id)
        hooks.put(hook)
        older = [PreviousSecret("whsec_x", "2026-01-03T00:00:00.000Z")]
        # its settings are not the rotation's to write: a description that changes here is not stored
        rotated = replace(hook, secret="whsec_new", previous_secrets=older, description="-")
        assert hooks.rotate_secret(rotated, "whsec_x")
        assert hooks.get(kb_id, hook.id) == replace(rotated, description="d")
        late = replace(
            rotated, secret="whsec_late"
        )  # a rotation that read the webhook before the first wrote
        assert not hooks.rotate_secret(late, "whsec_x")
        assert hooks.list_kb(kb_id) == [replace(rotated, description="d")]
        three = [
            PreviousSecret("whsec_new", "2026-01-02T00:00:00.000Z"),
            *older,
            PreviousSecret("whsec_y", "2026-01-04T00:00:00.000Z"),
        ]
        again = replace(hook, secret="whsec_third", previous_secrets=three)
        assert hooks.rotate_secret(again, "whsec_new")
        assert hooks.get(kb_id, hook.id) == again  # the list as given, in its order
        dropped = replace(hook, secret="whsec_fourth", previous_secrets=[])
        assert hooks.rotate_secret(dropped, "whsec_third")
        assert hooks.get(kb_id, hook.id) == dropped
        assert hooks.delete(kb_id, hook.id)
        assert not hooks.rotate_secret(replace(dropped, secret="whsec_5"), "whsec_fourth")
        assert hooks.get(kb_id, hook.id) is None  # never brought back

    def test_an_update_writes_the_settings_and_keeps_the_secrets_a_rotation_stored(
        self, hooks: WebhookRepo, kb_id: str
    ) -> None:
        hook = make_hook(kb_id)
        hooks.put(hook)
        previous = [
            PreviousSecret("whsec_x", "2026-01-02T00:00:00.000Z"),
            PreviousSecret("whsec_w", "2026-01-05T00:00:00.000Z"),
        ]
        rotated = replace(hook, secret="whsec_new", previous_secrets=previous)
        assert hooks.rotate_secret(rotated, "whsec_x")
        read_before = replace(
            hook, description="changed", enabled=False, updated_at="2026-01-03T00:00:00.000Z"
        )
        assert hooks.update(read_before, read=hook) == "written"
        assert hooks.get(kb_id, hook.id) == replace(
            rotated, description="changed", enabled=False, updated_at="2026-01-03T00:00:00.000Z"
        )
        hooks.put(rotated)  # a put writes the secrets too
        assert hooks.get(kb_id, hook.id) == rotated

    def test_an_update_writes_nothing_when_another_change_of_settings_landed_since_its_read(
        self, hooks: WebhookRepo, kb_id: str
    ) -> None:
        """rev_events #1: two PUTs at once: the one that read before the other wrote is `changed` (its caller
        re-applies its own fields on a new read), never writing back the settings it read."""
        read = make_hook(kb_id)
        hooks.put(read)
        moved = replace(read, url="https://93.184.216.35/new", updated_at="2026-01-02T00:00:00.000Z")
        assert hooks.update(moved, read=read, resume=True) == "written"
        late = replace(read, description="renamed", updated_at="2026-01-03T00:00:00.000Z")
        assert hooks.update(late, read=read) == "changed"
        assert hooks.update(replace(late, enabled=False), read=read, resume=True) == "changed"
        assert hooks.get(kb_id, read.id) == moved

    def test_the_breakers_and_a_rotations_writes_since_the_read_are_no_change_of_settings(
        self, hooks: WebhookRepo, kb_id: str
    ) -> None:
        """The stage's writes (failures, pause, probe) and a rotation touch their own fields: a PUT that read
        before them is written, and leaves them as they are."""
        read = make_hook(kb_id)
        hooks.put(read)
        assert hooks.count_failure(kb_id, read.id, 1, 1000).paused
        assert hooks.claim_probe(kb_id, read.id, 1000, 1030)
        previous = [PreviousSecret("whsec_x", "2026-01-05T00:00:00.000Z")]
        assert hooks.rotate_secret(replace(read, secret="whsec_new", previous_secrets=previous), "whsec_x")
        renamed = replace(read, description="renamed", updated_at="2026-01-02T00:00:00.000Z")
        assert hooks.update(renamed, read=read) == "written"
        stored = hooks.get(kb_id, read.id)
        assert stored is not None and stored.paused_at
        assert stored == replace(
            renamed,
            secret="whsec_new",
            previous_secrets=previous,
            failures_in_a_row=1,
            paused_at=stored.paused_at,
            probe_at=1030,
            probes=1,
            failure_score=1,
        )
