"""Hybrid fusion shared by every retrieval engine.

Both engines run BM25 and vector search as two separate best-first lists and fuse them here, so the local
and the OpenSearch back-ends order hybrid results the same way. Fusion is a convex combination of the
two lists' min-max normalised scores (Bruch, Gai and Ingber, "An Analysis of Fusion Functions for Hybrid
Retrieval", ACM TOIS 2023): normalising per list makes SQLite's and Lucene's BM25 scales, and cosine,
comparable, and unlike reciprocal-rank fusion it keeps how far ahead a list's best hit is. On the dev
corpus's known-item queries RRF (k=60) lost 6 of BM25's hits to chunks that both lists ranked moderately
(`bench/bench_recall.py`, bench/README.md).

A keyword match is still a match: the BM25 list's scores map onto [`KEYWORD_FLOOR`, 1], not [0, 1], so
an entry last in both lists (in a knowledge base of two or three documents, a real keyword match that is
also the less similar of the two) keeps a small score instead of 0 and is not dropped. The vector list keeps
[0, 1]: it ranks every entry that has a vector, related or not (in a small knowledge base, all of them), so
its last carries no evidence. The theoretical minimum (BM25 0, cosine 0 or -1: "TM2C2" in the paper) would
keep the match too, but on the dev corpus it lost 12-14 of the 266 known items (of 277) that min-max finds;
a floor on both lists of 0.02-0.1 found the same 266 (0.2 lost 4), and so does this floor on BM25 alone
(bench/README.md, 2026-12-04).

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
#: the normalised BM25 score of the list's worst match: above the 0 of an entry no query term matched
KEYWORD_FLOOR = 0.05


def _normalised(hits: Sequence[SearchHit], floor: float = 0.0) -> list[tuple[SearchHit, float]]:
    """A list's distinct hits with their scores mapped onto [floor, 1] (best 1, worst `floor`; a flat list
    is all 1)."""
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
    return [(h, floor + (1 - floor) * (h.score - low) / span if span > 0 else 1.0) for h in distinct]


def fuse(
    bm25_hits: Sequence[SearchHit],
    vector_hits: Sequence[SearchHit],
    top_k: int,
    *,
    keyword_weight: float = KEYWORD_WEIGHT,
) -> list[SearchHit]:
    """Fuses two best-first lists: score = w · bm25' + (1 − w) · cosine', each min-max normalised over its
    list (BM25 onto [KEYWORD_FLOOR, 1], cosine onto [0, 1]; 0 from a list the entry is not in). Each hit keeps its rank in each list it is in (`bm25_rank`, `vector_rank`, from 1); a hit found
    by both keeps the BM25 copy's fields, and the raw engine scores stay in `extra` (`bm25_score`,
    `vector_score`). Ties break on the better single rank, then on the id, so the order is deterministic.
    """
    if top_k <= 0:
        return []
    if not 0.0 <= keyword_weight <= 1.0:
        raise ValueError(f"keyword_weight must be within [0, 1], not {keyword_weight}")
    fused: dict[str, SearchHit] = {}
    lists = (
        ("bm25_rank", keyword_weight, _normalised(bm25_hits, KEYWORD_FLOOR)),
        ("vector_rank", 1.0 - keyword_weight, _normalised(vector_hits)),
    )
    for attr, weight, normalised in lists:
        for rank, (hit, share) in enumerate(normalised, start=1):
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
