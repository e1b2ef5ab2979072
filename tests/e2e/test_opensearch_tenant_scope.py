"""OpenSearch's "tenant" index scope (`WEKNORA_OPENSEARCH_INDEX_SCOPE=tenant`, adapters/index/opensearch.py
`index_name`), against the osmem-server wheel (BM25 is real, kNN is not served: keyword-only knowledge bases).

A reviewer's proof (sec_iso): with one index per embedding model for every tenant, BM25 term statistics span
all tenants' entries, so another tenant's documents that use a rare term pushed a tenant's own results down
(and its scores told it that term was in use elsewhere). Per tenant, they are the tenant's own."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.adapters.index.opensearch import OpenSearchEngine
from chalicelib.adapters.index.opensearch_names import index_name
from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.ports import IndexSpace

from .conftest import Api

osmem_server = pytest.importorskip("osmem_server")

QUERY = {"query_text": "zorblax harbour", "match_count": 5, "retriever": "keyword"}
KEYWORD_ONLY = {"retrieval_engine": "opensearch", "indexing_strategy": {"vector_enabled": False}}


@pytest.fixture
def opensearch_url() -> Iterator[str]:
    server = osmem_server.OsmemServer.start(addr="127.0.0.1:0")
    try:
        yield server.url
    finally:
        server.close()


def _scores(api: Api, kb_id: str) -> list[tuple[str, float]]:
    found = api.post(f"/knowledge-bases/{kb_id}/hybrid-search", QUERY)
    assert found.status_code == 200, found.json_body
    return [(hit["knowledge_title"], round(hit["score"], 6)) for hit in found.json_body["data"]]


def test_another_tenants_documents_leave_a_tenants_bm25_scores_alone(
    api: Api, runtime: LocalRuntime, services: Services, opensearch_url: str
) -> None:
    services.settings = replace(
        services.settings, opensearch_url=opensearch_url, opensearch_index_scope="tenant"
    )
    other_tenant, other_key = create_tenant_with_key(services, "tenant-b")
    other = Api(api.client, other_key)
    mine = api.create_kb(**KEYWORD_ONLY)
    api.upload(mine["id"], "a.md", b"# Memo\n\nThe quarterly zorblax figures are attached for review.\n")
    api.upload(mine["id"], "a2.md", b"# Other\n\nThe harbour master opens the lock at dawn every day.\n")
    runtime.drain(timeout=120)
    before = _scores(api, mine["id"])
    assert [title for title, _ in before] == ["a.md", "a2.md"]

    theirs = other.create_kb(**KEYWORD_ONLY)
    for i in range(15):
        other.upload(theirs["id"], f"b{i}.md", f"# B{i}\n\nzorblax zorblax budget line {i}\n".encode())
    runtime.drain(timeout=180)
    assert _scores(api, mine["id"]) == before  # shared statistics had put a2.md first (1.0 vs 0.03)
    assert len(_scores(other, theirs["id"])) == 5

    # a knowledge base shared with the other tenant is searched in its owner's index
    shared = api.post(f"/knowledge-bases/{mine['id']}/shares", {"tenant_id": other_tenant.id})
    assert shared.status_code == 201, shared.json_body
    assert _scores(other, mine["id"]) == before

    engine: Any = services.engine("opensearch")
    assert isinstance(engine, OpenSearchEngine)
    kb = services.kbs.get(mine["id"])
    assert kb is not None
    space = IndexSpace.of(services.embedding_model(kb.embedding_model_id))
    names = {
        alias for entry in engine.client.indices.get_alias(index="*").values() for alias in entry["aliases"]
    }
    assert {index_name(space, kb.tenant_id), index_name(space, other_tenant.id)} <= names
    assert space.name not in names  # the shared index was never written
