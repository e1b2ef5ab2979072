"""Hybrid fusion shared by every retrieval engine.

Both engines run BM25 and vector search as two separate best-first lists and fuse them here, so the local
and the OpenSearch back-ends order hybrid results the same way. Fusion is a convex combination of the
two lists' min-max normalised scores (Bruch, Gai and Ingber, "An Analysis of Fusion Functions for Hybrid
Retrieval", ACM TOIS 2023): normalising per list makes SQLite's and Lucene's BM25 scales, and cosine,
comparable, and unlike reciprocal-rank fusion it keeps how far ahead a list's best hit is. On the dev
corpus's known-item queries RRF (k=60) lost 6 of BM25's hits to chunks that both lists ranked moderately
(`bench/bench_recall.py`, bench/README.md).

`rank` is what the engines call: it fuses when both lists ran, and when one list ran alone (the `keyword` or
`vector` retriever, a keyword-only or vector-only knowledge base, a query the model cannot read) it scores
that list on its own scale instead, because min-max maps a list's worst hit to 0 and would throw away a real
match: a keyword hit scores its BM25 over the list's best (best 1, every match above 0), a vector hit its
cosine. Hits scoring 0 or less, or below `min_score`, are dropped before the top k is cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from chalicelib.ports import SearchHit

#: the BM25 list's share of a fused score (the vector list has the rest)
KEYWORD_WEIGHT = 0.6


def _normalised(hits: Sequence[SearchHit]) -> list[tuple[SearchHit, float]]:
    """A list's distinct hits with their scores mapped onto [0, 1] (best 1, worst 0; a flat list is all 1)."""
    seen: set[str] = set()
    distinct = []
    for hit in hits:
        if hit.id not in seen:  # a list must not vote twice for one entry
            seen.add(hit.id)
            distinct.append(hit)
    if not distinct:
        return []
    high = max(h.score for h in distinct)
    low = min(h.score for h in distinct)
    span = high - low
    return [(h, (h.score - low) / span if span > 0 else 1.0) for h in distinct]


def fuse(
    bm25_hits: Sequence[SearchHit],
    vector_hits: Sequence[SearchHit],
    top_k: int,
    *,
    keyword_weight: float = KEYWORD_WEIGHT,
) -> list[SearchHit]:
    """Fuses two best-first lists: score = w · bm25' + (1 − w) · cosine', each min-max normalised over its
    list. Each hit keeps its rank in each list it is in (`bm25_rank`, `vector_rank`, from 1); a hit found
    by both keeps the BM25 copy's fields, and the raw engine scores stay in `extra` (`bm25_score`,
    `vector_score`). Ties break on the better single rank, then on the id, so the order is deterministic.
    """
    if top_k <= 0:
        return []
    if not 0.0 <= keyword_weight <= 1.0:
        raise ValueError(f"keyword_weight must be within [0, 1], not {keyword_weight}")
    fused: dict[str, SearchHit] = {}
    lists = (("bm25_rank", keyword_weight, bm25_hits), ("vector_rank", 1.0 - keyword_weight, vector_hits))
    for attr, weight, hits in lists:
        for rank, (hit, share) in enumerate(_normalised(hits), start=1):
            current = fused.get(hit.id)
            if current is None:
                current = replace(hit, score=0.0, bm25_rank=None, vector_rank=None, extra=dict(hit.extra))
                fused[hit.id] = current
            else:
                for key, value in hit.extra.items():
                    current.extra.setdefault(key, value)
            setattr(current, attr, rank)
            current.score += weight * share

    def order(hit: SearchHit) -> tuple[float, int, str]:
        ranks = [r for r in (hit.bm25_rank, hit.vector_rank) if r is not None]
        return (-hit.score, min(ranks), hit.id)

    return sorted(fused.values(), key=order)[:top_k]


def _alone(hits: Sequence[SearchHit], attr: str, relative: bool) -> list[SearchHit]:
    """One list's distinct hits in its order, ranked from 1; scores over the best when `relative`."""
    seen: set[str] = set()
    out: list[SearchHit] = []
    best = max((h.score for h in hits), default=0.0)
    for hit in hits:
        if hit.id in seen:
            continue
        seen.add(hit.id)
        score = hit.score / best if relative and best > 0 else hit.score
        copy = replace(hit, score=score, bm25_rank=None, vector_rank=None, extra=dict(hit.extra))
        setattr(copy, attr, len(out) + 1)
        out.append(copy)
    return out


def rank(
    bm25_hits: Sequence[SearchHit] | None,
    vector_hits: Sequence[SearchHit] | None,
    top_k: int,
    *,
    keyword_weight: float = KEYWORD_WEIGHT,
    min_score: float = 0.0,
) -> list[SearchHit]:
    """The best `top_k` hits of the lists that ran (None: the list did not run). Both: `fuse`d, scores in
    [0, 1]. BM25 alone: each score over the list's best (the best is 1). Vector alone: the cosine. A hit
    scoring 0 or less, or below `min_score`, is left out."""
    if top_k <= 0:
        return []
    if bm25_hits is not None and vector_hits is not None:
        hits = fuse(bm25_hits, vector_hits, len(bm25_hits) + len(vector_hits), keyword_weight=keyword_weight)
    elif bm25_hits is not None:
        hits = _alone(bm25_hits, "bm25_rank", relative=True)
    elif vector_hits is not None:
        hits = _alone(vector_hits, "vector_rank", relative=False)
    else:
        return []
    return [h for h in hits if h.score > 0 and h.score >= min_score][:top_k]
