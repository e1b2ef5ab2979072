"""Tenants: who a request's API key belongs to, and the tenant-wide settings."""

from __future__ import annotations

import uuid
from typing import Any

from chalicelib.commands import TenantSettingsRequest
from chalicelib.domain.api_keys import ApiKey
from chalicelib.domain.errors import Unauthorized
from chalicelib.domain.ids import api_key_hash
from chalicelib.domain.process_config import normalise_engine_rules
from chalicelib.domain.types import Tenant
from chalicelib.ports import Dependencies


def authenticate(deps: Dependencies, api_key: str) -> Tenant:
    return authenticate_key(deps, api_key)[0]


def authenticate_key(deps: Dependencies, api_key: str) -> tuple[Tenant, ApiKey | None]:
    """The key's tenant and its record (None for a tenant's primary key from before records: an admin key
    limited to no knowledge base)."""
    if not api_key:
        raise Unauthorized("missing X-API-Key header", code="missing_api_key")
    # An issued key has a record (read strongly consistent, so a revoke holds at once); a tenant's primary
    # key from before records existed is found through the tenant's own api_key_hash.
    record = deps.api_keys.get(api_key_hash(api_key))
    if record is not None:
        if record.revoked:
            raise Unauthorized("the API key was revoked", code="revoked_api_key")
        tenant = deps.tenants.get(record.tenant_id)
        if tenant is None:
            raise Unauthorized("invalid API key", code="invalid_api_key")
        return tenant, record
    tenant = deps.tenants.by_api_key(api_key)
    if tenant is None:
        raise Unauthorized("invalid API key", code="invalid_api_key")
    return tenant, None


def settings_of(tenant: Tenant) -> dict[str, Any]:
    return {"parser_engine_rules": tenant.parser_engine_rules}


def put_settings(deps: Dependencies, tenant: Tenant, request: TenantSettingsRequest) -> dict[str, Any]:
    tenant.parser_engine_rules = normalise_engine_rules(request.parser_engine_rules)
    deps.tenants.set_parser_engine_rules(tenant.id, tenant.parser_engine_rules)
    return settings_of(tenant)


#: the tenant `make run` creates, whose key it prints
LOCAL_TENANT_ID = "local"


def ensure_local_tenant(deps: Dependencies, api_key: str) -> Tenant:
    """The default local tenant whose key `make run` prints."""
    tenant = deps.tenants.get(LOCAL_TENANT_ID)
    if tenant is None:
        tenant = Tenant(LOCAL_TENANT_ID, "local", api_key_hash(api_key))
        deps.tenants.put(tenant)
    elif tenant.api_key_hash != api_key_hash(api_key):
        tenant.api_key_hash = api_key_hash(api_key)  # a new key; the tenant's settings stay
        deps.tenants.put(tenant)
    return tenant


def create_tenant_with_key(deps: Dependencies, name: str, api_key: str | None = None) -> tuple[Tenant, str]:
    """A tenant whose key the caller may choose (local runs, tests); the API's way is `admin.create_tenant`."""
    key = api_key or f"wk-{uuid.uuid4().hex}"
    tenant = Tenant(str(uuid.uuid4()), name, api_key_hash(key))
    deps.tenants.put(tenant)
    return tenant, key
