"""Every secret a rotation replaced keeps signing until its own expiry (the grace asked by the rotation
that replaced it), at most three of them: a client whose rotate call timed out and sent it again leaves the
secret its receiver has signing, where the header's last `v1` is the oldest secret, so a receiver still on
the README's snippet from before rotations (it keeps the last `v1`) goes on verifying. A grace of 0 stops
every old secret at once (a leaked one). The answer, GET and the list show `previous_secrets_expire_at`,
never the secrets."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from chalicelib.bootstrap import Services
from chalicelib.commands import validate
from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.types import KnowledgeBase
from chalicelib.domain.webhooks import signature, verify
from chalicelib.operations import webhooks
from chalicelib.operations.webhooks import RotateWebhookSecretRequest

from .test_webhooks import Receiver, drain_webhooks, hook_on

SIGNATURE = "X-Weknora-Signature"


def pre_rotation_verified(secret: str, signature_header: str, raw_body: bytes, tolerance: int = 300) -> bool:
    """The README's snippet from before rotations: a dict of the header's parts keeps the LAST `v1`."""
    parts = dict(p.split("=", 1) for p in signature_header.split(",") if "=" in p)
    stamp = parts.get("t", "")
    if not stamp.isdigit() or abs(time.time() - int(stamp)) > tolerance:
        return False
    expected = hmac.new(secret.encode(), f"{stamp}.".encode() + raw_body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts.get("v1", ""))


def rotate(deps: Services, kb: KnowledgeBase, hook_id: str, **body: Any) -> dict[str, Any]:
    return webhooks.rotate_secret(
        deps, kb.tenant_id, kb.id, hook_id, validate(RotateWebhookSecretRequest, body)
    )


def deliver_one(deps: Services, kb: KnowledgeBase, receiver: Receiver, n: int) -> tuple[bytes, str]:
    """Announces one Knowledge Created (a manual document) and sends its delivery; its body and header."""
    from chalicelib.commands import ManualRequest
    from chalicelib.operations.create import create_manual

    create_manual(deps, kb.tenant_id, kb.id, ManualRequest(title=f"note {n}", content=f"# note {n}\n\ntext"))
    drain_webhooks(deps)
    _, body, headers = receiver.posts[-1]
    return body, headers[SIGNATURE]


def signatures(header: str) -> list[str]:
    return [part[3:] for part in header.split(",") if part.startswith("v1=")]


def stamp(header: str) -> int:
    return int(header.split(",")[0][2:])


def test_a_rotation_sent_again_after_its_answer_was_lost_leaves_the_receivers_secret_signing(
    deps: Services, kb: KnowledgeBase
) -> None:
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    hook = hook_on(deps, kb, "Knowledge Created")
    hook_id, s0 = str(hook["id"]), str(hook["secret"])
    s1 = str(rotate(deps, kb, hook_id)["secret"])  # its answer never reached the client
    again = rotate(deps, kb, hook_id)  # the client's retry
    s2 = str(again["secret"])

    body, header = deliver_one(deps, kb, receiver, 1)
    now = int(time.time())
    # the receiver still has S0 and has never seen S1: both of its verifiers keep accepting
    assert verify(s0, header, body, now=now)
    assert pre_rotation_verified(s0, header, body)
    assert verify(s2, header, body, now=now) and verify(s1, header, body, now=now)
    assert not verify("whsec_other", header, body, now=now)
    # the current secret first, then the previous ones newest first: the oldest last
    assert signatures(header) == [signature(s, stamp(header), body) for s in (s2, s1, s0)]

    expiries = again["previous_secrets_expire_at"]
    assert isinstance(expiries, list) and len(expiries) == 2
    shown = webhooks.get_webhook(deps, kb.tenant_id, kb.id, hook_id)
    assert shown["previous_secrets_expire_at"] == expiries
    assert "previous_secret_expires_at" not in shown
    assert not any(s in json.dumps(shown) for s in (s0, s1, s2))
    (listed,) = webhooks.list_webhooks(deps, kb.tenant_id, kb.id)
    assert listed == shown


def test_a_rotation_with_no_grace_stops_every_old_secret_now(deps: Services, kb: KnowledgeBase) -> None:
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    hook = hook_on(deps, kb, "Knowledge Created")
    hook_id, s0 = str(hook["id"]), str(hook["secret"])
    s1 = str(rotate(deps, kb, hook_id, previous_secret_expires_in_seconds=7 * 86400)["secret"])
    s2 = str(rotate(deps, kb, hook_id)["secret"])
    leaked = rotate(deps, kb, hook_id, previous_secret_expires_in_seconds=0)
    assert leaked["previous_secrets_expire_at"] == []
    stored = deps.webhooks.get(kb.id, hook_id)
    assert stored is not None and stored.previous_secrets == []

    body, header = deliver_one(deps, kb, receiver, 1)
    now = int(time.time())
    assert signatures(header) == [signature(str(leaked["secret"]), stamp(header), body)]
    assert not any(verify(s, header, body, now=now) for s in (s0, s1, s2))
    shown = webhooks.get_webhook(deps, kb.tenant_id, kb.id, hook_id)
    assert shown["previous_secrets_expire_at"] == []


def test_a_fourth_rotation_within_the_grace_periods_drops_the_previous_secret_that_expires_first(
    deps: Services, kb: KnowledgeBase
) -> None:
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    hook = hook_on(deps, kb, "Knowledge Created")
    hook_id, s0 = str(hook["id"]), str(hook["secret"])
    secrets = [s0]
    for grace in (3600, 7200, 600, 86400):  # S0 for 1 h, S1 for 2 h, S2 for 10 min, S3 for 24 h
        answer = rotate(deps, kb, hook_id, previous_secret_expires_in_seconds=grace)
        secrets.append(str(answer["secret"]))
    s0, s1, s2, s3, s4 = secrets
    expiries = [from_iso(at) for at in answer["previous_secrets_expire_at"]]
    assert len(expiries) == 3  # S3, S1, S0: S2 expired first of the four, so it went
    assert expiries[0] - expiries[1] > timedelta(hours=21) and expiries[1] - expiries[2] > timedelta(
        minutes=50
    )

    body, header = deliver_one(deps, kb, receiver, 1)
    now = int(time.time())
    assert signatures(header) == [signature(s, stamp(header), body) for s in (s4, s3, s1, s0)]
    assert not verify(s2, header, body, now=now) and pre_rotation_verified(s0, header, body)

    # four rotations with the same grace: the first replaced (the oldest) expires first, so it goes
    s5 = str(rotate(deps, kb, hook_id, previous_secret_expires_in_seconds=0)["secret"])
    same = [str(rotate(deps, kb, hook_id)["secret"]) for _ in range(4)]
    body, header = deliver_one(deps, kb, receiver, 2)
    assert signatures(header) == [
        signature(s, stamp(header), body) for s in (same[3], same[2], same[1], same[0])
    ]
    assert not verify(s5, header, body, now=int(time.time()))


def test_each_previous_secret_signs_until_its_own_expiry_and_the_next_rotation_drops_the_expired(
    deps: Services, kb: KnowledgeBase
) -> None:
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    hook = hook_on(deps, kb, "Knowledge Created")
    hook_id, s0 = str(hook["id"]), str(hook["secret"])
    s1 = str(rotate(deps, kb, hook_id, previous_secret_expires_in_seconds=7 * 86400)["secret"])
    second = rotate(deps, kb, hook_id, previous_secret_expires_in_seconds=60)
    s2 = str(second["secret"])
    s1_until, s0_until = (from_iso(at) for at in second["previous_secrets_expire_at"])
    assert s0_until - s1_until > timedelta(days=6)  # each keeps the grace of the rotation that replaced it

    # S1's minute passes (its stored expiry put a second in the past); S0's week has not
    stored = deps.webhooks.get(kb.id, hook_id)
    assert stored is not None and [p.secret for p in stored.previous_secrets] == [s1, s0]
    past = to_iso(datetime.now(UTC) - timedelta(seconds=1))
    newest, oldest = stored.previous_secrets
    deps.webhooks.put(replace(stored, previous_secrets=[replace(newest, expires_at=past), oldest]))

    body, header = deliver_one(deps, kb, receiver, 1)
    now = int(time.time())
    assert signatures(header) == [signature(s, stamp(header), body) for s in (s2, s0)]
    assert not verify(s1, header, body, now=now) and pre_rotation_verified(s0, header, body)
    shown = webhooks.get_webhook(deps, kb.tenant_id, kb.id, hook_id)
    assert shown["previous_secrets_expire_at"] == [oldest.expires_at]

    rotate(deps, kb, hook_id)
    stored = deps.webhooks.get(kb.id, hook_id)
    assert stored is not None and [p.secret for p in stored.previous_secrets] == [s2, s0]  # S1 dropped
