"""Embedding texts for the pipeline, the FAQ and the API: through the embedding cache with backoff
(`EmbeddingRun`, `embed_texts`, `embed_query`, `embed_for_api`), the API's answers for a model that fails.

Windows: Texts longer than the embedding model's window (issue 12): a model that reads only its first N tokens
(MiniLM: 256) would embed such a chunk truncated, its tail invisible to vector search. A model that says
how it cuts a text into windows it reads whole (`windows(text) -> list[str]`, on token boundaries) gets
every window embedded; the text's vector is the mean of the window vectors weighted by their length, L2-normalised.

One vector per text, so search stays one result per chunk and a redelivered slice upserts the same entry.
The cache key of a windowed text differs from a plain text's (`windowed_key`): a vector cached before this
change (the truncated one) is never taken for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from chalicelib.domain import metering
from chalicelib.domain.errors import (
    DeferredStageError,
    PermanentStageError,
    ServiceUnavailable,
    SpanErrorCode,
    StageError,
    TransientStageError,
)
from chalicelib.domain.ids import content_hash
from chalicelib.observability import logger
from chalicelib.ports import (
    Dependencies,
    EmbeddingModel,
    IndexSpace,
    ModelRequestError,
    ModelThrottled,
    ModelUnavailable,
    iter_batches,
)
from chalicelib.services.backoff import call_with_backoff

if TYPE_CHECKING:
    from chalicelib.ports import Vectors

#: cache-key prefix of texts embedded as several windows (bump when the pooling changes)
WINDOWED = "\x00windows-v1\x00"


def windows_of(model: Any, text: str) -> list[str]:
    """The pieces `model` reads whole, in order; `[text]` when it fits or the model has no window."""
    split = getattr(model, "windows", None)
    limit = getattr(model, "max_tokens", 0)
    # Every token but [CLS]/[SEP] covers at least one character: a shorter text cannot overflow.
    if split is None or not limit or len(text) <= limit - 2:
        return [text]
    parts: list[str] = split(text)
    return parts or [text]


def window_key(text: str, parts: Sequence[str]) -> str:
    """Embedding-cache key: the plain content hash, or a distinct one for a windowed text."""
    return content_hash(text) if len(parts) == 1 else content_hash(WINDOWED + text)


def pool(vectors: Vectors, parts: Sequence[Sequence[str]]) -> Vectors:
    """One row per text from the rows of its windows (flattened in order): length-weighted mean, unit norm."""
    import numpy as np

    out = np.zeros((len(parts), vectors.shape[1]), dtype=np.float32)
    row = 0
    for i, pieces in enumerate(parts):
        n = len(pieces)
        if n == 1:
            out[i] = vectors[row]
        else:
            weights = np.array([max(len(p), 1) for p in pieces], dtype=np.float32)
            mean = (vectors[row : row + n] * weights[:, None]).sum(axis=0)
            out[i] = mean / max(float(np.linalg.norm(mean)), 1e-12)
        row += n
    return out


#: how often a long embedding run reports progress on its span (a DynamoDB write each time)
PROGRESS_EVERY_SECONDS = 10.0


class EmbeddingRun:
    """Embeds texts through the tenant's cache; counts what went to the model and what came from the cache
    (the cache is the tenant's own: these counts are shown to it)."""

    def __init__(
        self,
        deps: Dependencies,
        tenant_id: str,
        model: EmbeddingModel,
        progress: Callable[[dict[str, Any]], None] | None = None,
        space: IndexSpace | None = None,
    ):
        self.deps = deps
        self.tenant_id = tenant_id
        self.model = model
        self.space = space or IndexSpace.of(model)
        self.progress = progress
        self.texts_embedded = 0
        self.cache_hits = 0
        self.batches = 0
        self._last_progress = time.monotonic()

    def embed(self, texts: list[str]) -> Vectors:
        import numpy as np

        capped = [t[: self.model.max_input_chars] for t in texts]
        # A text over the model's window is embedded as windows, pooled to one vector (windows_of, pool).
        parts = [windows_of(self.model, t) for t in capped]
        hashes = [window_key(t, p) for t, p in zip(capped, parts, strict=True)]
        cache = self.deps.embedding_cache()
        known = cache.get_many(self.tenant_id, self.space, hashes)
        self.cache_hits += sum(1 for h in hashes if h in known)
        windows = dict(zip(hashes, parts, strict=True))
        missing = {h: t for h, t in zip(hashes, capped, strict=True) if h not in known}
        # Checkpoint writes overlap the next batch's model call (I/O vs CPU); at most one batch is in
        # flight, and every write is confirmed before the stage goes on.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint") as writer:
            pending: Future[None] | None = None
            batches = list(iter_batches(list(missing.items()), self.deps.settings.embed_batch_size))
            for batch in batches:
                pieces = [windows[h] for h, _ in batch]
                vectors = pool(self._embed_batch([p for ps in pieces for p in ps]), pieces)
                fresh = {h: vectors[i] for i, (h, _) in enumerate(batch)}
                if pending is not None:
                    pending.result()
                # in the invocation's context (its meter, the local function name), its CPU time counted
                pending = writer.submit(
                    metering.thread_work(cache.put_many), self.tenant_id, self.space, fresh
                )
                known.update(fresh)
                self.texts_embedded += len(batch)
                self.batches += 1
                if (
                    self.progress is not None
                    and time.monotonic() - self._last_progress >= PROGRESS_EVERY_SECONDS
                ):
                    self._last_progress = time.monotonic()
                    self.progress(self.outputs())  # the heartbeat housekeeping reads, not one write per batch
            if pending is not None:
                pending.result()
        if not hashes:
            return np.zeros((0, self.model.dimensions), dtype=np.float32)
        return np.vstack([known[h] for h in hashes]).astype(np.float32, copy=False)

    def _embed_batch(self, texts: list[str]) -> Vectors:
        settings = self.deps.settings
        try:
            return call_with_backoff(
                lambda: self.model.embed(texts),
                max_attempts=settings.embed_max_attempts,
                base_delay=settings.embed_backoff_base,
                max_delay=settings.embed_backoff_max,
                sleep=self.deps.sleep,
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


def embed_texts(deps: Dependencies, tenant_id: str, model: EmbeddingModel, texts: list[str]) -> Vectors:
    """Embeds a few texts (OCR chunks, queries) through the same cache (the tenant's) and backoff."""
    return EmbeddingRun(deps, tenant_id, model).embed(texts)


def embed_query(deps: Dependencies, tenant_id: str, model: EmbeddingModel, query: str) -> Vectors:
    """A search query's vector (both searches: documents' and FAQ entries'): `embed_for_api`."""
    return embed_for_api(deps, tenant_id, model, [query])[0]


def embed_for_api(deps: Dependencies, tenant_id: str, model: EmbeddingModel, texts: Sequence[str]) -> Vectors:
    """Texts an API request embeds (a search query, an edited chunk), through the cache and backoff of
    `embed_texts`, its failures answered as an API call answers them: a provider that throttles or keeps
    failing is 503 `embedding_unavailable` (`details.retry_after`: the wait the provider named, if it did),
    one that refuses the request (the operator's credentials, a model it does not serve) 503
    `embedding_refused`, as a storage backend refusing its keys is: neither is the tenant's to fix, and a
    4xx would blame the request. The provider's words stay out of the answer and the log (they may quote a
    key); the log names the model and the kind of failure for the operator."""
    try:
        return embed_texts(deps, tenant_id, model, list(texts))
    except StageError as error:
        cause = error.__cause__  # the model port's error (`_embed_batch` raises the stage error from it)
        logger.warning(
            "embedding for an API request failed",
            extra={"model": model.model_id, "error": type(cause if cause is not None else error).__name__},
        )
        if error.permanent:
            raise ServiceUnavailable(
                "the embedding model refused the text; the operator must fix the model's configuration",
                code="embedding_refused",
            ) from error
        retry_after = cause.retry_after if isinstance(cause, ModelThrottled) else None
        raise ServiceUnavailable(
            "the embedding model is not answering; try again",
            code="embedding_unavailable",
            details=None if retry_after is None else {"retry_after": retry_after},
        ) from error
