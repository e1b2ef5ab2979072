"""Rotating a webhook's secret (POST …/webhooks/{id}/rotate-secret) on the fakes: the new secret is shown
once, the old one still signs every delivery beside it until the expiry the rotation chose (decided at send
time, nothing sweeps it), and then only the new one does (several rotations:
test_webhook_rotation_every_old_secret.py); two rotations at once leave one winner whose
answer holds the stored secret, and a change of the webhook's settings racing a rotation keeps the new
secret. Through the Chalice test client: the route, its body's validation and its scope."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.bootstrap import Services
from chalicelib.commands import validate
from chalicelib.domain.api_keys import ApiKey, Scope
from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.domain.types import KnowledgeBase
from chalicelib.domain.webhooks import signature_header, verify
from chalicelib.operations import webhooks
from chalicelib.operations.webhooks import RotateWebhookSecretRequest, UpdateWebhookRequest

from .test_download_link_revocation import V1, _caller
from .test_webhooks import Receiver, drain_webhooks, hook_on

SIGNATURE = "X-Weknora-Signature"


def rotate(deps: Services, kb: KnowledgeBase, hook_id: str, **body: Any) -> dict[str, Any]:
    return webhooks.rotate_secret(
        deps, kb.tenant_id, kb.id, hook_id, validate(RotateWebhookSecretRequest, body)
    )


def expire_previous(deps: Services, kb: KnowledgeBase, hook_id: str) -> None:
    """The grace periods pass: the stored expiries are put a second in the past (nothing else changes)."""
    hook = deps.webhooks.get(kb.id, hook_id)
    assert hook is not None and hook.previous_secrets
    past = to_iso(datetime.now(UTC) - timedelta(seconds=1))
    deps.webhooks.put(
        replace(hook, previous_secrets=[replace(p, expires_at=past) for p in hook.previous_secrets])
    )


def one_delivery(deps: Services, kb: KnowledgeBase, receiver: Receiver, n: int) -> tuple[bytes, str]:
    """Announces one Knowledge Created (a manual document) and sends its delivery; its body and header."""
    from chalicelib.commands import ManualRequest
    from chalicelib.operations.create import create_manual

    create_manual(deps, kb.tenant_id, kb.id, ManualRequest(title=f"note {n}", content=f"# note {n}\n\ntext"))
    drain_webhooks(deps)
    _, body, headers = receiver.posts[-1]
    return body, headers[SIGNATURE]


def test_a_rotation_shows_the_new_secret_once_and_both_sign_until_the_old_one_expires(
    deps: Services, kb: KnowledgeBase
) -> None:
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    hook = hook_on(deps, kb, "Knowledge Created")
    hook_id, old = str(hook["id"]), str(hook["secret"])
    assert hook["previous_secrets_expire_at"] == []

    before = datetime.now(UTC)
    rotated = rotate(deps, kb, hook_id)
    new = str(rotated["secret"])
    assert new.startswith("whsec_") and new != old
    (expiry,) = rotated["previous_secrets_expire_at"]
    expires = from_iso(str(expiry))
    assert abs(expires - (before + timedelta(hours=24))) < timedelta(minutes=5)  # the default: 24 h
    shown = webhooks.get_webhook(deps, kb.tenant_id, kb.id, hook_id)
    assert shown["previous_secrets_expire_at"] == rotated["previous_secrets_expire_at"]
    assert not {"secret", "previous_secrets"} & set(shown) and old not in json.dumps(shown)
    (listed,) = webhooks.list_webhooks(deps, kb.tenant_id, kb.id)
    assert listed == shown

    body, header = one_delivery(deps, kb, receiver, 1)
    now = int(time.time())
    assert verify(new, header, body, now=now) and verify(old, header, body, now=now)
    assert not verify("whsec_other", header, body, now=now)
    stamp = header.split(",")[0]
    assert (
        header.split(",")[1:]
        == [  # the new secret's first, the previous one's last
            signature_header(new, int(stamp[2:]), body).split(",")[1],
            signature_header(old, int(stamp[2:]), body).split(",")[1],
        ]
    )

    expire_previous(deps, kb, hook_id)
    body, header = one_delivery(deps, kb, receiver, 2)
    now = int(time.time())
    assert verify(new, header, body, now=now) and not verify(old, header, body, now=now)
    assert header.count("v1=") == 1
    assert webhooks.get_webhook(deps, kb.tenant_id, kb.id, hook_id)["previous_secrets_expire_at"] == []


def test_a_rotation_with_no_grace_drops_the_old_secret_at_once(deps: Services, kb: KnowledgeBase) -> None:
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    hook = hook_on(deps, kb, "Knowledge Created")
    rotated = rotate(deps, kb, str(hook["id"]), previous_secret_expires_in_seconds=0)
    assert rotated["previous_secrets_expire_at"] == []
    body, header = one_delivery(deps, kb, receiver, 1)
    now = int(time.time())
    assert verify(str(rotated["secret"]), header, body, now=now)
    assert not verify(str(hook["secret"]), header, body, now=now)
    assert header.count("v1=") == 1


def test_of_two_rotations_at_once_one_wins_and_the_other_stores_nothing(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loser read the webhook before the winner wrote: its conditional write fails (409), so the row
    holds the winner's secret (the one its answer showed) and, as previous, the secret both of them read."""
    hook = hook_on(deps, kb)
    hook_id, original = str(hook["id"]), str(hook["secret"])
    write = deps.webhooks.rotate_secret
    winner: dict[str, Any] = {}

    def overtaken(webhook: Any, expected_secret: str) -> bool:
        if not winner:  # the other request reads, writes and answers in between
            monkeypatch.setattr(deps.webhooks, "rotate_secret", write)
            winner.update(rotate(deps, kb, hook_id))
        return write(webhook, expected_secret)

    monkeypatch.setattr(deps.webhooks, "rotate_secret", overtaken)
    with pytest.raises(Conflict) as lost:
        rotate(deps, kb, hook_id)
    assert lost.value.code == "webhook_rotation_conflict" and lost.value.status == 409
    stored = deps.webhooks.get(kb.id, hook_id)
    assert stored is not None
    assert stored.secret == winner["secret"]
    assert [p.secret for p in stored.previous_secrets] == [original]


def test_a_settings_change_racing_a_rotation_keeps_the_new_secret(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A PUT that read the webhook before a rotation writes its settings only: the rotated secrets stay."""
    hook = hook_on(deps, kb)
    hook_id = str(hook["id"])
    write = deps.webhooks.update
    rotated: dict[str, Any] = {}

    def overtaken(webhook: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(deps.webhooks, "update", write)
        rotated.update(rotate(deps, kb, hook_id))
        return write(webhook, **kwargs)

    monkeypatch.setattr(deps.webhooks, "update", overtaken)
    changed = webhooks.update_webhook(
        deps, kb.tenant_id, kb.id, hook_id, UpdateWebhookRequest(description="renamed")
    )
    assert changed["description"] == "renamed"
    stored = deps.webhooks.get(kb.id, hook_id)
    assert stored is not None and stored.description == "renamed"
    assert stored.secret == rotated["secret"]
    assert [p.secret for p in stored.previous_secrets] == [hook["secret"]]


def test_a_rotation_of_a_deleted_or_unknown_webhook_is_404(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(NotFound) as unknown:
        rotate(deps, kb, "no-such-webhook")
    assert unknown.value.code == "webhook_not_found"
    hook = hook_on(deps, kb)
    hook_id = str(hook["id"])
    write = deps.webhooks.rotate_secret

    def deleted_first(webhook: Any, expected_secret: str) -> bool:
        deps.webhooks.delete(kb.id, hook_id)  # a DELETE between the read and the write
        return write(webhook, expected_secret)

    monkeypatch.setattr(deps.webhooks, "rotate_secret", deleted_first)
    with pytest.raises(NotFound) as gone:
        rotate(deps, kb, hook_id)
    assert gone.value.code == "webhook_not_found" and deps.webhooks.get(kb.id, hook_id) is None


@pytest.mark.parametrize(
    "body",
    [
        {"previous_secret_expires_in_seconds": -1},
        {"previous_secret_expires_in_seconds": 7 * 86400 + 1},
        {"previous_secret_expires_in_seconds": "3600"},
        {"previous_secret_expires_in_seconds": True},
        {"previous_secret_expires_in_seconds": 1.5},
        {"previous_secret_expires_in_seconds": None},
    ],
)
def test_a_bad_grace_period_is_a_400_with_a_stable_code(body: dict[str, Any]) -> None:
    with pytest.raises(BadRequest) as refused:
        validate(RotateWebhookSecretRequest, body)
    assert refused.value.code == "invalid_previous_secret_expiry"


def test_the_grace_period_takes_0_to_7_days() -> None:
    assert validate(RotateWebhookSecretRequest, {}).previous_secret_expires_in_seconds == 86400
    for seconds in (0, 7 * 86400):
        body = {"previous_secret_expires_in_seconds": seconds}
        assert validate(RotateWebhookSecretRequest, body).previous_secret_expires_in_seconds == seconds


# ---------------------------------------------------------------- through the Chalice test client


def request(client: Client, key: str, method: str, path: str, body: object = None) -> Any:
    headers = {"X-API-Key": key, "Content-Type": "application/json"}
    data = json.dumps(body).encode() if body is not None else b""
    return client.http.request(method, f"{V1}{path}", headers=headers, body=data)


def test_rotate_through_the_api_then_deliveries_verify_with_both_secrets_then_only_the_new(
    deps: Services, client: Client
) -> None:
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    owner = _caller(deps, client, "owner")
    kb_id = str(owner.call("POST", "/knowledge-bases", {"name": "kb"})["id"])
    kb = deps.kbs.get(kb_id)
    assert kb is not None
    base = f"/knowledge-bases/{kb_id}/webhooks"
    hook = owner.call(
        "POST", base, {"url": "https://hooks.example.com/in", "event_types": ["Knowledge Created"]}
    )
    hook_id, old = str(hook["id"]), str(hook["secret"])

    answer = request(client, owner.key, "POST", f"{base}/{hook_id}/rotate-secret")  # no body: 24 h
    assert answer.status_code == 200, answer.json_body
    rotated = answer.json_body["data"]
    new = rotated["secret"]
    assert new != old and rotated["id"] == hook_id and len(rotated["previous_secrets_expire_at"]) == 1
    (listed,) = request(client, owner.key, "GET", base).json_body["data"]
    assert listed["previous_secrets_expire_at"] == rotated["previous_secrets_expire_at"]
    assert "secret" not in listed and old not in json.dumps(listed) and new not in json.dumps(listed)

    owner.call(
        "POST", f"/knowledge-bases/{kb_id}/knowledge/manual", {"title": "one", "content": "# one\n\nx"}
    )
    drain_webhooks(deps)
    _, body, headers = receiver.posts[-1]
    now = int(time.time())
    assert verify(new, headers[SIGNATURE], body, now=now) and verify(old, headers[SIGNATURE], body, now=now)

    expire_previous(deps, kb, hook_id)
    owner.call(
        "POST", f"/knowledge-bases/{kb_id}/knowledge/manual", {"title": "two", "content": "# two\n\ny"}
    )
    drain_webhooks(deps)
    _, body, headers = receiver.posts[-1]
    now = int(time.time())
    assert verify(new, headers[SIGNATURE], body, now=now)
    assert not verify(old, headers[SIGNATURE], body, now=now)
    shown = request(client, owner.key, "GET", f"{base}/{hook_id}").json_body["data"]
    assert shown["previous_secrets_expire_at"] == []


def test_the_route_validates_its_body_and_needs_the_scope_and_ownership_of_a_change(
    deps: Services, client: Client
) -> None:
    owner = _caller(deps, client, "owner")
    kb_id = str(owner.call("POST", "/knowledge-bases", {"name": "kb"})["id"])
    base = f"/knowledge-bases/{kb_id}/webhooks"
    hook = owner.call(
        "POST", base, {"url": "https://hooks.example.com/in", "event_types": ["Knowledge Created"]}
    )
    path = f"{base}/{hook['id']}/rotate-secret"

    for body, code in (
        ({"previous_secret_expires_in_seconds": 604801}, "invalid_previous_secret_expiry"),
        ({"previous_secret_expires_in_seconds": "soon"}, "invalid_previous_secret_expiry"),
        ({"grace": 10}, "invalid_body"),
    ):
        answer = request(client, owner.key, "POST", path, body)
        assert (answer.status_code, answer.json_body["error"]["code"]) == (400, code), answer.json_body

    owner_tenant = owner.tenant
    record, read_key = ApiKey.issue(owner_tenant.id, "reader", Scope.READ, None)
    deps.api_keys.put(record)
    answer = request(client, read_key, "POST", path)
    assert (answer.status_code, answer.json_body["error"]["code"]) == (403, "insufficient_scope")

    stranger = _caller(deps, client, "stranger")
    answer = request(client, stranger.key, "POST", path)
    assert answer.status_code == 404
    stored = deps.webhooks.get(kb_id, str(hook["id"]))
    assert stored is not None and stored.secret == hook["secret"] and not stored.previous_secrets
