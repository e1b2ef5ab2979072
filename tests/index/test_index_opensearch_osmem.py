"""OpenSearchEngine against osmem-server: the shared contract for real over HTTP.

osmem (an in-memory server on bleve) validates the knn_vector mapping but answers every `knn`
query with HTTP 400, and it does not bigram Hangul at index time (its `_analyze` shows bigrams, but
a `match` on part of a Korean word finds nothing). Only the assertions that depend on those two
features are skipped; the request bodies for kNN/hybrid are pinned in test_index_opensearch_requests.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from index_contract import CORPUS, DIM, EngineContract, entry, vec

from chalicelib.adapters.index.opensearch import OpenSearchEngine, build_opensearch_client, knn_body
from chalicelib.ports import IndexSpace, IndexWriteError, RetrieveEngine
from chalicelib.ports.index import IndexRefused

opensearchpy = pytest.importorskip("opensearchpy")

OSMEM_KNN = "osmem-server 0.1.6 rejects `knn` queries (HTTP 400: not supported by osmem)"
OSMEM_HANGUL = "osmem-server 0.1.6 indexes Hangul words whole (no cjk_bigram at index time)"
OSMEM_UNIGRAMS = (
    "osmem-server 0.1.6 indexes no CJK unigrams (its _analyze shows `output_unigrams`, its index does not)"
)


def _stored_vector(engine: RetrieveEngine, space: IndexSpace, entry_id: str) -> np.ndarray:
    """The vector as stored, found by the `id` field (with server ids, `_id` is not the entry id)."""
    assert isinstance(engine, OpenSearchEngine)
    body = {"query": {"term": {"id": entry_id}}}
    hits = engine.client.search(index=space.name, body=body)["hits"]["hits"]
    assert len(hits) == 1
    return np.asarray(hits[0]["_source"]["embedding"], dtype=np.float32)


class TestOpenSearchOnOsmem(EngineContract):
    KNN_SKIP = OSMEM_KNN
    HANGUL_BIGRAM_SKIP = OSMEM_HANGUL
    UNIGRAM_SKIP = OSMEM_UNIGRAMS

    @pytest.fixture
    def engine(self, osmem_url: str) -> Iterator[OpenSearchEngine]:
        yield OpenSearchEngine(build_opensearch_client(osmem_url), refresh=True)

    def stored_vector(
        self, engine: RetrieveEngine, space: IndexSpace, kb_id: str, entry_id: str
    ) -> np.ndarray:
        return _stored_vector(engine, space, entry_id)


class TestOpenSearchRecordIdsOnOsmem(TestOpenSearchOnOsmem):
    """The same contract in Serverless mode: deletes by scanning ids + `_bulk`, and documents
    indexed without `_id` (the server assigns it), so upserts go through delete-then-index."""

    @pytest.fixture
    def engine(self, osmem_url: str) -> Iterator[OpenSearchEngine]:
        yield OpenSearchEngine(
            build_opensearch_client(osmem_url), refresh="wait_for", record_ids=True, page_size=2
        )


SPACE = IndexSpace(model_id="test/mini", dimensions=DIM)


@pytest.fixture
def client(osmem_url: str) -> object:
    return build_opensearch_client(osmem_url)


def test_index_mapping_is_created_once(client: object) -> None:
    engine = OpenSearchEngine(client)  # type: ignore[arg-type]
    engine.batch_index(SPACE, CORPUS[:1])
    engine.batch_index(SPACE, CORPUS[1:2])
    (found,) = client.indices.get_mapping(index=SPACE.name).values()  # type: ignore[attr-defined]
    mapping = found["mappings"]  # keyed by the concrete index behind the alias
    props = mapping["properties"]
    assert props["embedding"]["type"] == "knn_vector"
    assert props["embedding"]["dimension"] == DIM
    assert props["embedding"]["method"]["space_type"] == "cosinesimil"
    assert props["embedding"]["method"]["name"] == "hnsw"
    assert props["content"] == {
        "type": "text",
        "analyzer": "weknora_text",
        "search_analyzer": "weknora_query",
    }
    assert {props[f]["type"] for f in ("kb_id", "knowledge_id", "chunk_id", "id")} == {"keyword"}
    assert props["is_enabled"]["type"] == "boolean"
    tokens = client.indices.analyze(  # type: ignore[attr-defined]
        index=SPACE.name, body={"field": "content", "text": "국회의원 Foxes"}
    )["tokens"]
    assert [t["token"] for t in tokens] == ["국", "국회", "회", "회의", "의", "의원", "원", "foxes"]
    query_tokens = client.indices.analyze(  # type: ignore[attr-defined]
        index=SPACE.name, body={"analyzer": "weknora_query", "text": "국회의원 Foxes"}
    )["tokens"]
    assert [t["token"] for t in query_tokens] == ["국회", "회의", "의원", "foxes"]


def test_second_engine_finds_existing_index(client: object) -> None:
    OpenSearchEngine(client).batch_index(SPACE, CORPUS)  # type: ignore[arg-type]
    other = OpenSearchEngine(client)  # type: ignore[arg-type]
    other.ensure_index(SPACE)  # exists: no create, no error
    assert other.count(SPACE, "kb1") == 5


def test_bulk_is_split_under_the_byte_cap(client: object) -> None:
    sent: list[int] = []
    engine = OpenSearchEngine(client, bulk_max_bytes=2_000, refresh=True)  # type: ignore[arg-type]
    real_bulk = engine.client.bulk

    def counting_bulk(*, body: bytes, **kw: object) -> object:
        sent.append(len(body))
        return real_bulk(body=body, **kw)

    engine.client.bulk = counting_bulk  # type: ignore[method-assign]
    entries = [entry(f"e{i}", f"entry number {i} " + "padding " * 20, vector=vec(1, i)) for i in range(30)]
    engine.batch_index(SPACE, entries)
    assert len(sent) > 3
    assert max(sent) <= 2_000
    assert engine.count(SPACE, "kb1") == 30


def test_bulk_item_errors_raise(client: object) -> None:
    engine = OpenSearchEngine(client, refresh=True)  # type: ignore[arg-type]
    engine.ensure_index(SPACE)
    # The mapping is strict: an unknown field makes the item fail; the engine must not swallow it.
    line = engine._line
    with pytest.raises(IndexWriteError, match="1 of 2 actions failed"):
        engine._bulk(
            [
                (line({"index": {"_index": SPACE.name, "_id": "ok"}}), line({"id": "ok", "kb_id": "kb1"})),
                (line({"index": {"_index": SPACE.name, "_id": "bad"}}), line({"id": "bad", "surprise": 1})),
            ]
        )


def test_knn_query_is_refused_loudly_by_osmem(client: object) -> None:
    """Guards the skip reason above: if osmem ever starts answering kNN, unskip the contract."""
    engine = OpenSearchEngine(client, refresh=True)  # type: ignore[arg-type]
    engine.batch_index(SPACE, CORPUS)
    with pytest.raises(IndexRefused) as refused:  # the port's error: the status and type, not the reason
        engine.hybrid_search(SPACE, "kb1", "fox", vec(1), 3)
    assert refused.value.http_status == "400"
    with pytest.raises(opensearchpy.exceptions.RequestError, match="knn"):  # the server's own words
        client.search(index=SPACE.name, body=knn_body("kb1", vec(1), 3))  # type: ignore[attr-defined]


def test_health_false_when_server_is_gone() -> None:
    engine = OpenSearchEngine(build_opensearch_client("http://127.0.0.1:9", max_retries=0, timeout=1))
    assert engine.health() is False


def test_server_ids_mode_lets_the_server_assign_ids(client: object) -> None:
    engine = OpenSearchEngine(client, record_ids=True, refresh=True)  # type: ignore[arg-type]
    assert engine.server_ids is True
    engine.batch_index(SPACE, CORPUS)
    engine.batch_index(SPACE, CORPUS[:2])
    hits = client.search(index=SPACE.name, body={"size": 50, "query": {"match_all": {}}})["hits"]["hits"]  # type: ignore[attr-defined]
    assert len(hits) == len(CORPUS)
    assert all(h["_id"] != h["_source"]["id"] for h in hits)
