"""OpenSearch's "tenant" index scope against a knowledge base whose row is gone (a reviewer's finding, rev4 F1):
a clean-up by the gone knowledge base's id, in a process that never learnt its tenant (another Lambda
container, a cold start), found nothing, so a re-embed's half-built index and a move's leftovers stayed in
the tenant's index for good (and in its BM25 statistics). What is left is counted with the raw client:
an engine that forgot the tenant could not see it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from chalicelib.adapters.index.opensearch import OpenSearchEngine, build_opensearch_client
from chalicelib.adapters.index.opensearch_names import tenant_indexes
from chalicelib.bootstrap import Services, _kb_tenant
from chalicelib.domain.types import Tenant
from chalicelib.ports import IndexSpace

from .test_move_clone import CRANES, TIDES, completed, new_kb
from .test_move_clone_audit_fixes import delete_whole_kb, run_task
from .test_reembed import NEW, Flaky, deliver_once, reembed

osmem_server = pytest.importorskip("osmem_server")


@pytest.fixture
def client(deps: Services) -> Iterator[Any]:
    server = osmem_server.OsmemServer.start(addr="127.0.0.1:0")
    try:
        yield build_opensearch_client(server.url)
    finally:
        deps._engines.clear()  # the memory set's teardown closes embedded engines only
        server.close()


def _container(deps: Services, client: Any) -> OpenSearchEngine:
    """A Lambda container's engine: its own (empty) memory of knowledge bases' tenants."""
    engine = OpenSearchEngine(client, refresh=True, tenant_of=_kb_tenant(deps.kbs))
    deps.replace_engine(engine)
    return engine


def left(client: Any, index_space: IndexSpace, kb_id: str, knowledge_id: str | None = None) -> int:
    """Entries of `kb_id` in any tenant index of the space, counted without the engine."""
    filters: list[dict[str, Any]] = [{"term": {"kb_id": kb_id}}]
    if knowledge_id is not None:
        filters.append({"term": {"knowledge_id": knowledge_id}})
    body = {"query": {"bool": {"filter": filters}}}
    return int(client.count(index=tenant_indexes(index_space), body=body)["count"])


def test_a_reembed_of_a_deleted_kb_takes_its_half_built_index_away(
    deps: Services, tenant: Tenant, client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.stages import lifecycle

    flaky = Flaky()
    deps._embedders[NEW] = flaky
    _container(deps, client)
    kb = new_kb(deps, tenant, "harbour")
    completed(deps, kb, "tides.md", TIDES)
    completed(deps, kb, "cranes.md", CRANES)
    task = reembed(deps, kb)
    monkeypatch.setattr(lifecycle, "SLICE_SECONDS", 0.0)  # one item per delivery
    deliver_once(deps)
    new_space = IndexSpace.of(deps.embedding_model(NEW))
    assert left(client, new_space, kb.id) > 0  # one document built into the new space
    flaky.outages = 10**6  # the provider goes down: the task waits (RetryTaskLater) meanwhile
    delete_whole_kb(deps, kb)
    _container(deps, client)  # its next delivery lands in another container
    flaky.outages = 0
    run_task(deps, task.id)  # `_gone`: "nobody else will ever look at what this task wrote"
    assert left(client, new_space, kb.id) == 0  # 1 before: the fresh container deleted nothing
