"""The BM25 text OpenSearchEngine sends stays within OpenSearch's 1,024 clauses, whatever the query repeats,
and a query OpenSearch still refuses is the tenant's 400 `query_too_complex` (recording transport, no server).

A match query makes one clause per token its analyzer gives, repeats included (standard tokenizer +
cjk_bigram: a bigram per pair of ideographs or kana, a token per emoji). The term cap counted the distinct
terms of the Python tokenizer and sent the text as written: a word repeated 1,100 times, a run of ideographs
the Python tokenizer took for one word, or emoji it drops, all passed the cap and made a 400 from the server,
answered as a 500 with the server's reason in the log.
"""

from __future__ import annotations

from typing import Any

import pytest
from index_contract import DIM, vec
from opensearchpy import OpenSearch, Transport
from opensearchpy.exceptions import RequestError

from chalicelib.adapters.index.analysis import index_terms
from chalicelib.adapters.index.common import QueryTooComplex
from chalicelib.adapters.index.opensearch import OpenSearchEngine
from chalicelib.ports import IndexSpace
from chalicelib.ports.index import IndexRefused

SPACE = IndexSpace(model_id="BAAI/bge-m3", dimensions=DIM)
SERVER_REASON = "failed to create query: SERVER-SECRET-REASON"


class Recording(Transport):
    """Records each search body; `refuse` makes the BM25 (or every) search a 400 as OpenSearch answers one."""

    bodies: list[dict[str, Any]]
    refuse: str

    def perform_request(  # type: ignore[override]
        self, method: str, url: str, params: Any = None, body: Any = None, **_: Any
    ) -> Any:
        if method == "HEAD":
            return True
        assert url.endswith("/_search"), url
        self.bodies.append(body)
        is_knn = "knn" in body["query"]
        if self.refuse == "all" or (self.refuse == "bm25" and not is_knn):
            raise RequestError(
                400,
                "search_phase_execution_exception",
                {
                    "error": {
                        "type": "search_phase_execution_exception",
                        "root_cause": [{"type": "query_shard_exception", "reason": SERVER_REASON}],
                        "caused_by": {"type": "too_many_clauses", "reason": "maxClauseCount is set to 1024"},
                    },
                    "status": 400,
                },
            )
        return {"hits": {"hits": []}}


@pytest.fixture
def recorded() -> tuple[OpenSearchEngine, Recording]:
    client = OpenSearch(hosts=[{"host": "example.invalid", "port": 9200}], transport_class=Recording)
    transport = client.transport
    assert isinstance(transport, Recording)
    transport.bodies, transport.refuse = [], ""
    return OpenSearchEngine(client, candidates=50), transport


def _sent(recorded: tuple[OpenSearchEngine, Recording], query: str) -> str:
    """The text of the BM25 match query a keyword search sends for `query` (both fields get the same)."""
    engine, transport = recorded
    transport.bodies.clear()
    engine.hybrid_search(SPACE, "kb1", query, None, 5, vector=False)
    (body,) = transport.bodies
    content, folded = body["query"]["bool"]["must"][0]["dis_max"]["queries"]
    assert content["match"]["content"]["query"] == folded["match"]["search_text"]["query"]
    text: str = content["match"]["content"]["query"]
    return text


def test_a_repeated_word_is_asked_for_once(recorded: tuple[OpenSearchEngine, Recording]) -> None:
    assert _sent(recorded, "harbour " * 1100) == "harbour"


def test_a_page_of_repeated_chinese_sends_its_distinct_bigrams(
    recorded: tuple[OpenSearchEngine, Recording],
) -> None:
    assert _sent(recorded, "中华人民共和国" * 1000) == "中华 华人 人民 民共 共和 和国 国中"


def _cycle(first: int, count: int, length: int) -> str:
    return "".join(chr(first + n % count) for n in range(length))


@pytest.mark.parametrize(
    "run",
    [
        _cycle(0x20000, 1200, 1200),  # CJK extension B: 1,199 bigrams for Lucene
        _cycle(0x30000, 1200, 1200),  # extension G
        _cycle(0x3021, 9, 1200),  # Hangzhou numerals
        "〇" * 1200,
        _cycle(0x31F0, 16, 1200),  # Katakana phonetic extensions
        _cycle(0x1B001, 200, 1200),  # hentaigana (kana supplement)
    ],
    ids=["ext-b", "ext-g", "hangzhou-numerals", "ideographic-zero", "katakana-ext", "hentaigana"],
)
def test_a_run_lucene_pairs_is_sent_as_at_most_128_pairs(
    recorded: tuple[OpenSearchEngine, Recording], run: str
) -> None:
    """These ideographs and kana were one Python word of any length; cjk_bigram pairs each with its neighbour."""
    pieces = _sent(recorded, run).split(" ")
    assert 1 <= len(pieces) <= 128
    assert all(len(piece) == 2 for piece in pieces)  # bigrams, each a clause
    assert pieces[0] == run[:2]


@pytest.mark.parametrize(
    "query",
    [
        "".join(chr(0x1F300 + n) for n in range(1100)),  # emoji: a token each for Lucene, none for Python
        "🙂 " * 2000,
        "!? …" * 500,
    ],
    ids=["emoji-run", "repeated-emoji", "punctuation"],
)
def test_a_query_without_a_term_asks_no_bm25_search(
    recorded: tuple[OpenSearchEngine, Recording], query: str
) -> None:
    """As on the embedded engine, nothing the analysis keeps finds nothing; the vector list still runs."""
    engine, transport = recorded
    assert engine.hybrid_search(SPACE, "kb1", query, None, 5, vector=False) == []
    assert transport.bodies == []
    engine.hybrid_search(SPACE, "kb1", query, vec(1), 5)
    assert ["knn" in body["query"] for body in transport.bodies] == [True]


def test_words_keep_what_joins_them_for_lucene(recorded: tuple[OpenSearchEngine, Recording]) -> None:
    """`node.js`, `don't`, `3.14`, `snake_case` are sent as written: the index's char filter splits them as
    the documents were split, and an index from before that filter holds them whole, so they still match
    there; a repeat goes once, and a dash or a trailing dot is a break as for Lucene."""
    sent = _sent(recorded, "Node.js don't 3.14 snake_case e-mail node.js, end.")
    assert sent == "node.js don't 3.14 snake_case e mail end"


def test_the_sent_text_never_holds_more_than_128_terms(recorded: tuple[OpenSearchEngine, Recording]) -> None:
    queries = [
        " ".join(f"w{n}.x{n}" for n in range(900)),  # joined pieces count each word they hold
        "a.b.c.d.e.f.g.h " * 600,
        ".".join(f"w{n}" for n in range(1500)),  # one piece longer than the cap: its first 128 words
        "대한민국헌법제1조" * 900,
    ]
    for query in queries:
        assert len(index_terms(_sent(recorded, query))) <= 128
    assert _sent(recorded, ".".join(f"w{n}" for n in range(1500))) == " ".join(f"w{n}" for n in range(128))


def test_the_proximity_phrases_are_those_of_the_query_terms(
    recorded: tuple[OpenSearchEngine, Recording],
) -> None:
    engine, transport = recorded
    engine.hybrid_search(SPACE, "kb1", "harbour lamp " * 600, None, 5, vector=False)
    (body,) = transport.bodies
    phrases = [
        query["match_phrase"]["content"]["query"]
        for clause in body["query"]["bool"]["should"]
        for query in clause["dis_max"]["queries"]
        if "content" in query["match_phrase"]
    ]
    assert phrases == ["harbour lamp"]


def test_a_bm25_search_the_server_refuses_is_query_too_complex(
    recorded: tuple[OpenSearchEngine, Recording],
) -> None:
    engine, transport = recorded
    transport.refuse = "bm25"
    with pytest.raises(QueryTooComplex) as refused:
        engine.hybrid_search(SPACE, "kb1", "harbour lamp", vec(1), 5)
    error = refused.value
    assert (error.status, error.code) == (400, "query_too_complex")
    assert "SERVER" not in error.message and "maxClauseCount" not in error.message
    assert error.__cause__ is None and error.__suppress_context__  # the server's answer is not carried along


def test_a_refused_knn_search_is_not_the_querys_fault(recorded: tuple[OpenSearchEngine, Recording]) -> None:
    """The kNN request holds no text of the tenant's: a 400 there is ours (a wrong dimension, a mapping) and
    is the port's IndexRefused (its status and type only)."""
    engine, transport = recorded
    transport.refuse = "all"
    with pytest.raises(IndexRefused) as raised:
        engine.hybrid_search(SPACE, "kb1", "", vec(1), 5)
    assert not isinstance(raised.value, QueryTooComplex) and raised.value.http_status == "400"
