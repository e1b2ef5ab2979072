"""Words joined by what Lucene's standard tokenizer keeps inside a token (`.`, `_`, `'`, `:`, `,`, `·`, ...):
the embedded engine (AWS's stand-in locally) and OpenSearch (osmem-server) split them alike, so a query
for one part (`js`, `config`, `14`, `example`, `don`) finds the same documents on both, and a query for the
whole (`node.js`) still finds them. An index created before the split keeps its joined tokens, and its
documents still match the whole word."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from index_contract import DIM, entry

from chalicelib.adapters.index.embedded import EmbeddedEngine
from chalicelib.adapters.index.opensearch import (
    ANALYSIS_VERSION,
    OpenSearchEngine,
    build_opensearch_client,
    index_body,
)
from chalicelib.ports import IndexSpace, RetrieveEngine

DOCUMENTS = {
    "node": "Install node.js before the build",
    "snake": "Call parse_config with the path",
    "pi": "Pi is 3.14 roughly",
    "site": "Visit example.com for the docs",
    "quote": "We don't ship on Fridays",
    "colon": "The ratio a:b is fixed",
    "comma": "It costs 1,250 coins",
    "middot": "The l·l of Catalan",
    "wide": "Ｆｕｌｌ．ｗｉｄｔｈ stops",
    "dunder": "Override __init__ here",
}
#: query -> the documents it finds (on both engines)
EXPECTED = {
    "js": {"node"},
    "node": {"node"},
    "node.js": {"node"},
    "config": {"snake"},
    "parse_config": {"snake"},
    "parse": {"snake"},
    "14": {"pi"},
    "3.14": {"pi"},
    "example": {"site"},
    "com": {"site"},
    "don": {"quote"},
    "don't": {"quote"},
    "b": {"colon"},
    "1": {"comma"},
    "250": {"comma"},
    "l": {"middot"},
    "width": {"wide"},
    "init": {"dunder"},
}


def _found(engine: RetrieveEngine, space: IndexSpace, query: str) -> set[str]:
    hits = engine.hybrid_search(space, "kb1", query, None, 20, keyword=True, vector=False)
    return {hit.knowledge_id for hit in hits}


@pytest.fixture
def space() -> IndexSpace:
    return IndexSpace(model_id=f"test-joiners-{uuid.uuid4().hex[:8]}", dimensions=DIM)


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[EmbeddedEngine]:
    engine = EmbeddedEngine(tmp_path / "index")
    yield engine
    engine.close()


@pytest.fixture
def opensearch(osmem_url: str) -> OpenSearchEngine:
    return OpenSearchEngine(build_opensearch_client(osmem_url), refresh=True)


def _indexed(engine: RetrieveEngine, space: IndexSpace) -> RetrieveEngine:
    engine.batch_index(space, [entry(k, text, knowledge=k) for k, text in DOCUMENTS.items()])
    return engine


def test_both_engines_split_joined_words_alike(
    embedded: EmbeddedEngine, opensearch: OpenSearchEngine, space: IndexSpace
) -> None:
    engines = {"embedded": _indexed(embedded, space), "opensearch": _indexed(opensearch, space)}
    found = {name: {q: _found(engine, space, q) for q in EXPECTED} for name, engine in engines.items()}
    assert found["embedded"] == EXPECTED
    assert found["opensearch"] == found["embedded"]


def test_an_index_from_before_the_split_still_finds_the_whole_word(
    opensearch: OpenSearchEngine, space: IndexSpace
) -> None:
    """Its analyzers keep `node.js` whole (they cannot change while it is open); the query text keeps the
    joiners, so the whole word still finds its documents there."""
    body = index_body(space)
    analysis = body["settings"]["analysis"]
    del analysis["char_filter"]
    for analyzer in analysis["analyzer"].values():
        del analyzer["char_filter"]
    del body["mappings"]["_meta"]
    opensearch.client.indices.create(index=space.name, body=body)
    _indexed(opensearch, space)

    for query in ("node.js", "parse_config", "3.14", "example.com", "don't"):
        assert _found(opensearch, space, query), query
    assert _found(opensearch, space, "config") == set()  # what a rebuild of the index brings


def test_a_new_index_records_its_analysis(opensearch: OpenSearchEngine, space: IndexSpace) -> None:
    opensearch.ensure_index(space)
    (found,) = opensearch.client.indices.get_mapping(index=space.name).values()  # the index behind the alias
    mapping = found["mappings"]
    assert mapping.get("_meta", {}).get("weknora_analysis") == ANALYSIS_VERSION == 3
