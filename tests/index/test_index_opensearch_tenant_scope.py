"""OpenSearchEngine with the "tenant" index scope (`tenant_of` given; `index_name`) against osmem-server: the
shared engine contract with every knowledge base in one tenant's index, and what the scope is for: BM25 term
statistics of one tenant's index are its own (a reviewer's proof, sec_iso, showed another tenant's documents
push a tenant's results down in the shared one)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest
import test_index_opensearch_osmem as base  # by module: pytest collects the base classes once, there
from index_contract import DIM, entry

from chalicelib.adapters.index.opensearch import OpenSearchEngine, build_opensearch_client
from chalicelib.adapters.index.opensearch_names import index_name
from chalicelib.ports import IndexSpace, IndexWriteError, RetrieveEngine

opensearchpy = pytest.importorskip("opensearchpy")

TENANT = "tenant-one"


def _stored_vector(engine: RetrieveEngine, space: IndexSpace, entry_id: str) -> np.ndarray:
    assert isinstance(engine, OpenSearchEngine)
    body = {"query": {"term": {"id": entry_id}}}
    hits = engine.client.search(index=index_name(space, TENANT), body=body)["hits"]["hits"]
    assert len(hits) == 1
    return np.asarray(hits[0]["_source"]["embedding"], dtype=np.float32)


class TestTenantScopeOnOsmem(base.TestOpenSearchOnOsmem):
    @pytest.fixture
    def engine(self, osmem_url: str) -> Iterator[OpenSearchEngine]:
        yield OpenSearchEngine(build_opensearch_client(osmem_url), refresh=True, tenant_of=lambda _kb: TENANT)

    def stored_vector(
        self, engine: RetrieveEngine, space: IndexSpace, kb_id: str, entry_id: str
    ) -> np.ndarray:
        return _stored_vector(engine, space, entry_id)


class TestTenantScopeRecordIdsOnOsmem(base.TestOpenSearchRecordIdsOnOsmem):
    @pytest.fixture
    def engine(self, osmem_url: str) -> Iterator[OpenSearchEngine]:
        yield OpenSearchEngine(
            build_opensearch_client(osmem_url),
            refresh="wait_for",
            record_ids=True,
            page_size=2,
            tenant_of=lambda _kb: TENANT,
        )

    def stored_vector(
        self, engine: RetrieveEngine, space: IndexSpace, kb_id: str, entry_id: str
    ) -> np.ndarray:
        return _stored_vector(engine, space, entry_id)


OWNERS = {"kb-a": "tenant-a", "kb-b": "tenant-b", "kb-a2": "tenant-a"}
SPACE = IndexSpace(model_id="test/tenants", dimensions=DIM)


@pytest.fixture
def engine(osmem_url: str) -> OpenSearchEngine:
    return OpenSearchEngine(build_opensearch_client(osmem_url), refresh=True, tenant_of=OWNERS.get)


def _scores(engine: OpenSearchEngine, kb_id: str) -> list[tuple[str, float]]:
    hits = engine.hybrid_search(SPACE, kb_id, "zorblax harbour", None, 5, vector=False)
    return [(hit.knowledge_id, round(hit.score, 6)) for hit in hits]


def test_another_tenants_entries_leave_a_tenants_bm25_scores_alone(engine: OpenSearchEngine) -> None:
    engine.batch_index(
        SPACE,
        [
            entry(
                "a1", "The quarterly zorblax figures are attached for review.", kb="kb-a", knowledge="memo"
            ),
            entry("a2", "The harbour master opens the lock at dawn every day.", kb="kb-a", knowledge="other"),
        ],
    )
    before = _scores(engine, "kb-a")
    assert [knowledge for knowledge, _ in before] == ["memo", "other"]
    spam = [
        entry(f"b{i}", f"zorblax zorblax budget line {i}", kb="kb-b", knowledge=f"b{i}") for i in range(15)
    ]
    engine.batch_index(SPACE, spam)
    assert _scores(engine, "kb-a") == before
    assert engine.count(SPACE, "kb-b") == 15 and engine.count(SPACE, "kb-a") == 2
    aliases = {a for e in engine.client.indices.get_alias(index="*").values() for a in e["aliases"]}
    assert aliases == {index_name(SPACE, "tenant-a"), index_name(SPACE, "tenant-b")}


def test_a_move_within_a_tenant_stays_in_its_index_and_one_across_tenants_is_refused(
    engine: OpenSearchEngine,
) -> None:
    engine.batch_index(SPACE, [entry("a1", "harbour lock", kb="kb-a", knowledge="memo")])
    assert engine.move_knowledge(SPACE, "kb-a", "kb-a2", ["memo"]) == 1
    assert engine.count(SPACE, "kb-a2") == 1 and engine.count(SPACE, "kb-a") == 0
    with pytest.raises(IndexWriteError):
        engine.move_knowledge(SPACE, "kb-a2", "kb-b", ["memo"])
    assert engine.count(SPACE, "kb-a2") == 1


def test_a_knowledge_base_whose_tenant_is_unknown_has_no_index(engine: OpenSearchEngine) -> None:
    """A knowledge base gone (its row deleted): a late write is refused, and there is nothing to find."""
    with pytest.raises(IndexWriteError):
        engine.batch_index(SPACE, [entry("g1", "harbour lock", kb="kb-gone")])
    assert engine.count(SPACE, "kb-gone") == 0
    assert engine.hybrid_search(SPACE, "kb-gone", "harbour", None, 5, vector=False) == []
    assert engine.delete_by_knowledge(SPACE, "kb-gone", ["k1"]) == 0
    assert engine.entries_of(SPACE, "kb-gone", "k1") == []


@pytest.mark.parametrize("record_ids", [False, True], ids=["delete_by_query", "record_ids"])
def test_a_gone_knowledge_bases_entries_are_found_and_deleted_by_its_id(
    osmem_url: str, record_ids: bool
) -> None:
    """rev4 F1: entries written while the knowledge base's row existed (a move's repoint, a re-embed's slice),
    then the row deleted: a process that never learnt its tenant (another container) found none of them, so
    a clean-up by its id (a re-embed's `_gone`, a move's leftovers) left them in the tenant's index for good.
    Deletes, counts and reads of an unknown tenant look in every tenant index of the space."""
    client = build_opensearch_client(osmem_url)
    rows = dict(OWNERS)
    writer = OpenSearchEngine(client, refresh=True, tenant_of=rows.get)
    writer.batch_index(
        SPACE,
        [
            entry("m1", "harbour lock", kb="kb-a", knowledge="k1"),
            entry("m2", "harbour crane", kb="kb-a", knowledge="k1"),
            entry("m3", "harbour tide", kb="kb-a", knowledge="k2"),
            entry("b1", "harbour lock", kb="kb-b", knowledge="k1"),
        ],
    )
    del rows["kb-a"]
    cleaner = OpenSearchEngine(client, refresh=True, record_ids=record_ids, page_size=2, tenant_of=rows.get)
    assert cleaner.count(SPACE, "kb-a") == 3 and cleaner.count(SPACE, "kb-a", "k1") == 2
    assert sorted(found.id for found in cleaner.entries_of(SPACE, "kb-a", "k1")) == ["m1", "m2"]
    assert cleaner.delete_by_ids(SPACE, "kb-a", ["m3"]) == 1
    assert cleaner.delete_by_knowledge(SPACE, "kb-a", ["k1"]) == 2
    by_kb = {"query": {"term": {"kb_id": "kb-a"}}}
    assert client.count(index=index_name(SPACE, "tenant-a"), body=by_kb)["count"] == 0
    assert cleaner.count(SPACE, "kb-b") == 1  # another tenant's entries are not its
    with pytest.raises(IndexWriteError):  # a write still has no index to go to
        cleaner.batch_index(SPACE, [entry("m4", "harbour lock", kb="kb-a")])


def test_a_move_into_a_knowledge_base_deleted_meanwhile_says_so(osmem_url: str) -> None:
    """rev4 F5: a target deleted mid-move was reported as a move "between different tenants' indexes"."""
    rows = dict(OWNERS)
    engine = OpenSearchEngine(build_opensearch_client(osmem_url), refresh=True, tenant_of=rows.get)
    engine.batch_index(SPACE, [entry("a1", "harbour lock", kb="kb-a", knowledge="memo")])
    del rows["kb-a2"]
    with pytest.raises(IndexWriteError, match="kb-a2 is gone"):
        engine.move_knowledge(SPACE, "kb-a", "kb-a2", ["memo"])
    assert engine.count(SPACE, "kb-a") == 1


def test_the_space_scope_keeps_todays_one_index_per_space(osmem_url: str) -> None:
    """No `tenant_of` (the default scope): entries stay in the space's own index, as existing domains have."""
    engine = OpenSearchEngine(build_opensearch_client(osmem_url), refresh=True)
    engine.batch_index(SPACE, [entry("a1", "harbour lock", kb="kb-a"), entry("b1", "harbour", kb="kb-b")])
    aliases = {a for e in engine.client.indices.get_alias(index="*").values() for a in e["aliases"]}
    assert aliases == {SPACE.name} == {index_name(SPACE, None)}


def test_the_scope_is_read_from_the_environment_and_given_to_the_engine(osmem_url: str) -> None:
    from chalicelib.bootstrap import build_engine
    from chalicelib.settings import load_settings

    assert load_settings({}).opensearch_index_scope == "space"
    with pytest.raises(ValueError, match="WEKNORA_OPENSEARCH_INDEX_SCOPE"):
        load_settings({"WEKNORA_OPENSEARCH_INDEX_SCOPE": "kb"})
    settings = load_settings({"WEKNORA_OPENSEARCH_INDEX_SCOPE": "tenant", "OPENSEARCH_URL": osmem_url})
    built = build_engine(settings, "opensearch", OWNERS.get)
    assert isinstance(built, OpenSearchEngine)
    assert built.names.of(SPACE, "kb-b") == index_name(SPACE, "tenant-b")
    shared = build_engine(replace(settings, opensearch_index_scope="space"), "opensearch", OWNERS.get)
    assert isinstance(shared, OpenSearchEngine) and shared.names.of(SPACE, "kb-b") == SPACE.name
