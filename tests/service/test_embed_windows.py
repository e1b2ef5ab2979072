"""Chunks longer than the embedding model's window (issue 12): what is indexed as a vector reflects the whole
chunk, not its first 256 tokens. The real MiniLM model, the real embedding stage, a vector-only search."""

from __future__ import annotations

import numpy as np
import pytest

from chalicelib.adapters.memory import MemoryEmbeddingCache
from chalicelib.adapters.models.local_onnx import MiniLmEmbedding
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, SearchRequest
from chalicelib.domain.ids import content_hash
from chalicelib.domain.types import Tenant
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.search import hybrid_search
from chalicelib.ports import IndexSpace
from chalicelib.services.embedding_runs import EmbeddingRun, window_key, windows_of

from .conftest import drain, upload

# Over 256 tokens of the same text at the head of both documents: truncated, they embed identically.
HEAD = " ".join(
    f"Section {i} of the household handbook explains how the shared laundry room is booked, cleaned and "
    "kept quiet after ten in the evening."
    for i in range(14)
)
TAILS = {
    "notes-1.md": "The pottery kiln in the cellar fires stoneware glazes at 1280 degrees Celsius overnight.",
    "notes-2.md": "The sailing dinghy is moored at the marina pontoon and needs its mainsail reefed in gales.",
}


@pytest.fixture(scope="module")
def minilm() -> MiniLmEmbedding:
    return MiniLmEmbedding(intra_op_threads=1)


def cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_the_head_alone_fills_the_window(minilm: MiniLmEmbedding) -> None:
    text = HEAD + " " + TAILS["notes-1.md"]
    parts = windows_of(minilm, text)
    assert len(parts) == 2 and TAILS["notes-1.md"] in parts[-1] and TAILS["notes-1.md"] not in parts[0]
    truncated = minilm.embed([text, HEAD + " " + TAILS["notes-2.md"]])
    assert cos(truncated[0], truncated[1]) > 0.999  # the model alone never sees the tails


def test_a_long_text_vector_reflects_its_tail_and_is_cached_apart_from_a_truncated_one(
    deps: Services, minilm: MiniLmEmbedding, cache: MemoryEmbeddingCache
) -> None:
    kiln, boat = (HEAD + " " + t for t in TAILS.values())
    space = IndexSpace.of(minilm)
    stale = minilm.embed([kiln])  # what an earlier version cached under the plain hash
    cache.put_many("t1", space, {content_hash(kiln): stale[0]})
    run = EmbeddingRun(deps, "t1", minilm)
    vectors = run.embed([kiln, boat, "short text"])
    assert run.cache_hits == 0 and run.texts_embedded == 3
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    query = minilm.embed(["At what temperature does the pottery kiln fire stoneware?"])[0]
    assert cos(vectors[0], query) > cos(vectors[1], query) + 0.05
    assert cos(vectors[0], query) > cos(stale[0], query) + 0.05
    assert window_key(kiln, windows_of(minilm, kiln)) != content_hash(kiln)
    again = EmbeddingRun(deps, "t1", minilm)  # a redelivery: the same vectors, from the cache
    np.testing.assert_array_equal(again.embed([kiln, boat, "short text"]), vectors)
    assert again.cache_hits == 3 and again.texts_embedded == 0


def test_a_vector_only_search_finds_the_chunk_by_a_fact_past_the_window(
    deps: Services, minilm: MiniLmEmbedding, tenant: Tenant
) -> None:
    deps.replace_embedding_model(minilm)
    kb = create_kb(
        deps,
        tenant.id,
        CreateKnowledgeBase(
            name="home",
            chunking_config={"chunk_size": 4000, "chunk_overlap": 0},
            indexing_strategy={"vector_enabled": True, "keyword_enabled": False},
        ),
    )
    # One title for both: truncated to the window their vectors would be equal and one query would miss.
    ids = {
        name: upload(deps, kb, "notes.md", (HEAD + "\n\n" + tail + "\n").encode()).id
        for name, tail in TAILS.items()
    }
    drain(deps)
    assert all(len(deps.chunks.list(i)) == 1 for i in ids.values())  # one chunk each, over the window
    for name, query in (
        ("notes-1.md", "At what temperature does the pottery kiln fire stoneware?"),
        ("notes-2.md", "Where is the sailing dinghy moored?"),
    ):
        hits = hybrid_search(deps, tenant.id, kb.id, SearchRequest(query_text=query, match_count=2))
        assert hits[0]["knowledge_id"] == ids[name], (name, hits)
        assert len({h["chunk_id"] for h in hits}) == len(hits) == 2  # one result per chunk
