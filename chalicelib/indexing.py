"""Embedding and indexing of a knowledge's chunks (WeKnora's processChunks, indexing half)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import numpy as np

from .bootstrap import Services
from .domain.errors import SpanErrorCode, TransientStageError
from .domain.types import ChunkType, Knowledge, KnowledgeBase
from .ports import EmbeddingModel, IndexEntry, ModelThrottled, ModelUnavailable, iter_batches

if TYPE_CHECKING:
    from .ports import Vectors

log = logging.getLogger(__name__)


def index_text(title: str, context_header: str, content: str) -> str:
    """Index text = title + breadcrumb + trimmed content (spec §1.10)."""
    body = content.strip()
    if context_header:
        body = f"{context_header}\n\n{body}"
    return f"{title}\n{body}" if title else body


def embed_texts(model: EmbeddingModel, texts: list[str], batch_size: int) -> Vectors:
    if not texts:
        return np.zeros((0, model.dimensions), dtype=np.float32)
    parts = []
    for batch in iter_batches(texts, batch_size):
        try:
            parts.append(model.embed([t[: model.max_input_chars] for t in batch]))
        except ModelThrottled as error:
            raise TransientStageError(
                f"embedding provider throttled: {error}", code=SpanErrorCode.EMBEDDING_RATE_LIMIT
            ) from error
        except ModelUnavailable as error:
            raise TransientStageError(
                f"embedding provider failed: {error}", code=SpanErrorCode.EMBEDDING_PROVIDER_FAIL
            ) from error
    return np.vstack(parts).astype(np.float32, copy=False)


def index_knowledge(svc: Services, knowledge: Knowledge, kb: KnowledgeBase) -> dict[str, Any]:
    chunks = [c for c in svc.chunks.list(knowledge.id) if c.metadata.get("attempt") == knowledge.attempt]
    text_chunks = [c for c in chunks if c.chunk_type == ChunkType.TEXT]
    strategy = kb.indexing_strategy
    if not strategy.needs_embedding:
        return {"chunks": len(chunks), "entries_indexed": 0, "skipped": "vector and keyword indexing are off"}
    model = svc.embedding_model(kb.embedding_model_id)
    space = svc.index_space(model)
    texts = [index_text(knowledge.title, c.context_header, c.content) for c in text_chunks]
    vectors = embed_texts(model, texts, svc.settings.embed_batch_size) if strategy.vector_enabled else None
    entries = [
        IndexEntry(
            id=chunk.id,
            kb_id=kb.id,
            knowledge_id=knowledge.id,
            chunk_id=chunk.id,
            content=text,
            vector=None if vectors is None else vectors[i],
            source_id=chunk.id,
            chunk_type=chunk.chunk_type.value,
            is_enabled=chunk.is_enabled,
        )
        for i, (chunk, text) in enumerate(zip(text_chunks, texts, strict=True))
    ]
    engine = svc.engine(kb.retrieval_engine)
    try:
        engine.delete_by_knowledge(space, kb.id, [knowledge.id])
        engine.batch_index(space, entries)
    except Exception as error:
        raise TransientStageError(
            f"index write failed: {error}", code=SpanErrorCode.VECTORSTORE_WRITE_FAILED
        ) from error
    svc.chunks.mark_indexed(knowledge.id, [e.chunk_id for e in entries])
    return {
        "chunks": len(chunks),
        "entries_indexed": len(entries),
        "texts_embedded": len(texts) if vectors is not None else 0,
        "model": model.model_id,
        "dimensions": model.dimensions,
        "engine": engine.engine_name,
    }
