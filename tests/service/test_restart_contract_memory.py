"""`restart_attempt(unindexed=True)` on the in-memory fake (the same assertions run on DynamoDB in tests/e2e)."""

from __future__ import annotations

import pytest

from chalicelib.adapters.memory import (
    MemoryApiKeyRepo,
    MemoryChunkRepo,
    MemoryEmbeddingCache,
    MemoryKnowledgeBaseRepo,
    MemoryKnowledgeRepo,
    MemorySpanRepo,
    MemoryTenantRepo,
)

from .repo_contract import Repos
from .restart_contract import RestartContract


class TestMemoryRestart(RestartContract):
    @pytest.fixture
    def repos(self) -> Repos:
        tenants = MemoryTenantRepo()  # the knowledge repo keeps the tenant's counts with its rows
        return Repos(
            knowledge=MemoryKnowledgeRepo(tenants),
            chunks=MemoryChunkRepo(),
            spans=MemorySpanRepo(),
            tenants=tenants,
            kbs=MemoryKnowledgeBaseRepo(),
            cache=MemoryEmbeddingCache(),
            api_keys=MemoryApiKeyRepo(),
        )
