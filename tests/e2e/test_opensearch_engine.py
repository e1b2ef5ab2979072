"""The pipeline with the OpenSearch engine chosen per knowledge base, against the osmem-server wheel (an
in-memory OpenSearch-API server: BM25 and bulk are real, kNN is not served, so this KB is keyword-only).
The full contract, vectors included, runs against a real cluster with `pytest -m opensearch`."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pytest

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api

osmem_server = pytest.importorskip("osmem_server")


@pytest.fixture
def opensearch_url() -> Iterator[str]:
    server = osmem_server.OsmemServer.start(addr="127.0.0.1:0")
    try:
        yield server.url
    finally:
        server.close()


def test_a_kb_on_the_opensearch_engine_indexes_searches_and_reparses(
    api: Api, runtime: LocalRuntime, services: Services, opensearch_url: str
) -> None:
    services.settings = replace(services.settings, opensearch_url=opensearch_url)
    kb = api.create_kb(retrieval_engine="opensearch", indexing_strategy={"vector_enabled": False})
    created = api.upload(kb["id"], "harbour.md", b"# Harbour\n\nThe harbour master opens the lock at dawn.\n")
    runtime.drain(timeout=120)
    knowledge = api.knowledge(created.json_body["data"]["id"])
    assert knowledge["parse_status"] == "completed"
    spans = api.get(f"/knowledge/{knowledge['id']}/spans").json_body["data"]["trace"]
    assert next(s for s in spans if s["span_id"] == "embedding")["outputs"]["engine"] == "opensearch"

    hits = api.post(f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "harbour master lock"})
    assert hits.status_code == 200 and hits.json_body["data"][0]["knowledge_id"] == knowledge["id"]
    assert hits.json_body["data"][0]["match_type"] == "keyword"

    assert api.post(f"/knowledge/{knowledge['id']}/reparse").status_code == 200
    runtime.drain(timeout=120)
    again = api.post(f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "harbour master lock"})
    # the old attempt's entries were deleted by query: the new attempt's text and summary chunks remain, and
    # the summary, which only repeats this short body, is collapsed into it (issue 26: no near duplicates)
    ids = [hit["chunk_id"] for hit in again.json_body["data"]]
    assert ids == [f"{knowledge['id']}-a2-00000"]
    chunks = api.get(f"/knowledge/{knowledge['id']}/chunks").json_body["data"]
    assert f"{knowledge['id']}-a2-summary" in str(chunks)  # still stored and indexed, only not shown twice
