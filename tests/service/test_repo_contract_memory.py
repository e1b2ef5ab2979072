"""The state ports' contract on the in-memory fakes (the same assertions run on DynamoDB in tests/e2e)."""

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

from .repo_contract import RepoContract, Repos


class TestMemoryRepos(RepoContract):
    @pytest.fixture
    def repos(self) -> Repos:
        return Repos(
            knowledge=MemoryKnowledgeRepo(),
            chunks=MemoryChunkRepo(),
            spans=MemorySpanRepo(),
            tenants=MemoryTenantRepo(),
            kbs=MemoryKnowledgeBaseRepo(),
            cache=MemoryEmbeddingCache(),
            api_keys=MemoryApiKeyRepo(),
        )
