"""Tenants: who a request's API key belongs to, and the tenant-wide settings."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from chalicelib.commands import TenantSettingsRequest
from chalicelib.domain.api_keys import ApiKey
from chalicelib.domain.errors import Unauthorized
from chalicelib.domain.ids import api_key_hash
from chalicelib.domain.process_config import normalise_engine_rules
from chalicelib.domain.request_limits import RequestWindow, TenantRateLimited, requests_per_second
from chalicelib.domain.types import Tenant
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, ServiceUnreachable

#: the limiter's clock (epoch seconds); tests move it to the next window
clock: Callable[[], float] = time.time


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


def count_request(deps: Dependencies, tenant: Tenant) -> None:
    """Counts one request of the tenant's keys in the current window; past the window's limit it is refused
    (429 tenant_rate_limited with the seconds to the next window). A store that does not answer lets the
    request through: a limiter must not take the API down with it."""
    rate = requests_per_second(tenant.requests_per_second, deps.settings.tenant_requests_per_second)
    if rate <= 0:
        return
    now = clock()
    window = RequestWindow.at(now, rate)
    try:
        admitted = deps.requests.count(tenant.id, window.start, window.limit, window.expires_at)
    except ServiceUnreachable as error:
        logger.warning(
            "request count failed: the request goes through uncounted",
            extra={"tenant_id": tenant.id, "error": type(error).__name__},
        )
        return
    if not admitted:
        raise TenantRateLimited(rate, window.retry_after(now))


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
