"""The recount's write on the DynamoDB knowledge adapter (moto): the assertions the in-memory fakes pass in
tests/service."""

from __future__ import annotations

import pytest
from service.recount_write_contract import RecountWriteContract

from chalicelib.bootstrap import Services
from chalicelib.ports import KnowledgeRepo, TenantRepo


class TestDynamoRecountWrite(RecountWriteContract):
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
