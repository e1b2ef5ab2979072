"""The counted field write on the in-memory fakes (the same assertions run on DynamoDB in
tests/e2e/test_counted_update_contract_dynamo.py)."""

from __future__ import annotations

import pytest

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemoryTenantRepo

from .counted_update_contract import CountedUpdateContract


class TestMemoryCountedUpdate(CountedUpdateContract):
    @pytest.fixture
    def tenants(self) -> MemoryTenantRepo:
        return MemoryTenantRepo()

    @pytest.fixture
    def knowledge(self, tenants: MemoryTenantRepo) -> MemoryKnowledgeRepo:
        return MemoryKnowledgeRepo(tenants)  # the knowledge repo keeps the tenant's counts with its rows
