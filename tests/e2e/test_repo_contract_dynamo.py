"""The state ports' contract on the DynamoDB adapters (moto): the assertions the in-memory fakes pass in
tests/service, so a service test on the fakes says something true of the real tables."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from service.repo_contract import RepoContract, Repos

from chalicelib.bootstrap import get_deps, set_deps
from chalicelib.local.runtime import LocalRuntime


@pytest.fixture(scope="module")
def tables(_runtime: LocalRuntime) -> Iterator[Repos]:
    """One reset for the module: the contract works on fresh ids, so its tests can share the tables."""
    _runtime.reset(clear_state=True)
    set_deps(None)
    deps = get_deps()
    yield Repos(
        deps.knowledge, deps.chunks, deps.spans, deps.tenants, deps.kbs, deps.embedding_cache(), deps.api_keys
    )
    set_deps(None)


class TestDynamoRepos(RepoContract):
    @pytest.fixture
    def repos(self, tables: Repos) -> Repos:
        return tables
