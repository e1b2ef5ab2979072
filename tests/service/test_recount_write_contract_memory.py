"""The recount's write on the in-memory fakes (the same assertions run on DynamoDB in
tests/e2e/test_recount_write_contract_dynamo.py)."""

from __future__ import annotations

import pytest

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemoryTenantRepo

from .recount_write_contract import RecountWriteContract


class TestMemoryRecountWrite(RecountWriteContract):
    @pytest.fixture
    def tenants(self) -> MemoryTenantRepo:
        return MemoryTenantRepo()

    @pytest.fixture
    def knowledge(self, tenants: MemoryTenantRepo) -> MemoryKnowledgeRepo:
        return MemoryKnowledgeRepo(tenants)
