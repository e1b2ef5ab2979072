"""Tenants: who a request's API key belongs to, and the tenant-wide settings."""

from __future__ import annotations

from typing import Any

from .commands import TenantSettingsRequest
from .domain.errors import Unauthorized
from .domain.process_config import normalise_engine_rules
from .domain.types import Tenant
from .ports import Dependencies


def authenticate(deps: Dependencies, api_key: str) -> Tenant:
    if not api_key:
        raise Unauthorized("missing X-API-Key header", code="missing_api_key")
    tenant = deps.tenants.by_api_key(api_key)
    if tenant is None:
        raise Unauthorized("invalid API key", code="invalid_api_key")
    return tenant


def settings_of(tenant: Tenant) -> dict[str, Any]:
    return {"parser_engine_rules": tenant.parser_engine_rules}


def put_settings(deps: Dependencies, tenant: Tenant, request: TenantSettingsRequest) -> dict[str, Any]:
    tenant.parser_engine_rules = normalise_engine_rules(request.parser_engine_rules)
    deps.tenants.put(tenant)
    return settings_of(tenant)
