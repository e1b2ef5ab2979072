"""`restart_attempt(unindexed=True)` on the DynamoDB adapter (moto): the assertions the in-memory fake passes
in tests/service."""

from __future__ import annotations

import pytest
from service.repo_contract import Repos
from service.restart_contract import RestartContract

from chalicelib.bootstrap import Services


class TestDynamoRestart(RestartContract):
    @pytest.fixture
    def repos(self, module_services: Services) -> Repos:
        deps = module_services
        return Repos(
            deps.knowledge,
            deps.chunks,
            deps.spans,
            deps.tenants,
            deps.kbs,
            deps.embedding_cache(),
            deps.api_keys,
        )
