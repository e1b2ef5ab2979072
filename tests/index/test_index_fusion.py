"""Hybrid fusion, copy remapping, and tokeniser robustness of the embedded engine."""

from __future__ import annotations

import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from index_contract import DIM, entry

from chalicelib.adapters.index.analysis import index_terms
from chalicelib.adapters.index.common import remap_entry, remap_id
from chalicelib.adapters.index.embedded import EmbeddedEngine
from chalicelib.adapters.index.fusion import KEYWORD_FLOOR, fuse, rank
from chalicelib.ports import IndexEntry, IndexSpace, SearchHit


def hit(hid: str, score: float = 0.0, **extra: object) -> SearchHit:
    return SearchHit(
        id=hid, chunk_id=hid, knowledge_id="k", kb_id="kb", content=hid, score=score, extra=dict(extra)
    )


def test_fusion_weights_each_lists_min_max_normalised_scores() -> None:
    fused = fuse(
        [hit("a", 9, bm25_score=9), hit("b", 5), hit("d", 1)],
        [hit("b", 0.9, vector_score=0.9), hit("c", 0.5)],
        10,
        keyword_weight=0.6,
    )
    assert [(h.id, h.bm25_rank, h.vector_rank) for h in fused] == [
        ("b", 2, 1),
        ("a", 1, None),
        ("d", 3, None),
        ("c", None, 2),
    ]
    f = KEYWORD_FLOOR  # BM25 maps onto [f, 1], cosine onto [0, 1]
    assert fused[0].score == pytest.approx(0.6 * (f + (1 - f) * 0.5) + 0.4 * 1.0)  # b: BM25 (5-1)/(9-1)
    assert fused[1].score == pytest.approx(0.6)
    assert fused[2].score == pytest.approx(0.6 * f)  # BM25's worst is still a keyword match
    assert fused[3].score == 0.0  # the vector list's worst: every entry has a cosine, it is no evidence
    assert fused[0].extra == {"vector_score": 0.9}
    assert fused[1].extra == {"bm25_score": 9}


def test_a_lists_clear_winner_is_not_outvoted_by_hits_both_lists_rank_low() -> None:
    """RRF's failure on the dev corpus: an entry first in BM25 by far lost to entries both lists ranked
    moderately. Normalised scores keep the margin."""
    bm25 = [hit("win", 30.0)] + [hit(f"m{i}", 10.0 - i * 0.1) for i in range(6)]
    vector = [hit(f"m{i}", 0.60 - i * 0.01) for i in range(6)] + [hit("win", 0.2)]
    assert fuse(bm25, vector, 5)[0].id == "win"


def test_rank_fuses_two_lists_and_leaves_out_what_scores_zero() -> None:
    ranked = rank(
        [hit("a", 9), hit("b", 5), hit("d", 1)], [hit("b", 0.9), hit("c", 0.5)], 10, keyword_weight=0.6
    )
    assert [h.id for h in ranked] == ["b", "a", "d"]  # c is the vector list's worst and in no other: 0
    flat = rank([hit("a", 9)], [hit("b", 0.9)], 10, keyword_weight=0.6, min_score=0.5)
    assert [(h.id, h.score) for h in flat] == [("a", pytest.approx(0.6))]  # b's 0.4 is under the minimum


def test_a_keyword_match_last_in_both_lists_of_a_tiny_knowledge_base_is_kept() -> None:
    """Two documents both hold the query's word; the second is the weaker match in BM25 and the less similar
    in cosine. Min-max mapped it to 0 in both lists and `rank` dropped a real match."""
    bm25 = [hit("strong", 4.2), hit("weak", 1.3)]
    vector = [hit("strong", 0.61), hit("weak", 0.18)]
    ranked = rank(bm25, vector, 5)
    assert [(h.id, h.bm25_rank, h.vector_rank) for h in ranked] == [("strong", 1, 1), ("weak", 2, 2)]
    assert 0 < ranked[1].score < ranked[0].score == pytest.approx(1.0)
    # a third document no query term matches, last by cosine, is still left out
    assert [h.id for h in rank(bm25, [*vector, hit("other", 0.02)], 5)] == ["strong", "weak"]


def test_rank_scores_a_list_that_ran_alone_on_its_own_scale() -> None:
    """Min-max would map the last of two keyword matches to 0 and drop a real match."""
    keyword = rank([hit("a", 8), hit("b", 2), hit("a", 1)], None, 10)
    assert [(h.id, h.score, h.bm25_rank, h.vector_rank) for h in keyword] == [
        ("a", 1.0, 1, None),
        ("b", 0.25, 2, None),
    ]
    vector = rank(None, [hit("v", 0.7), hit("w", 0.0), hit("x", -0.2)], 10)
    assert [(h.id, h.score, h.vector_rank) for h in vector] == [("v", 0.7, 1)]  # a cosine of 0 or less is out
    assert rank(None, [hit("v", 0.7), hit("u", 0.4)], 10, min_score=0.5)[0].id == "v"
    assert len(rank(None, [hit("v", 0.7), hit("u", 0.4)], 10, min_score=0.5)) == 1
    assert rank(None, None, 10) == [] and rank([hit("a", 1)], None, 0) == []


def test_ties_break_on_best_rank_then_id_and_inputs_are_untouched() -> None:
    bm25 = [hit("z", 2.0), hit("y", 1.0)]
    vector = [hit("x", 0.9), hit("w", 0.1)]
    fused = fuse(bm25, vector, 10, keyword_weight=0.5)
    assert [h.id for h in fused] == ["x", "z", "y", "w"]  # x, z: a tie at 0.5, both first in a list
    assert fused[2].score > fused[3].score == 0.0  # y is still a keyword match; w, the last cosine, is not
    assert bm25[0].bm25_rank is None and bm25[0].score == 2.0  # copies, not the caller's objects


def test_top_k_one_list_flat_scores_and_duplicates() -> None:
    fused = fuse([hit("a", 3.0), hit("a", 1.0), hit("b", 1.0)], [], 1)
    assert [(h.id, h.score) for h in fused] == [("a", pytest.approx(0.6))]
    assert fuse([hit("b", 4.0)], [], 3)[0].bm25_rank == 1  # a one-hit list: that hit is the best
    assert fuse([hit("a", 3.0), hit("a", 2.0), hit("b", 1.0)], [], 5)[1].bm25_rank == 2  # no rank for a twin
    assert fuse([hit("a")], [hit("a")], 0) == []
    assert [h.id for h in fuse([], [hit("v", 0.3), hit("u", 0.3)], 5)] == ["v", "u"]  # flat: list order
    with pytest.raises(ValueError):
        fuse([hit("a")], [], 5, keyword_weight=1.5)


def test_remap_ids() -> None:
    id_map = {"c1": "n1", "c2": "n2"}
    assert remap_id("c1", "c1", "n1", id_map) == "n1"
    assert remap_id("c1-q3", "c1", "n1", id_map) == "n1-q3"
    assert remap_id("c2", "c1", "n1", id_map) == "n2"
    assert remap_id("other", "c1", "n1", id_map) == "n1:other"
    e = IndexEntry(id="c1-q0", kb_id="kb", knowledge_id="k", chunk_id="c1", content="t", source_id="k")
    new = remap_entry(e, "kb2", "k", "k2", id_map)
    assert new is not None
    assert (new.id, new.kb_id, new.knowledge_id, new.chunk_id, new.source_id) == (
        "n1-q0",
        "kb2",
        "k2",
        "n1",
        "k2",
    )
    e.source_id = "elsewhere"
    assert remap_entry(e, "kb2", "k", "k2", id_map).source_id == "elsewhere"  # type: ignore[union-attr]
    e.chunk_id = "c9"
    assert remap_entry(e, "kb2", "k", "k2", id_map) is None


SPACE = IndexSpace(model_id="fuzz", dimensions=DIM)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=st.lists(st.text(max_size=40), min_size=1, max_size=5), query=st.text(max_size=30))
def test_any_unicode_indexes_and_queries_without_error(docs: list[str], query: str) -> None:
    with tempfile.TemporaryDirectory() as root:
        engine = EmbeddedEngine(root)
        engine.batch_index(SPACE, [entry(f"d{i}", text) for i, text in enumerate(docs)])
        hits = engine.hybrid_search(SPACE, "kb1", query, None, 10)
        assert len({h.id for h in hits}) == len(hits)
        # Any document's own first term finds that document.
        for i, text in enumerate(docs):
            terms = index_terms(text)
            if terms:
                found = engine.hybrid_search(SPACE, "kb1", terms[0], None, 10)
                assert f"d{i}" in [h.id for h in found]
        engine.close()


def test_unit_vectors_are_stored_normalised() -> None:
    with tempfile.TemporaryDirectory() as root:
        engine = EmbeddedEngine(root)
        engine.batch_index(
            SPACE,
            [
                entry("a", "x", vector=np.full(DIM, 3.0, np.float32)),
                entry("z", "y", vector=np.zeros(DIM, np.float32)),
            ],
        )
        hits = engine.hybrid_search(SPACE, "kb1", "", np.ones(DIM, np.float32), 5)
        assert [h.id for h in hits] == ["a"]  # the zero vector is stored as "no vector"
        assert (
            hits[0].extra["vector_score"] == np.float32(1.0) or abs(hits[0].extra["vector_score"] - 1) < 1e-6
        )
        engine.close()
