"""The counted field write on the DynamoDB knowledge adapter (moto): the row's update and the tenant's
usage add in one TransactWriteItems, the assertions the in-memory fakes pass in tests/service."""

from __future__ import annotations

import pytest
from service.counted_update_contract import CountedUpdateContract

from chalicelib.bootstrap import Services
from chalicelib.ports import KnowledgeRepo, TenantRepo


class TestDynamoCountedUpdate(CountedUpdateContract):
    @pytest.fixture
    def tenants(self, module_services: Services) -> TenantRepo:
        from chalicelib.adapters.dynamo.tenants import DynamoTenantRepo

        assert isinstance(module_services.tenants, DynamoTenantRepo)
        return module_services.tenants

    @pytest.fixture
    def knowledge(self, module_services: Services) -> KnowledgeRepo:
        from chalicelib.adapters.dynamo.knowledge import DynamoKnowledgeRepo

        assert isinstance(module_services.knowledge, DynamoKnowledgeRepo)
        return module_services.knowledge
