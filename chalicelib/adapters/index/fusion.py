"""Reciprocal-rank fusion shared by every retrieval engine.

Both engines run BM25 and vector search as two separate ranked lists and fuse them here, so the
local and the OpenSearch back-ends order hybrid results the same way (only ranks are used: BM25
scores from SQLite and Lucene are not comparable, and cosine scores differ in scale).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from chalicelib.ports import SearchHit

RRF_K = 60


def rrf_fuse(
    bm25_hits: Sequence[SearchHit],
    vector_hits: Sequence[SearchHit],
    top_k: int,
    *,
    k: int = RRF_K,
) -> list[SearchHit]:
    """Fuses two best-first lists by RRF: score = Σ 1 / (k + rank), rank starting at 1.

    A hit found by both lists keeps the BM25 copy's fields and gains both ranks; the raw engine
    scores stay in `extra` (`bm25_score`, `vector_score`). Ties break on the better single rank,
    then on the id, so the order is deterministic.
    """
    if top_k <= 0:
        return []
    fused: dict[str, SearchHit] = {}
    for attr, hits in (("bm25_rank", bm25_hits), ("vector_rank", vector_hits)):
        seen: set[str] = set()
        rank = 0
        for hit in hits:
            if hit.id in seen:  # a list must not vote twice for one entry
                continue
            seen.add(hit.id)
            rank += 1
            current = fused.get(hit.id)
            if current is None:
                current = replace(hit, score=0.0, bm25_rank=None, vector_rank=None, extra=dict(hit.extra))
                fused[hit.id] = current
            else:
                for key, value in hit.extra.items():
                    current.extra.setdefault(key, value)
            setattr(current, attr, rank)
            current.score += 1.0 / (k + rank)

    def order(hit: SearchHit) -> tuple[float, int, str]:
        ranks = [r for r in (hit.bm25_rank, hit.vector_rank) if r is not None]
        return (-hit.score, min(ranks), hit.id)

    return sorted(fused.values(), key=order)[:top_k]
