"""The tenants port's conditional storage add (`add_usage_within`), asserted on the in-memory fake
(tests/service) and on the DynamoDB adapter (tests/e2e, moto): the quota is checked in the add itself."""

from __future__ import annotations

import uuid

from chalicelib.domain.ids import api_key_hash
from chalicelib.domain.types import Tenant
from chalicelib.ports import TenantRepo


def _tenant(tenants: TenantRepo) -> Tenant:
    tenant = Tenant(str(uuid.uuid4()), "acme", api_key_hash(f"wk-{uuid.uuid4()}"))
    tenants.put(tenant)
    return tenant


def _used(tenants: TenantRepo, tenant_id: str) -> int:
    stored = tenants.get(tenant_id)
    assert stored is not None
    return stored.storage_used


class StorageQuotaContract:
    def test_an_add_within_the_quota_counts_only_what_fits(self, tenants: TenantRepo) -> None:
        tenant = _tenant(tenants)
        assert tenants.add_usage_within(tenant.id, 60, 60, 100)  # a count never written: 0
        assert _used(tenants, tenant.id) == 60
        assert not tenants.add_usage_within(tenant.id, 41, 41, 100)  # 60 + 41 > 100: nothing added
        assert _used(tenants, tenant.id) == 60
        assert tenants.add_usage_within(tenant.id, 40, 40, 100)  # exactly full
        assert not tenants.add_usage_within(tenant.id, 1, 1, 100)
        assert _used(tenants, tenant.id) == 100

    def test_no_quota_or_no_growth_always_adds(self, tenants: TenantRepo) -> None:
        tenant = _tenant(tenants)
        assert tenants.add_usage_within(tenant.id, 500, 500, 0)  # 0: no quota
        assert tenants.add_usage_within(tenant.id, -200, -200, 100)  # a give-back, even past the quota
        assert tenants.add_usage_within(tenant.id, 50, 0, 100)  # counts more, grows nothing (a legacy entry)
        assert _used(tenants, tenant.id) == 350

    def test_the_growth_is_checked_and_the_size_added(self, tenants: TenantRepo) -> None:
        tenant = _tenant(tenants)
        assert not tenants.add_usage_within(tenant.id, 10, 101, 100)  # more than the whole quota, even empty
        assert tenants.add_usage_within(tenant.id, 90, 10, 100)
        assert not tenants.add_usage_within(tenant.id, 5, 11, 100)  # 90 + 11 > 100
        assert _used(tenants, tenant.id) == 90

    def test_no_tenant_row_adds_nothing(self, tenants: TenantRepo) -> None:
        missing = str(uuid.uuid4())
        assert not tenants.add_usage_within(missing, 10, 10, 100)
        assert tenants.get(missing) is None
