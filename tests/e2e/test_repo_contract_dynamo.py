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


def test_a_turn_book_that_keeps_changing_raises_turn_book_busy(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every conditional write loses to another writer: after its tries the book says it is busy (the
    upload path lets the document through on that: tests/service/test_fairness_door.py)."""
    from chalicelib.adapters.dynamo import turns as dynamo_turns
    from chalicelib.ports import TurnBookBusy

    book = module_services.turns
    assert isinstance(book, dynamo_turns.DynamoTurnBook)
    stage = f"busy-{id(book)}"
    monkeypatch.setattr(dynamo_turns, "ATTEMPTS", 3)
    monkeypatch.setattr(dynamo_turns.time, "sleep", lambda _seconds: None)
    losses = 0

    def lose_to_another_writer(read: dict[str, Any]) -> tuple[None, dict[str, Any]]:
        nonlocal losses
        losses += 1  # another worker writes between this read and this write, every time
        book.change(stage, lambda current: (None, {**current, f"t{losses}": {"pending": 1}}))
        return None, read

    with pytest.raises(TurnBookBusy):
        book.change(stage, lose_to_another_writer)
    assert losses == 3


def test_a_tenants_keys_are_read_with_a_query_on_the_tenant_keys_index(tables: Repos) -> None:
    """One tenant's keys come from a Query on the sparse tenant-keys index, never a Scan of the tenants
    table (every tenant, key and share: one scan per page grew with the whole table)."""
    from service.repo_contract import new_id

    from chalicelib.domain.api_keys import ApiKey

    repo: Any = tables.api_keys
    tenant_id = new_id()
    mine = sorted((ApiKey.issue(tenant_id, f"k{n}")[0] for n in range(3)), key=lambda k: k.key_hash)
    for key in mine:
        repo.put(key)
    client = repo.model._get_connection().connection.client
    calls: list[tuple[str, str]] = []

    def record(model: Any, params: dict[str, Any], **_: Any) -> None:
        calls.append((model.name, str(params.get("IndexName", ""))))

    client.meta.events.register("before-parameter-build.dynamodb", record)
    try:
        assert [k.id for k in repo.page(tenant_id, mine[0].key_hash, 5)] == [k.id for k in mine[1:]]
    finally:
        client.meta.events.unregister("before-parameter-build.dynamodb", record)
    assert calls == [("Query", "tenant-keys-index")]
