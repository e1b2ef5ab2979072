"""Hybrid search over a knowledge base: BM25 and vector, fused in the engine (adapters/index/fusion.py)."""

from __future__ import annotations

from typing import Any

from chalicelib.commands import SearchRequest
from chalicelib.domain.text_fold import latin_share
from chalicelib.domain.types import ChunkType, ParseStatus
from chalicelib.ports import Dependencies, EmbeddingModel, IndexSpace
from chalicelib.services.ownership import require_kb
from chalicelib.services.usable import require_usable_for_api
from chalicelib.settings import LATIN_ONLY_EMBEDDING_MODELS

#: a query is the model's when at least this share of its letters is Latin
MIN_LATIN_SHARE = 0.7


def query_vector(model: EmbeddingModel, query: str) -> Any:
    """The query's vector, or None when the model cannot read the query's script: an English-only model's
    vector of a query mostly in another script is noise, and fused with the keyword list it pushes that list's hits
    out of the top k, so such a query is answered by the keyword list alone."""
    if model.model_id in LATIN_ONLY_EMBEDDING_MODELS and latin_share(query) < MIN_LATIN_SHARE:
        return None
    return model.embed([query[: model.max_input_chars]])[0]


def hybrid_search(
    deps: Dependencies, tenant_id: str, kb_id: str, request: SearchRequest
) -> list[dict[str, Any]]:
    kb = require_kb(deps, tenant_id, kb_id)
    if kb.type == "faq":  # entries with their answers, negatives pushed down (chalicelib/faq)
        from chalicelib.faq.entries import search as faq_search

        return faq_search(deps, kb, request)
    query, top_k = request.query_text, request.match_count
    model = require_usable_for_api(deps, kb)
    strategy = kb.indexing_strategy
    vector = query_vector(model, query) if strategy.vector_enabled else None
    hits = deps.engine(kb.retrieval_engine).hybrid_search(
        IndexSpace.of(model),
        kb.id,
        query,
        vector,
        top_k,
        keyword=strategy.keyword_enabled,
        vector=strategy.vector_enabled,
    )
    # Two batched reads for every hit's chunk and parent, one read per distinct document for its title.
    chunks = deps.chunks.get_many([(hit.knowledge_id, hit.chunk_id) for hit in hits])
    parent_keys = [
        (key[0], chunk.parent_chunk_id)
        for key, chunk in chunks.items()
        if chunk.parent_chunk_id and chunk.chunk_type == ChunkType.TEXT
    ]
    parents = deps.chunks.get_many(parent_keys) if parent_keys else {}
    titles = {}
    for knowledge_id in dict.fromkeys(hit.knowledge_id for hit in hits):
        knowledge = deps.knowledge.get(knowledge_id)
        if knowledge is not None and knowledge.parse_status != ParseStatus.DELETING:
            titles[knowledge_id] = knowledge.title
    results = []
    for hit in hits:
        if hit.knowledge_id not in titles:  # deleted, or being deleted: its entries are on their way out
            continue
        chunk = chunks.get((hit.knowledge_id, hit.chunk_id))
        content = chunk.content if chunk else hit.content
        parent = (
            parents.get((hit.knowledge_id, chunk.parent_chunk_id))
            if chunk and chunk.parent_chunk_id
            else None
        )
        if parent is not None and chunk is not None and chunk.chunk_type == ChunkType.TEXT:
            content = parent.content  # a child hit returns its parent's content (parent-child retrieval)
        results.append(
            {
                "id": hit.id,
                "chunk_id": hit.chunk_id,
                "knowledge_id": hit.knowledge_id,
                "knowledge_title": titles[hit.knowledge_id],
                "content": content,
                "score": hit.score,
                "match_type": "hybrid"
                if hit.bm25_rank is not None and hit.vector_rank is not None
                else ("keyword" if hit.bm25_rank is not None else "vector"),
                "start_at": chunk.start_at if chunk else None,
                "end_at": chunk.end_at if chunk else None,
            }
        )
    return results
