"""A knowledge base's webhooks: create (the secret is shown once), list, read, change, rotate the secret
(the new one shown once, the old ones still signing each for its grace period), delete, and the log of their
deliveries. Only the knowledge base's owner manages them (a tenant it is shared with gets 404),
and every URL passes the same SSRF check as a URL import, at creation and on every change (400
`ssrf_blocked` / `host_unresolved`); the delivery checks it again (stages/webhooks.py)."""

from __future__ import annotations

import uuid
from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, Field

from chalicelib.commands import Body, code
from chalicelib.domain.clock import now_iso
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.domain.events import EVENT_TYPES
from chalicelib.domain.types import KnowledgeBase
from chalicelib.domain.webhooks import (
    PREVIOUS_SECRET_MAX_SECONDS,
    PREVIOUS_SECRET_SECONDS,
    new_secret,
    rotated_previous,
    still_signing,
)
from chalicelib.ports import DeliveryRecord, Dependencies, Webhook
from chalicelib.services.ownership import require_kb
from chalicelib.services.webhook_messages import delivery_lane

MAX_WEBHOOKS_PER_KB = 20
#: writes of one PUT, each on a fresh read, while other PUTs of the webhook land between read and write
UPDATE_TRIES = 3


# ---------------------------------------------------------------- the request bodies


def _event_types(value: list[str]) -> list[str]:
    unknown = [t for t in value if t not in EVENT_TYPES]
    if unknown:
        raise ValueError(f"unknown event types {unknown}; one of {', '.join(EVENT_TYPES)}")
    return list(dict.fromkeys(value))


EventTypes = Annotated[
    # the schema lists the types (a client sees them); the validator's message names them too
    list[Annotated[str, Field(max_length=64, json_schema_extra={"enum": list(EVENT_TYPES)})]],
    Field(min_length=1, max_length=16),
    AfterValidator(_event_types),
]


class CreateWebhookRequest(Body):
    url: str = code("invalid_url", min_length=1, max_length=2048)
    event_types: EventTypes = code("invalid_event_types")
    description: str = code("invalid_description", default="", max_length=500)
    enabled: bool = code("invalid_body", default=True)


class UpdateWebhookRequest(Body):
    url: str | None = code("invalid_url", default=None, min_length=1, max_length=2048)
    event_types: EventTypes | None = code("invalid_event_types", default=None)
    description: str | None = code("invalid_description", default=None, max_length=500)
    enabled: bool | None = code("invalid_body", default=None)


class RotateWebhookSecretRequest(Body):
    #: how long the secret being replaced still signs deliveries beside the new one (0: no old secret
    #: signs any more, the ones earlier rotations replaced included)
    previous_secret_expires_in_seconds: int = code(
        "invalid_previous_secret_expiry",
        default=PREVIOUS_SECRET_SECONDS,
        ge=0,
        le=PREVIOUS_SECRET_MAX_SECONDS,
    )


def _own_kb(deps: Dependencies, tenant_id: str, kb_id: str) -> KnowledgeBase:
    kb = require_kb(deps, tenant_id, kb_id)
    if kb.tenant_id != tenant_id:  # shared with this tenant: its webhooks are the owner's business
        raise NotFound(f"knowledge base {kb_id} not found", code="kb_not_found")
    return kb


def _require(deps: Dependencies, tenant_id: str, kb_id: str, webhook_id: str) -> Webhook:
    kb = _own_kb(deps, tenant_id, kb_id)
    hook = deps.webhooks.get(kb.id, webhook_id)
    if hook is None or hook.tenant_id != tenant_id:
        raise NotFound(f"webhook {webhook_id} not found", code="webhook_not_found")
    return hook


def present(hook: Webhook, *, with_secret: bool = False) -> dict[str, Any]:
    shown: dict[str, Any] = {
        "id": hook.id,
        "kb_id": hook.kb_id,
        "url": hook.url,
        "event_types": list(hook.event_types),
        "enabled": hook.enabled,
        "description": hook.description,
        "created_at": hook.created_at,
        "updated_at": hook.updated_at,
        # when each secret a rotation replaced stops signing deliveries (newest first; never the secrets)
        "previous_secrets_expire_at": [p.expires_at for p in still_signing(hook.previous_secrets, now_iso())],
        # the delivery breaker (stages/webhooks.py): `paused` after tries failed in a row, until a probe lands
        # or a PUT changes the URL or switches it on
        "delivery_status": "paused" if hook.paused_at else "active",
        "paused_at": hook.paused_at or None,
        "failures_in_a_row": hook.failures_in_a_row,
        # the delivery lane (stages/webhooks.py): `slow` while the score of its failed or slow tries (one
        # less per delivered try) is at or above services/webhook_messages.DEGRADED_SCORE
        "delivery_lane": delivery_lane(hook.failure_score),
        "failure_score": hook.failure_score,
    }
    if with_secret:
        shown["secret"] = hook.secret
    return shown


def create_webhook(
    deps: Dependencies, tenant_id: str, kb_id: str, request: CreateWebhookRequest
) -> dict[str, Any]:
    kb = _own_kb(deps, tenant_id, kb_id)
    deps.urls.check(request.url)
    now = now_iso()
    hook = Webhook(
        id=str(uuid.uuid4()),
        tenant_id=tenant_id,
        kb_id=kb.id,
        url=request.url,
        event_types=list(request.event_types),
        secret=new_secret(),
        enabled=request.enabled,
        description=request.description,
        created_at=now,
        updated_at=now,
    )
    if not deps.webhooks.create(hook, MAX_WEBHOOKS_PER_KB):  # the cap is the write's condition: no race
        raise BadRequest(
            f"a knowledge base has at most {MAX_WEBHOOKS_PER_KB} webhooks", code="too_many_webhooks"
        )
    return present(hook, with_secret=True)


def list_webhooks(deps: Dependencies, tenant_id: str, kb_id: str) -> list[dict[str, Any]]:
    kb = _own_kb(deps, tenant_id, kb_id)
    return [present(h) for h in deps.webhooks.list_kb(kb.id) if h.tenant_id == tenant_id]


def get_webhook(deps: Dependencies, tenant_id: str, kb_id: str, webhook_id: str) -> dict[str, Any]:
    return present(_require(deps, tenant_id, kb_id, webhook_id))


def update_webhook(
    deps: Dependencies, tenant_id: str, kb_id: str, webhook_id: str, request: UpdateWebhookRequest
) -> dict[str, Any]:
    """Writes only the request's fields, on the webhook as read; when another PUT landed between the read
    and the write (the write's condition), reads again and re-applies them, so neither PUT undoes the
    other's fields; 409 `webhook_write_conflict` when others keep landing."""
    read = _require(deps, tenant_id, kb_id, webhook_id)
    if request.url is not None:
        deps.urls.check(request.url)
    for _ in range(UPDATE_TRIES):
        hook, resume = _changed(read, request)
        written = deps.webhooks.update(hook, read=read, resume=resume)
        if written == "written":
            if resume:
                hook = replace(hook, failures_in_a_row=0, paused_at="", probe_at=0, probes=0, failure_score=0)
            return present(hook)
        if written == "gone":  # deleted while this request checked its URL
            raise NotFound(f"webhook {webhook_id} not found", code="webhook_not_found")
        read = _require(deps, tenant_id, kb_id, webhook_id)
    raise Conflict(
        f"webhook {webhook_id} was changed by other requests while this one wrote it; send it again",
        code="webhook_write_conflict",
    )


def _changed(read: Webhook, request: UpdateWebhookRequest) -> tuple[Webhook, bool]:
    """The webhook as read with the request's fields set, and whether the write resumes it: a new URL, or
    switching it back on, is the tenant saying the receiver is fixed: the breaker starts afresh
    (stages/webhooks.py), so new deliveries go to it at once rather than at the next probe."""
    resume = (request.url is not None and request.url != read.url) or bool(
        request.enabled and not read.enabled
    )
    hook = replace(read, event_types=list(read.event_types), updated_at=now_iso())
    if request.url is not None:
        hook.url = request.url
    if request.event_types is not None:
        hook.event_types = list(request.event_types)
    if request.description is not None:
        hook.description = request.description
    if request.enabled is not None:
        hook.enabled = request.enabled
    return hook, resume


def rotate_secret(
    deps: Dependencies, tenant_id: str, kb_id: str, webhook_id: str, request: RotateWebhookSecretRequest
) -> dict[str, Any]:
    """A new secret, shown only in this answer. The one it replaces signs deliveries beside it until the
    expiry this request asks, and each one earlier rotations replaced until its own (at most three;
    domain.webhooks.rotated_previous): a rotation sent again after its answer was lost leaves the secret
    the receiver has signing. A grace of 0 stops every old secret now. The stage reads the expiries at
    send time: nothing sweeps them. The write holds only while the secret read is still stored, so of two
    rotations at once one wins and the other answers 409 without its secret ever signing anything."""
    hook = _require(deps, tenant_id, kb_id, webhook_id)
    grace = request.previous_secret_expires_in_seconds
    rotated = replace(
        hook,
        secret=new_secret(),
        previous_secrets=rotated_previous(hook.secret, hook.previous_secrets, grace, datetime.now(UTC)),
    )
    if not deps.webhooks.rotate_secret(rotated, hook.secret):
        _require(deps, tenant_id, kb_id, webhook_id)  # deleted meanwhile: 404
        raise Conflict(
            f"webhook {webhook_id}'s secret was rotated by another request at the same time; that "
            "request's answer holds the new secret (read the webhook, and rotate again if you need one)",
            code="webhook_rotation_conflict",
        )
    return present(rotated, with_secret=True)


def delete_webhook(deps: Dependencies, tenant_id: str, kb_id: str, webhook_id: str) -> None:
    hook = _require(deps, tenant_id, kb_id, webhook_id)
    deps.webhooks.delete(hook.kb_id, hook.id)


def _present_delivery(record: DeliveryRecord) -> dict[str, Any]:
    """The log entry as the API shows it: every field but the webhook's id (in the path) and `extra`."""
    return {name: value for name, value in asdict(record).items() if name not in ("webhook_id", "extra")}


def list_deliveries(
    deps: Dependencies, tenant_id: str, kb_id: str, webhook_id: str, limit: int = 50
) -> list[dict[str, Any]]:
    hook = _require(deps, tenant_id, kb_id, webhook_id)
    return [_present_delivery(r) for r in deps.webhooks.deliveries(hook.kb_id, hook.id, limit)]
