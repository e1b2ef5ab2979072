"""The routes of the tenant a knowledge base is shared with that act on the sharing tenants: block an owner
tenant (its shares removed, its next ones refused), list the blocked ones, unblock one. Like declining a
share, they need an `admin` key on the whole tenant."""

from __future__ import annotations

from chalice import Response
from chalice.app import Request

from chalicelib.api.http import ok
from chalicelib.api.registry import caller_tenant, operation, validated_body
from chalicelib.commands import BlockTenantRequest
from chalicelib.domain.api_keys import Scope
from chalicelib.operations import shares
from chalicelib.ports import Dependencies

#: a key limited to some knowledge bases: these act on the tenant as a whole
LIMITED_KEY = (
    403,
    "the API key is limited to some knowledge bases (kb_limited_key), or its scope is below admin "
    "(insufficient_scope)",
)


@operation(
    "Block an owner tenant: remove its knowledge bases' shares with this tenant and refuse its next ones",
    "knowledge-bases",
    body=BlockTenantRequest,
    scope=Scope.ADMIN,
    errors=(
        (400, "the tenant itself (block_self), or not a tenant id (invalid_tenant_id)"),
        (404, "no such tenant (tenant_not_found)"),
        (
            409,
            f"the tenant blocks its limit of tenants (block_limit_reached, {shares.MAX_BLOCKED_TENANTS:,})",
        ),
        LIMITED_KEY,
    ),
)
def block_tenant(deps: Dependencies, request: Request | None) -> Response:
    tenant = caller_tenant(deps, request)
    body = validated_body(deps, request, BlockTenantRequest)
    return ok(shares.block_tenant(deps, tenant.id, body))


@operation(
    f"The owner tenants this tenant blocks (at most {shares.MAX_BLOCKED_TENANTS:,}, in one answer)",
    "knowledge-bases",
    scope=Scope.ADMIN,
    errors=(LIMITED_KEY,),
)
def list_blocked_tenants(deps: Dependencies, request: Request | None) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(shares.blocked_tenants(deps, tenant.id))


@operation(
    "Unblock an owner tenant: it may share with this tenant again",
    "knowledge-bases",
    scope=Scope.ADMIN,
    errors=((404, "the tenant is not blocked (block_not_found)"), LIMITED_KEY),
)
def unblock_tenant(deps: Dependencies, request: Request | None, tenant_id: str) -> Response:
    tenant = caller_tenant(deps, request)
    return ok(shares.unblock_tenant(deps, tenant.id, tenant_id))
