"""The webhook HTTP operations (app.py routes to these; registered in the OpenAPI document like the
others). Managing a knowledge base's webhooks needs a `write` key, reading them and their log too: a
webhook's URL may carry the receiver's own credentials."""

from __future__ import annotations

from chalice import Response
from chalice.app import Request

from chalicelib.api.http import ok
from chalicelib.api.registry import caller_tenant, operation, validated_body
from chalicelib.domain.api_keys import Scope
from chalicelib.operations import webhooks
from chalicelib.operations.webhooks import (
    CreateWebhookRequest,
    RotateWebhookSecretRequest,
    UpdateWebhookRequest,
)
from chalicelib.ports import Dependencies


@operation(
    "Create a webhook: the URL and the event types it receives (the signing secret is shown only here)",
    "webhooks",
    body=CreateWebhookRequest,
    status=201,
)
def create_webhook(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, CreateWebhookRequest)
    return ok(webhooks.create_webhook(deps, tenant.id, kb_id, body), 201)


@operation("The knowledge base's webhooks (without their secrets)", "webhooks", scope=Scope.WRITE)
def list_webhooks(deps: Dependencies, request: Request | None, kb_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(webhooks.list_webhooks(deps, tenant.id, kb_id))


@operation("One webhook (without its secret)", "webhooks", scope=Scope.WRITE)
def get_webhook(deps: Dependencies, request: Request | None, kb_id: str, webhook_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(webhooks.get_webhook(deps, tenant.id, kb_id, webhook_id))


@operation(
    "Change a webhook's URL, event types, description or enabled", "webhooks", body=UpdateWebhookRequest
)
def update_webhook(deps: Dependencies, request: Request | None, kb_id: str, webhook_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, UpdateWebhookRequest)
    return ok(webhooks.update_webhook(deps, tenant.id, kb_id, webhook_id, body))


@operation(
    "Rotate a webhook's signing secret: the new one is shown only here; the old one still signs deliveries "
    "beside it for `previous_secret_expires_in_seconds` (by default 24 h), and those earlier rotations "
    "replaced each until its own expiry (`previous_secrets_expire_at`; at most 3); 0 stops every old one now",
    "webhooks",
    body=RotateWebhookSecretRequest,
)
def rotate_webhook_secret(
    deps: Dependencies, request: Request | None, kb_id: str, webhook_id: str
) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, RotateWebhookSecretRequest)
    return ok(webhooks.rotate_secret(deps, tenant.id, kb_id, webhook_id, body))


@operation("Delete a webhook (its pending deliveries are dropped)", "webhooks")
def delete_webhook(deps: Dependencies, request: Request | None, kb_id: str, webhook_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    webhooks.delete_webhook(deps, tenant.id, kb_id, webhook_id)
    return ok({"id": webhook_id, "deleted": True})


@operation(
    "A webhook's latest delivery tries, newest first: time, event type, attempt, outcome, status-code class",
    "webhooks",
    scope=Scope.WRITE,
)
def list_webhook_deliveries(
    deps: Dependencies, request: Request | None, kb_id: str, webhook_id: str
) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(webhooks.list_deliveries(deps, tenant.id, kb_id, webhook_id))
