"""Tenant and API-key administration (chalicelib/operations/admin.py) and what authentication makes of it: several
keys per tenant, stored hashed, a revoked key refused at once, the primary key of an existing tenant
listed and revocable like an issued one, and the operator key guarding it all."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateTenantRequest, IssueKeyRequest
from chalicelib.domain.errors import AppError
from chalicelib.domain.ids import api_key_hash
from chalicelib.operations.tenants import ensure_local_tenant


def code_of(call: object, *args: object) -> tuple[int, str]:
    with pytest.raises(AppError) as caught:
        call(*args)  # type: ignore[operator]
    return caught.value.status, caught.value.code


def test_a_created_tenant_authenticates_with_its_key_which_is_stored_only_hashed(deps: Services) -> None:
    from chalicelib.operations import admin, tenants

    tenant, key, secret = admin.create_tenant(deps, CreateTenantRequest(name="acme"))
    assert tenants.authenticate(deps, secret).id == tenant.id
    record = deps.api_keys.get(api_key_hash(secret))
    assert record is not None and record.key_hash == api_key_hash(secret) and secret not in repr(record)
    assert key.id.startswith("key_") and admin.key_view(key)["status"] == "active"
    assert [t.id for t in deps.tenants.page("", 1000)] == [tenant.id]


def test_several_keys_and_a_revoked_one_answers_401_at_once(deps: Services) -> None:
    from chalicelib.operations import admin, tenants

    tenant, first, first_secret = admin.create_tenant(deps, CreateTenantRequest(name="acme"))
    second, second_secret = admin.issue_key(deps, tenant.id, IssueKeyRequest(name="ci"))
    assert tenants.authenticate(deps, second_secret).id == tenant.id
    assert {k.id for k in admin.list_keys(deps, tenant.id)} == {first.id, second.id}
    admin.revoke_key(deps, tenant.id, first.id)
    assert code_of(tenants.authenticate, deps, first_secret) == (401, "revoked_api_key")
    assert tenants.authenticate(deps, second_secret).id == tenant.id  # the other key still works
    again = admin.revoke_key(deps, tenant.id, first.id)  # idempotent
    assert again.revoked
    assert {k.id: k.revoked for k in admin.list_keys(deps, tenant.id)} == {first.id: True, second.id: False}


def test_the_local_tenants_primary_key_is_listed_and_revocable(deps: Services) -> None:
    from chalicelib.operations import admin, tenants

    local = ensure_local_tenant(deps, "local-dev-key")
    (primary,) = admin.list_keys(deps, local.id)
    assert primary.key_hash == api_key_hash("local-dev-key") and primary.name == "primary"
    assert tenants.authenticate(deps, "local-dev-key").id == local.id
    admin.revoke_key(deps, local.id, primary.id)
    assert code_of(tenants.authenticate, deps, "local-dev-key") == (401, "revoked_api_key")
    ensure_local_tenant(deps, "local-dev-key")  # a restart of `make run` does not un-revoke it
    assert code_of(tenants.authenticate, deps, "local-dev-key") == (401, "revoked_api_key")


def test_unknown_tenants_and_keys_are_404(deps: Services) -> None:
    from chalicelib.operations import admin

    tenant, _, _ = admin.create_tenant(deps, CreateTenantRequest(name="acme"))
    assert code_of(admin.list_keys, deps, "nope") == (404, "tenant_not_found")
    assert code_of(admin.issue_key, deps, "nope", IssueKeyRequest()) == (404, "tenant_not_found")
    assert code_of(admin.revoke_key, deps, tenant.id, "key_0000") == (404, "api_key_not_found")


def test_the_operator_key_guards_the_admin_operations(deps: Services) -> None:
    from chalicelib.operations import admin

    assert code_of(admin.authorize_operator, deps, "anything") == (403, "admin_disabled")
    deps.settings = replace(deps.settings, operator_key="op-secret")
    assert code_of(admin.authorize_operator, deps, "") == (401, "missing_operator_key")
    assert code_of(admin.authorize_operator, deps, "op-wrong") == (403, "invalid_operator_key")
    admin.authorize_operator(deps, "op-secret")
