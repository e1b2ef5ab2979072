"""The state ports' contract on the DynamoDB adapters (moto): the assertions the in-memory fakes pass in
tests/service, so a service test on the fakes says something true of the real tables."""

from __future__ import annotations

from typing import Any

import pytest
from service.repo_contract import RepoContract, Repos
from service.tag_contract import TagContract

from chalicelib.bootstrap import Services


@pytest.fixture(scope="module")
def tables(module_services: Services) -> Repos:
    deps = module_services
    return Repos(
        deps.knowledge,
        deps.chunks,
        deps.spans,
        deps.tenants,
        deps.kbs,
        deps.embedding_cache(),
        deps.api_keys,
        deps.tags,
        deps.shares,
    )


class TestDynamoRepos(RepoContract, TagContract):
    @pytest.fixture
    def repos(self, tables: Repos) -> Repos:
        return tables


def test_the_backfill_gives_old_rows_their_listing_keys(tables: Repos) -> None:
    """Rows written before the listing GSIs (no kb_source / kb_type) are found by source and type after it."""
    import uuid

    from service.repo_contract import row

    from chalicelib.domain.types import KnowledgeType

    repo: Any = tables.knowledge
    kb_id = f"kb-{uuid.uuid4().hex}"
    old = row(kb_id=kb_id, type=KnowledgeType.URL, file_type="html")
    repo.insert(old)
    m = repo.model
    m(old.id).update(actions=[m.kb_source.remove(), m.kb_type.remove()])
    assert repo.page_by_kb(kb_id, index=("source", "url")) == []
    assert repo.backfill_listing_keys() >= 1
    assert [k.id for k in repo.page_by_kb(kb_id, index=("source", "url"))] == [old.id]
    assert [k.id for k in repo.page_by_kb(kb_id, index=("file_type", "html"))] == [old.id]
    assert repo.backfill_listing_keys() == 0  # nothing left to do
