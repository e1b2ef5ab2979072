"""The state ports' contract on the in-memory fakes (the same assertions run on DynamoDB in tests/e2e)."""

from __future__ import annotations

import pytest

from chalicelib.adapters.memory import (
    MemoryApiKeyRepo,
    MemoryChunkRepo,
    MemoryEmbeddingCache,
    MemoryKnowledgeBaseRepo,
    MemoryKnowledgeRepo,
    MemoryShareRepo,
    MemorySpanRepo,
    MemoryTagRepo,
    MemoryTenantRepo,
)

from .repo_contract import RepoContract, Repos
from .tag_contract import TagContract


class TestMemoryRepos(RepoContract, TagContract):
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
            tags=MemoryTagRepo(),
            api_keys=MemoryApiKeyRepo(),
            shares=MemoryShareRepo(),
        )
