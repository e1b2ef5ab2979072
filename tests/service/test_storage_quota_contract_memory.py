"""The conditional storage add on the in-memory tenants fake (the same assertions run on DynamoDB in
tests/e2e/test_storage_quota_contract_dynamo.py)."""

from __future__ import annotations

import pytest

from chalicelib.adapters.memory import MemoryTenantRepo

from .storage_quota_contract import StorageQuotaContract


class TestMemoryStorageQuota(StorageQuotaContract):
    @pytest.fixture
    def tenants(self) -> MemoryTenantRepo:
        return MemoryTenantRepo()
