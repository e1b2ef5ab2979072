"""The operators' HTTP operations, behind the operator key (`X-Operator-Key`) instead of a tenant's API key:
tenants, their API keys, quotas and storage recount, the dead-letter queues (app.py routes to these; registered in the
OpenAPI document like the others)."""

from __future__ import annotations

from typing import Any

from chalice import Response
from chalice.app import Request

from chalicelib import commands
from chalicelib.api.http import ok, ok_page, query
from chalicelib.api.registry import operation, present_request, validated_body
from chalicelib.commands import validate
from chalicelib.operations import admin, dlq
from chalicelib.ports import Dependencies


def _operator(deps: Dependencies, request: Request | None) -> None:
    headers: Any = present_request(request).headers or {}
    admin.authorize_operator(deps, str(headers.get("x-operator-key", "")))


@operation("Every tenant, by id (paged)", "admin", query=admin.TenantsQuery, auth=False, operator=True)
def admin_list_tenants(deps: Dependencies, request: Request | None) -> Response:
    _operator(deps, request)
    params = validate(admin.TenantsQuery, query(present_request(request)))
    found, next_cursor = admin.tenants_page(deps, params)
    return ok_page([admin.tenant_view(t) for t in found], next_cursor)


@operation(
    "Create a tenant and its first API key (the key is shown only in this reply)",
    "admin",
    body=commands.CreateTenantRequest,
    status=201,
    auth=False,
    operator=True,
)
def admin_create_tenant(deps: Dependencies, request: Request | None) -> Response:
    _operator(deps, request)
    tenant, key, secret = admin.create_tenant(
        deps, validated_body(deps, request, commands.CreateTenantRequest)
    )
    return ok({"tenant": admin.tenant_view(tenant), "key": admin.key_view(key), "api_key": secret}, 201)


@operation(
    "A tenant's API keys (never the keys themselves), paged",
    "admin",
    query=admin.KeysQuery,
    auth=False,
    operator=True,
)
def admin_list_keys(deps: Dependencies, request: Request | None, tenant_id: str) -> Response:
    _operator(deps, request)
    params = validate(admin.KeysQuery, query(present_request(request)))
    found, next_cursor = admin.keys_page(deps, tenant_id, params)
    return ok_page([admin.key_view(k) for k in found], next_cursor)


@operation(
    "Issue another API key for a tenant (shown only in this reply)",
    "admin",
    body=commands.IssueKeyRequest,
    status=201,
    auth=False,
    operator=True,
)
def admin_issue_key(deps: Dependencies, request: Request | None, tenant_id: str) -> Response:
    _operator(deps, request)
    key, secret = admin.issue_key(deps, tenant_id, validated_body(deps, request, commands.IssueKeyRequest))
    return ok({"key": admin.key_view(key), "api_key": secret}, 201)


@operation(
    "Set a tenant's storage (bytes) and document quotas (0 = none) and its request rate (0 = the deployment's)",
    "admin",
    body=commands.TenantQuotas,
    auth=False,
    operator=True,
)
def admin_set_quotas(deps: Dependencies, request: Request | None, tenant_id: str) -> Response:
    _operator(deps, request)
    body = validated_body(deps, request, commands.TenantQuotas)
    return ok(admin.tenant_view(admin.set_quotas(deps, tenant_id, body)))


@operation(
    "Recount a page of a tenant's documents: each counts what it stores (its file, parsed Markdown and "
    "images), the tenant's usage moved by the differences; send `next_cursor` back until it is null",
    "admin",
    query=admin.StorageRecountQuery,
    response=admin.StorageRecountAnswer,
    auth=False,
    operator=True,
)
def admin_storage_recount(deps: Dependencies, request: Request | None, tenant_id: str) -> Response:
    _operator(deps, request)
    params = validate(admin.StorageRecountQuery, query(present_request(request)))
    return ok(admin.storage_recount(deps, tenant_id, params))


@operation("Revoke an API key (refused at once)", "admin", auth=False, operator=True)
def admin_revoke_key(deps: Dependencies, request: Request | None, tenant_id: str, key_id: str) -> Response:
    _operator(deps, request)
    return ok(admin.key_view(admin.revoke_key(deps, tenant_id, key_id)))


@operation(
    "Messages in the dead-letter queues, with their rows' state; `queues` beside `data`: per queue the "
    "letters listed and whether that was all it holds (`complete`: false when the limit or the answer's "
    "size cut the listing on it or before it)",
    "admin",
    query=commands.DeadLetterQuery,
    auth=False,
    operator=True,
)
def admin_list_dead_letters(deps: Dependencies, request: Request | None) -> Response:
    _operator(deps, request)
    params = validate(commands.DeadLetterQuery, query(present_request(request)))
    letters, queues = dlq.dead_letter_listing(deps, params.queue, params.limit)
    response = ok(letters)
    # beside `data` (the list older clients read): per queue what was listed, and whether that was all of it
    response.body["queues"] = queues
    return response


@operation(
    "Redrive dead letters: failed rows start over at a new attempt; letters of deleted rows are dropped",
    "admin",
    body=commands.RedriveRequest,
    auth=False,
    operator=True,
)
def admin_redrive_dead_letters(deps: Dependencies, request: Request | None) -> Response:
    _operator(deps, request)
    body = validated_body(deps, request, commands.RedriveRequest)
    return ok(dlq.redrive(deps, body.queue, body.limit).as_dict())
