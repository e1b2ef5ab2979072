"""The conditional storage add on the DynamoDB tenants adapter (moto): one UpdateItem whose
ConditionExpression holds the quota, the assertions the in-memory fake passes in tests/service."""

from __future__ import annotations

import pytest
from service.storage_quota_contract import StorageQuotaContract

from chalicelib.bootstrap import Services
from chalicelib.ports import TenantRepo


class TestDynamoStorageQuota(StorageQuotaContract):
    @pytest.fixture
    def tenants(self, module_services: Services) -> TenantRepo:
        from chalicelib.adapters.dynamo.tenants import DynamoTenantRepo

        assert isinstance(module_services.tenants, DynamoTenantRepo)
        return module_services.tenants
