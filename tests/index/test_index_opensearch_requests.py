"""Pins the exact requests OpenSearchEngine sends, on a recording transport (no server).

The transport is a fake because no server here can answer kNN (see the osmem suite); it records
each request after opensearch-py has built it and answers with canned OpenSearch responses.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from index_contract import DIM, entry, vec
from opensearchpy import OpenSearch, Transport

from chalicelib.adapters.index.analysis import index_terms, query_terms
from chalicelib.adapters.index.common import PROXIMITY_WINDOW
from chalicelib.adapters.index.fusion import KEYWORD_FLOOR, KEYWORD_WEIGHT
from chalicelib.adapters.index.opensearch import OpenSearchEngine, build_opensearch_client, index_body
from chalicelib.ports import IndexSpace

SPACE = IndexSpace(model_id="BAAI/bge-m3", dimensions=DIM)
FILTER = {"bool": {"filter": [{"term": {"kb_id": "kb1"}}, {"term": {"is_enabled": True}}]}}

Responder = Callable[[str, str, dict[str, Any], Any], Any]


class RecordingTransport(Transport):
    """Records (method, url, params, body) and answers from `responder`."""

    calls: list[tuple[str, str, dict[str, Any], Any]]
    responder: Responder

    def perform_request(  # type: ignore[override]
        self, method: str, url: str, params: Any = None, body: Any = None, **_: Any
    ) -> Any:
        params = dict(params or {})
        self.calls.append((method, url, params, body))
        return self.responder(method, url, params, body)


def _hit(doc_id: str, score: float, **src: Any) -> dict[str, Any]:
    source = {
        "id": doc_id,
        "kb_id": "kb1",
        "knowledge_id": "k1",
        "chunk_id": doc_id,
        "content": doc_id,
        **src,
    }
    return {"_id": doc_id, "_score": score, "_source": source, "sort": [doc_id]}


def default_responder(method: str, url: str, params: dict[str, Any], body: Any) -> Any:
    if method == "HEAD":
        return True  # index exists
    if url.endswith("/_search"):
        if "knn" in body["query"]:
            return {"hits": {"hits": [_hit("v1", 0.99), _hit("b1", 0.9)]}}
        return {"hits": {"hits": [_hit("b1", 7.5), _hit("b2", 3.0)]}}
    if url.endswith("/_bulk"):
        lines = [json.loads(x) for x in body.decode().splitlines()]
        items = [
            {op: {"_id": meta.get("_id", "auto"), "status": 200, "result": "deleted"}}
            for x in lines
            for op, meta in x.items()
            if op in ("index", "delete", "update")
        ]
        return {"errors": False, "items": items}
    if url.endswith("/_delete_by_query"):
        return {"deleted": 4, "failures": []}
    if method == "PUT" and url.endswith("/_mapping"):
        return {"acknowledged": True}
    raise AssertionError(f"unexpected request {method} {url}")


@pytest.fixture
def recorded() -> tuple[OpenSearchEngine, RecordingTransport]:
    client = OpenSearch(hosts=[{"host": "example.invalid", "port": 9200}], transport_class=RecordingTransport)
    transport = client.transport
    assert isinstance(transport, RecordingTransport)
    transport.calls = []
    transport.responder = default_responder
    return OpenSearchEngine(client, candidates=50), transport


def test_knn_request_body_is_pinned(recorded: tuple[OpenSearchEngine, RecordingTransport]) -> None:
    engine, transport = recorded
    query = np.array([3, 4, 0, 0, 0, 0, 0, 0], dtype=np.float32)  # normalised before sending
    hits = engine.hybrid_search(SPACE, "kb1", "ignored", query, 5, keyword=False)
    assert transport.calls == [
        (
            "POST",
            "/weknora-baai-bge-m3-8/_search",
            {},
            {
                "size": 50,
                "_source": {"excludes": ["embedding", "search_text"]},
                "query": {
                    "knn": {
                        "embedding": {
                            "vector": pytest.approx([0.6, 0.8, 0, 0, 0, 0, 0, 0]),
                            "k": 50,
                            "filter": FILTER,
                        }
                    }
                },
            },
        )
    ]
    assert [(h.id, h.vector_rank, h.bm25_rank) for h in hits] == [("v1", 1, None), ("b1", 2, None)]
    assert hits[0].extra["vector_score"] == pytest.approx(0.98)  # (1 + cos) / 2 = 0.99 -> cos 0.98


def test_hybrid_sends_bm25_then_knn_and_fuses_client_side(
    recorded: tuple[OpenSearchEngine, RecordingTransport],
) -> None:
    engine, transport = recorded
    hits = engine.hybrid_search(SPACE, "kb1", "  대한민국 헌법  ", vec(1), 3)
    assert [c[:2] for c in transport.calls] == [
        ("POST", "/weknora-baai-bge-m3-8/_search"),
        ("POST", "/weknora-baai-bge-m3-8/_search"),
    ]
    bm25 = transport.calls[0][3]
    assert bm25 == {
        "size": 50,
        "_source": {"excludes": ["embedding", "search_text"]},
        "query": {
            "bool": {
                "must": [
                    {
                        "dis_max": {
                            "queries": [
                                {"match": {"content": {"query": "대한민국 헌법"}}},
                                {"match": {"search_text": {"query": "대한민국 헌법"}}},
                            ]
                        }
                    }
                ],
                "filter": FILTER["bool"]["filter"],
            }
        },
        "sort": [{"_score": "desc"}, {"id": "asc"}],
        "track_scores": True,
    }
    knn = transport.calls[1][3]["query"]["knn"]["embedding"]
    assert knn["k"] == 50 and knn["filter"] == FILTER and knn["vector"] == pytest.approx(vec(1).tolist())
    # b1: bm25 #1 + knn #2; v1: knn #1; b2: bm25 #2, the list's worst and not in knn, is still a keyword
    # match: it keeps the BM25 floor instead of 0.
    assert [(h.id, h.bm25_rank, h.vector_rank) for h in hits] == [
        ("b1", 1, 2),
        ("v1", None, 1),
        ("b2", 2, None),
    ]
    assert hits[0].score == pytest.approx(KEYWORD_WEIGHT)  # BM25's best; the knn list's worst adds nothing
    assert hits[2].score == pytest.approx(KEYWORD_WEIGHT * KEYWORD_FLOOR)
    assert hits[0].extra["bm25_score"] == 7.5


def test_bm25_adds_a_sloppy_phrase_per_word_pair_as_should(
    recorded: tuple[OpenSearchEngine, RecordingTransport],
) -> None:
    engine, transport = recorded
    engine.hybrid_search(SPACE, "kb1", "Free License 헌법", None, 3, vector=False)
    query = transport.calls[0][3]["query"]["bool"]
    assert query["must"][0]["dis_max"]["queries"][0] == {"match": {"content": {"query": "free license 헌법"}}}
    # never required (`should` beside `must`), scored on both fields like the match; CJK runs pair no words
    assert query["should"] == [
        {
            "dis_max": {
                "queries": [
                    {"match_phrase": {"content": {"query": "free license", "slop": PROXIMITY_WINDOW - 1}}},
                    {
                        "match_phrase": {
                            "search_text": {"query": "free license", "slop": PROXIMITY_WINDOW - 1}
                        }
                    },
                ]
            }
        }
    ]


def test_a_suffix_after_an_underscore_keeps_its_term_in_the_match_and_the_phrases(
    recorded: tuple[OpenSearchEngine, RecordingTransport],
) -> None:
    """`x_#` is `x` and `sharp` (`_` joins nothing there): a clause spelling `sharp` as a bare `#` lost it,
    since the char filter's `\\b` needs the word character before it. Each clause, read as the index's char
    filters and tokenizer read it (`index_terms`), holds the query's terms, pair by pair."""
    engine, transport = recorded
    engine.hybrid_search(SPACE, "kb1", "x_# y _++ z a_++#", None, 3, vector=False)
    query = transport.calls[0][3]["query"]["bool"]
    terms = query_terms("x_# y _++ z a_++#")
    assert terms == ["x", "sharp", "y", "plusplus", "z", "a", "plusplussharp"]
    assert index_terms(query["must"][0]["dis_max"]["queries"][0]["match"]["content"]["query"]) == terms
    phrases = [
        clause["dis_max"]["queries"][0]["match_phrase"]["content"]["query"] for clause in query["should"]
    ]
    assert [index_terms(phrase) for phrase in phrases] == [list(pair) for pair in itertools.pairwise(terms)]


def test_a_query_of_many_words_asks_for_its_first_128_distinct_terms(
    recorded: tuple[OpenSearchEngine, RecordingTransport],
) -> None:
    """A match query makes one clause per term and OpenSearch refuses over 1,024 (too_many_clauses, a
    400): a pasted page of 2,000 words searches for its first 128 distinct ones, as the embedded engine."""
    engine, transport = recorded
    words = [f"word{n}" for n in range(2000)]
    engine.hybrid_search(SPACE, "kb1", " ".join(["Word0", *words]), None, 3, vector=False)
    query = transport.calls[0][3]["query"]["bool"]
    (content, folded) = query["must"][0]["dis_max"]["queries"]
    assert content["match"]["content"]["query"] == " ".join(words[:128])
    assert folded["match"]["search_text"]["query"] == " ".join(words[:128])
    assert len(query["should"]) == 127  # the proximity pairs were bounded already


def test_no_request_without_query(recorded: tuple[OpenSearchEngine, RecordingTransport]) -> None:
    engine, transport = recorded
    assert engine.hybrid_search(SPACE, "kb1", " ", None, 5) == []
    assert engine.hybrid_search(SPACE, "kb1", "x", vec(1), 5, keyword=False, vector=False) == []
    assert transport.calls == []


def test_bulk_lines_and_refresh(recorded: tuple[OpenSearchEngine, RecordingTransport]) -> None:
    engine, transport = recorded
    engine.batch_index(
        SPACE,
        [
            entry("c1", "héllo 세계", vector=np.array([0, 2, 0, 0, 0, 0, 0, 0], np.float32)),
            entry("c2", "電腦 ＡＢＣ"),
        ],
    )
    assert transport.calls[0][:2] == ("HEAD", "/weknora-baai-bge-m3-8")
    # An existing index gets the search_text field added (an index from before it existed).
    assert transport.calls[1] == (
        "PUT",
        "/weknora-baai-bge-m3-8/_mapping",
        {},
        {
            "properties": {
                "search_text": {
                    "type": "text",
                    "analyzer": "weknora_text",
                    "search_analyzer": "weknora_query",
                }
            }
        },
    )
    method, url, params, body = transport.calls[2]
    assert (method, url, params) == ("POST", "/_bulk", {"refresh": "wait_for"})
    action, doc, _action2, doc2 = [json.loads(x) for x in body.decode().splitlines()]
    # Folded text (width, traditional -> simplified, case) only where folding changes something.
    assert doc2["content"] == "電腦 ＡＢＣ" and doc2["search_text"] == "电脑 abc"
    assert action == {"index": {"_index": "weknora-baai-bge-m3-8", "_id": "c1"}}
    assert doc == {
        "id": "c1",
        "kb_id": "kb1",
        "knowledge_id": "k1",
        "chunk_id": "c1",
        "source_id": "c1",
        "source_type": "chunk",
        "chunk_type": "text",
        "is_enabled": True,
        "content": "héllo 세계",
        "embedding": [0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    }
    assert "세계".encode() in body  # UTF-8, not \\u escapes: smaller requests


def test_delete_by_query_body(recorded: tuple[OpenSearchEngine, RecordingTransport]) -> None:
    engine, transport = recorded
    assert engine.delete_by_knowledge(SPACE, "kb1", ["k1", "k2"]) == 4
    assert transport.calls == [
        (
            "POST",
            "/weknora-baai-bge-m3-8/_delete_by_query",
            {"refresh": "true", "conflicts": "proceed"},
            {
                "query": {
                    "bool": {
                        "filter": [{"term": {"kb_id": "kb1"}}, {"terms": {"knowledge_id": ["k1", "k2"]}}]
                    }
                }
            },
        )
    ]


def test_record_ids_delete_scans_then_bulk_deletes(
    recorded: tuple[OpenSearchEngine, RecordingTransport],
) -> None:
    engine, transport = recorded
    engine.record_ids = True
    engine.page_size = 2
    pages = [[_hit("a", 0), _hit("b", 0)], [_hit("c", 0)]]

    def responder(method: str, url: str, params: dict[str, Any], body: Any) -> Any:
        if url.endswith("/_search"):
            return {"hits": {"hits": pages.pop(0)}}
        return default_responder(method, url, params, body)

    transport.responder = responder
    assert engine.delete_by_knowledge(SPACE, "kb1", ["k1"]) == 3
    scan1, scan2, bulk = transport.calls
    query = {"bool": {"filter": [{"term": {"kb_id": "kb1"}}, {"terms": {"knowledge_id": ["k1"]}}]}}
    assert scan1[3] == {"size": 2, "query": query, "sort": [{"id": "asc"}], "_source": False}
    assert scan2[3] == {**scan1[3], "search_after": ["b"]}
    assert bulk[1] == "/_bulk"
    assert [json.loads(x) for x in bulk[3].decode().splitlines()] == [
        {"delete": {"_index": "weknora-baai-bge-m3-8", "_id": i}} for i in "abc"
    ]


def test_index_body_for_serverless_has_no_shard_settings() -> None:
    body = index_body(SPACE, knn_engine="faiss", auto_expand_replicas=None)
    assert body["settings"]["index"] == {"knn": True}
    assert body["mappings"]["properties"]["embedding"]["method"]["engine"] == "faiss"
    assert index_body(SPACE, shards=2, replicas=1)["settings"]["index"] == {
        "knn": True,
        "number_of_shards": 2,
        "number_of_replicas": 1,
    }


def test_a_managed_domains_replicas_follow_its_data_nodes() -> None:
    # a one-node domain cannot place a replica: with one asked for, the index stays yellow for ever
    assert index_body(SPACE)["settings"]["index"] == {"knn": True, "auto_expand_replicas": "0-1"}
    serverless = OpenSearchEngine.for_serverless(build_opensearch_client("https://search.example.com"))
    assert serverless.auto_expand_replicas is None  # Serverless rejects replica settings


def test_build_client_plain_and_basic_auth() -> None:
    client = build_opensearch_client("https://user:p%40ss@search.example.com:9243/prefix")
    conn = client.transport.get_connection()
    assert conn.host == "https://search.example.com:9243"
    assert conn.url_prefix == "/prefix"
    assert conn.headers.get("authorization", "").startswith("Basic ")
    with pytest.raises(ValueError):
        build_opensearch_client("ftp://nope")


def test_build_client_sigv4(monkeypatch: pytest.MonkeyPatch) -> None:
    from opensearchpy import AWSV4SignerAuth, RequestsHttpConnection

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    client = build_opensearch_client(
        "https://abc.eu-west-1.aoss.amazonaws.com", region="eu-west-1", aws_auth=True
    )
    conn = client.transport.get_connection()
    assert isinstance(conn, RequestsHttpConnection)
    auth = conn.session.auth
    assert isinstance(auth, AWSV4SignerAuth)
    assert auth.service == "aoss"
    managed = build_opensearch_client(
        "https://search-x.eu-west-1.es.amazonaws.com", region="eu-west-1", aws_auth=True
    )
    assert managed.transport.get_connection().session.auth.service == "es"


def test_sigv4_auth_signs_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    import requests

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    client = build_opensearch_client(
        "https://abc.eu-west-1.aoss.amazonaws.com", region="eu-west-1", aws_auth=True
    )
    auth = client.transport.get_connection().session.auth
    prepared = requests.Request(
        "POST", "https://abc.eu-west-1.aoss.amazonaws.com/i/_search", data=b"{}"
    ).prepare()
    signed = auth(prepared)
    assert signed.headers["Authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-west-1/aoss/aws4_request" in signed.headers["Authorization"]


def test_server_ids_mode_deletes_old_copies_then_indexes_without_id(
    recorded: tuple[OpenSearchEngine, RecordingTransport],
) -> None:
    engine, transport = recorded
    engine.record_ids = engine.server_ids = True
    scans = [[_hit("srv-1", 0, id="c1")]]

    def responder(method: str, url: str, params: dict[str, Any], body: Any) -> Any:
        if url.endswith("/_search"):
            return {"hits": {"hits": scans.pop(0) if scans else []}}
        return default_responder(method, url, params, body)

    transport.responder = responder
    engine.batch_index(SPACE, [entry("c1", "new text"), entry("c2", "other")])
    head, mapping, scan, delete, index = transport.calls
    assert head[0] == "HEAD" and mapping[:2] == ("PUT", "/weknora-baai-bge-m3-8/_mapping")
    assert scan[3]["query"] == {"bool": {"filter": [{"terms": {"id": ["c1", "c2"]}}]}}
    assert [json.loads(x) for x in delete[3].decode().splitlines()] == [
        {"delete": {"_index": "weknora-baai-bge-m3-8", "_id": "srv-1"}}
    ]
    lines = [json.loads(x) for x in index[3].decode().splitlines()]
    assert lines[0] == {"index": {"_index": "weknora-baai-bge-m3-8"}}  # no _id
    assert (lines[1]["id"], lines[3]["id"]) == ("c1", "c2")


def test_serverless_preset() -> None:
    engine = OpenSearchEngine.for_serverless(build_opensearch_client("http://127.0.0.1:9"), page_size=10)
    assert (engine.refresh, engine.record_ids, engine.server_ids, engine.knn_engine) == (
        False,
        True,
        True,
        "faiss",
    )
    assert engine.page_size == 10
    assert engine._refresh_param() is None


def test_move_knowledge_scans_the_source_then_updates_kb_id_in_one_bulk(
    recorded: tuple[OpenSearchEngine, RecordingTransport],
) -> None:
    engine, transport = recorded
    engine.page_size = 2
    pages = [[_hit("a", 0), _hit("b", 0)], [_hit("c", 0)]]

    def responder(method: str, url: str, params: dict[str, Any], body: Any) -> Any:
        if url.endswith("/_search"):
            return {"hits": {"hits": pages.pop(0)}}
        return default_responder(method, url, params, body)

    transport.responder = responder
    assert engine.move_knowledge(SPACE, "kb1", "kb9", ["k1"]) == 3
    scan1, scan2, bulk = transport.calls
    query = {"bool": {"filter": [{"term": {"kb_id": "kb1"}}, {"terms": {"knowledge_id": ["k1"]}}]}}
    assert scan1[3]["query"] == query and scan2[3]["search_after"] == ["b"]
    lines = [json.loads(x) for x in bulk[3].decode().splitlines()]
    assert lines == [
        line
        for i in "abc"
        for line in ({"update": {"_index": "weknora-baai-bge-m3-8", "_id": i}}, {"doc": {"kb_id": "kb9"}})
    ]  # no vector is sent again
    transport.calls.clear()
    assert engine.move_knowledge(SPACE, "kb1", "kb1", ["k1"]) == 0 and transport.calls == []


def test_knowledge_filter_rides_inside_both_queries(
    recorded: tuple[OpenSearchEngine, RecordingTransport],
) -> None:
    """A pre-filter: the `terms` clause is in the BM25 query's filter and inside the knn clause (efficient
    filtering), so k neighbours are found among the named knowledge, never cut after the search."""
    engine, transport = recorded
    engine.hybrid_search(
        SPACE, "kb1", "헌법", vec(1), 3, knowledge_ids=["k1", "k2", "k1"], keyword_weight=0.3
    )
    terms = {"terms": {"knowledge_id": ["k1", "k2"]}}
    bm25 = transport.calls[0][3]["query"]["bool"]["filter"]
    knn = transport.calls[1][3]["query"]["knn"]["embedding"]["filter"]["bool"]["filter"]
    assert bm25 == knn == [*FILTER["bool"]["filter"], terms]


def test_an_empty_knowledge_filter_sends_nothing(
    recorded: tuple[OpenSearchEngine, RecordingTransport],
) -> None:
    engine, transport = recorded
    assert engine.hybrid_search(SPACE, "kb1", "헌법", vec(1), 3, knowledge_ids=[]) == []
    assert transport.calls == []


def test_vector_retriever_reports_cosines_and_min_score_cuts(
    recorded: tuple[OpenSearchEngine, RecordingTransport],
) -> None:
    engine, _ = recorded
    hits = engine.hybrid_search(SPACE, "kb1", "x", vec(1), 5, keyword=False, min_score=0.9)
    assert [(h.id, round(h.score, 2)) for h in hits] == [("v1", 0.98)]  # b1's cosine is 0.8
