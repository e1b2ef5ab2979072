"""Embedding and indexing of a knowledge's chunks: WeKnora's processChunks, minus its weakest point.

WeKnora fails a whole document on one rate-limited batch and throws away every batch already embedded.
Here each finished batch is written to the embedding cache at once (the checkpoint), throttling backs off
with jitter and honours Retry-After, a long wait puts the stage back on its queue instead of failing it,
and a retried stage, a reparse or a clone only embeds texts the cache does not already hold.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from .bootstrap import Services
from .chunker import index_text
from .domain.errors import (
    ContinueLater,
    DeferredStageError,
    PermanentStageError,
    SpanErrorCode,
    TransientStageError,
)
from .domain.types import ChunkType, Knowledge, KnowledgeBase, Stage
from .ports import EmbeddingModel, IndexEntry, IndexSpace, ModelThrottled, ModelUnavailable, iter_batches

if TYPE_CHECKING:
    from .ports import Vectors

log = logging.getLogger(__name__)

#: how often a long embedding run reports progress on its span (a DynamoDB write each time)
PROGRESS_EVERY_SECONDS = 10.0


def out_of_time() -> bool:
    from .stage_runner import stage_deadline

    deadline = stage_deadline.get()
    return deadline is not None and time.monotonic() >= deadline


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


class EmbeddingRun:
    """Embeds texts through the cache; counts what went to the model and what came from the cache."""

    def __init__(
        self,
        svc: Services,
        model: EmbeddingModel,
        space: IndexSpace,
        progress: Callable[[dict[str, Any]], None] | None = None,
    ):
        self.svc = svc
        self.model = model
        self.space = space
        self.progress = progress
        self.texts_embedded = 0
        self.cache_hits = 0
        self.batches = 0
        self._last_progress = time.monotonic()

    def embed(self, texts: list[str]) -> Vectors:
        import numpy as np

        capped = [t[: self.model.max_input_chars] for t in texts]
        hashes = [content_hash(t) for t in capped]
        known = self.svc.embedding_cache().get_many(self.space, hashes)
        self.cache_hits += sum(1 for h in hashes if h in known)
        missing = {h: t for h, t in zip(hashes, capped, strict=True) if h not in known}
        # Checkpoint writes overlap the next batch's model call (I/O vs CPU); at most one batch is in
        # flight, and every write is confirmed before the stage goes on.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint") as writer:
            pending: Future[None] | None = None
            batches = list(iter_batches(list(missing.items()), self.svc.settings.embed_batch_size))
            for number, batch in enumerate(batches, start=1):
                vectors = self._embed_batch([text for _, text in batch])
                fresh = {h: vectors[i] for i, (h, _) in enumerate(batch)}
                if pending is not None:
                    pending.result()
                pending = writer.submit(self.svc.embedding_cache().put_many, self.space, fresh)
                known.update(fresh)
                self.texts_embedded += len(batch)
                self.batches += 1
                if (
                    self.progress is not None
                    and time.monotonic() - self._last_progress >= PROGRESS_EVERY_SECONDS
                ):
                    self._last_progress = time.monotonic()
                    self.progress(self.outputs())  # the heartbeat housekeeping reads, not one write per batch
                if out_of_time() and number < len(batches):
                    pending.result()  # the checkpoint is durable before the hand-over
                    raise ContinueLater(
                        f"embedded {self.texts_embedded} texts; continuing in a new invocation"
                    )
            if pending is not None:
                pending.result()
        if not hashes:
            return np.zeros((0, self.model.dimensions), dtype=np.float32)
        return np.vstack([known[h] for h in hashes]).astype(np.float32, copy=False)

    def _embed_batch(self, texts: list[str]) -> Vectors:
        from .adapters.models.errors import ModelRequestError
        from .adapters.models.retry import call_with_backoff

        settings = self.svc.settings
        try:
            return call_with_backoff(
                lambda: self.model.embed(texts),
                max_attempts=settings.embed_max_attempts,
                base_delay=settings.embed_backoff_base,
                max_delay=settings.embed_backoff_max,
                sleep=self.svc.sleep,
            )
        except ModelThrottled as error:
            delay = error.retry_after if error.retry_after is not None else settings.embed_backoff_max
            raise DeferredStageError(f"embedding provider throttled: {error}", delay_seconds=delay) from error
        except ModelUnavailable as error:
            raise TransientStageError(
                f"embedding provider failed: {error}", code=SpanErrorCode.EMBEDDING_PROVIDER_FAIL
            ) from error
        except ModelRequestError as error:
            raise PermanentStageError(
                f"embedding provider rejected the request: {error}",
                code=SpanErrorCode.EMBEDDING_PROVIDER_FAIL,
            ) from error

    def outputs(self) -> dict[str, Any]:
        return {"texts_embedded": self.texts_embedded, "cache_hits": self.cache_hits, "batches": self.batches}


def write_index(
    svc: Services, kb: KnowledgeBase, space: IndexSpace, knowledge_id: str, entries: list[IndexEntry]
) -> None:
    """Delete-then-write with a few quick retries (200 ms doubling), as WeKnora's indexer does."""
    engine = svc.engine(kb.retrieval_engine)
    delay = 0.2
    for attempt in range(svc.settings.index_write_attempts):
        try:
            engine.delete_by_knowledge(space, kb.id, [knowledge_id])
            engine.batch_index(space, entries)
            return
        except Exception as error:
            if attempt + 1 >= svc.settings.index_write_attempts:
                raise TransientStageError(
                    f"index write failed: {error}", code=SpanErrorCode.VECTORSTORE_WRITE_FAILED
                ) from error
            log.warning("index write failed (try %d): %s", attempt + 1, error)
            svc.sleep(delay)
            delay *= 2


def index_knowledge(svc: Services, knowledge: Knowledge, kb: KnowledgeBase) -> dict[str, Any]:
    chunks = [c for c in svc.chunks.list(knowledge.id) if c.metadata.get("attempt") == knowledge.attempt]
    text_chunks = [c for c in chunks if c.chunk_type == ChunkType.TEXT]
    strategy = kb.indexing_strategy
    if not strategy.needs_embedding:
        return {"chunks": len(chunks), "entries_indexed": 0, "skipped": "vector and keyword indexing are off"}
    model = svc.embedding_model(kb.embedding_model_id)
    space = svc.index_space(model)
    texts = [index_text(knowledge.title, c.context_header, c.content) for c in text_chunks]
    run = EmbeddingRun(svc, model, space, lambda out: svc.tracker.progress(knowledge, Stage.EMBEDDING, out))
    vectors = run.embed(texts) if strategy.vector_enabled else None
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
    write_index(svc, kb, space, knowledge.id, entries)
    engine = svc.engine(kb.retrieval_engine)
    return {
        "chunks": len(chunks),
        "entries_indexed": len(entries),
        **run.outputs(),
        "model": model.model_id,
        "dimensions": model.dimensions,
        "engine": engine.engine_name,
    }


def embed_texts(svc: Services, model: EmbeddingModel, texts: list[str]) -> Vectors:
    """Embeds a few texts (OCR chunks, queries) through the same cache and backoff."""
    return EmbeddingRun(svc, model, svc.index_space(model)).embed(texts)


def rollback_indexing(svc: Services, knowledge_id: str) -> None:
    """The specification's compensation when indexing fails for good: no orphan chunks or vectors."""
    knowledge = svc.knowledge.get(knowledge_id)
    if knowledge is None:
        return
    from .reparse import remove_derived_data

    remove_derived_data(svc, knowledge)


__all__ = ["EmbeddingRun", "embed_texts", "index_knowledge", "index_text", "rollback_indexing"]
