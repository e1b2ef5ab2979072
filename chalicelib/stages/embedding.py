"""embedding queue: embed and index the attempt's chunks, enable the document, start its state machine.

WeKnora fails a whole document on one rate-limited batch and throws away every batch already embedded.
Here each finished batch is written to the embedding cache at once (the checkpoint), throttling backs off
with jitter and honours Retry-After, a long wait puts the stage back on its queue instead of failing it,
a stage near its Lambda deadline hands over to a fresh invocation, and a retried stage, a reparse or a
clone only embeds texts the cache does not already hold. When indexing fails for good, the attempt's
chunks and index entries are rolled back (spec §1.10).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from chalicelib.domain.errors import ContinueLater, PermanentStageError, SpanErrorCode, TransientStageError
from chalicelib.domain.ids import attempt_chunk_prefix, execution_name
from chalicelib.domain.storage_keys import images_manifest_key, parsed_markdown_key
from chalicelib.domain.types import ChunkType, Knowledge, KnowledgeBase, Stage, StageMessage
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, IndexEntry, IndexSpace
from chalicelib.services.derived_data import remove_derived_data
from chalicelib.services.indexing import EmbeddingRun, chunk_entries
from chalicelib.services.rows import kept_after_write, live_knowledge
from chalicelib.services.usable import require_usable_for_stage
from chalicelib.stages.runner import out_of_time, run_stage

if TYPE_CHECKING:
    pass


class Stopped(Exception):
    """The row moved on while this slice indexed (what a deleted row got was undone)."""


def handle(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    return run_stage(deps, Stage.EMBEDDING, event, context, run, rollback=rollback)


def run(deps: Dependencies, message: StageMessage) -> None:
    knowledge = live_knowledge(deps, message)
    if knowledge is None:
        return
    kb = deps.kbs.get(knowledge.kb_id)
    if kb is None:
        raise PermanentStageError("the knowledge base no longer exists")
    offset, cursor = message.offset, message.cursor or None
    if offset and cursor is None:
        # A hand-over from before slices carried a cursor (an index into a full listing): start over.
        # Safe: entries are upserted by chunk id and the texts' vectors come back from the cache.
        logger.info("embedding: a slice without a cursor starts over", extra={"knowledge_id": knowledge.id})
        offset = 0
    if offset == 0:
        deps.tracker.begin_stage(knowledge, Stage.EMBEDDING, {"model": kb.embedding_model_id or "default"})
    try:
        outputs = index_knowledge(deps, knowledge, kb, offset, cursor)
    except Stopped as stopped:
        logger.info(str(stopped), extra={"knowledge_id": knowledge.id})
        return
    if outputs["next_cursor"] is not None:
        raise ContinueLater(
            f"indexed {outputs['next_offset']} of {outputs['texts_total']} texts",
            offset=outputs["next_offset"],
            cursor=outputs["next_cursor"],
        )
    del outputs["next_offset"], outputs["next_cursor"]
    manifest = deps.files.url_for(images_manifest_key(knowledge.tenant_id, knowledge.id, knowledge.attempt))
    images = json.loads(deps.files.read(manifest))
    if not deps.knowledge.mark_indexed(
        knowledge.id,
        knowledge.attempt,
        chunk_count=outputs["chunks"],
        storage_size=knowledge.file_size,
        completed=False,
    ):
        logger.info("embedding: superseded or cancelled while indexing", extra={"knowledge_id": knowledge.id})
        return
    deps.tenants.add_usage(knowledge.tenant_id, knowledge.file_size - knowledge.storage_size)
    deps.tracker.end_stage(knowledge, Stage.EMBEDDING, outputs)
    if knowledge.attempt > 1:
        remove_earlier_attempts(deps, knowledge, images)
    if not images:
        deps.tracker.skip_stage(knowledge, Stage.MULTIMODAL, "no images")
    deps.workflow.start(
        execution_name(knowledge.id, knowledge.attempt),
        {
            "knowledge_id": knowledge.id,
            "tenant_id": knowledge.tenant_id,
            "attempt": knowledge.attempt,
            "attempt_n": str(knowledge.attempt),
            "images": [
                {
                    "index": i,
                    "url": image["url"],
                    "ocr_done": bool(image.get("ocr_in_markdown")),
                    "original": bool(image.get("is_original")),
                }
                for i, image in enumerate(images)
            ],
        },
    )


def remove_earlier_attempts(deps: Dependencies, knowledge: Knowledge, images: list[dict[str, Any]]) -> None:
    """Once a reparse's attempt is indexed, the earlier attempts' parsed Markdown, image manifests and the
    images only they referenced are garbage: removed, so nothing is left behind (idempotent)."""
    keep = {str(image["url"]) for image in images}
    for attempt in range(1, knowledge.attempt):
        parsed = deps.files.url_for(parsed_markdown_key(knowledge.tenant_id, knowledge.id, attempt))
        manifest = deps.files.url_for(images_manifest_key(knowledge.tenant_id, knowledge.id, attempt))
        if deps.files.exists(manifest):
            for image in json.loads(deps.files.read(manifest)):
                if str(image["url"]) not in keep:
                    deps.files.delete(str(image["url"]))
        deps.files.delete(manifest)
        deps.files.delete(parsed)


def rollback(deps: Dependencies, message: StageMessage) -> None:
    """Indexing failed for good: delete this attempt's chunks and index entries (spec §1.10)."""
    knowledge = deps.knowledge.get(message.knowledge_id)
    if knowledge is not None and knowledge.attempt == message.attempt:
        remove_derived_data(deps, knowledge)


def _write_entries(deps: Dependencies, engine: Any, space: IndexSpace, entries: list[IndexEntry]) -> None:
    """Upserts by entry id with a few quick retries (200 ms doubling), as WeKnora's indexer does."""
    delay = 0.2
    for attempt in range(deps.settings.index_write_attempts):
        try:
            engine.batch_index(space, entries)
            return
        except Exception as error:  # the engine's client errors vary by backend; all are retried here
            if attempt + 1 >= deps.settings.index_write_attempts:
                raise TransientStageError(
                    f"index write failed: {type(error).__name__}", code=SpanErrorCode.VECTORSTORE_WRITE_FAILED
                ) from error
            logger.warning("index write failed", extra={"try": attempt + 1, "error": type(error).__name__})
            deps.sleep(delay)
            delay *= 2


#: chunks embedded and indexed together: one cache read, one checkpoint write, one index write
WINDOW = 64
COUNTERS = ("texts_embedded", "cache_hits", "batches")


def index_knowledge(
    deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, offset: int = 0, cursor: str | None = None
) -> dict[str, Any]:
    """Embeds and indexes the attempt's text chunks after the chunk id `cursor` (None: from the first),
    for at most one slice (time and count), and says where the next slice starts: `next_cursor` (the
    last chunk id read; None when done) and `next_offset` (texts indexed so far, `offset` before this
    slice). A slice reads only its own chunks (one `list_page` in chunk-id order), so a document of any
    size is read once in all (issue 12). Entries are upserted by chunk id, so a redelivered slice
    (the same cursor) rereads the same chunks and rewrites the same entries."""
    chunks_total, texts_total = _totals(deps, knowledge)
    strategy = kb.indexing_strategy
    if not strategy.needs_embedding:
        return {
            "chunks": chunks_total,
            "entries_indexed": 0,
            "texts_total": 0,
            "skipped": "vector and keyword indexing are off",
            "next_offset": None,
            "next_cursor": None,
        }
    from chalicelib.chunker import index_text

    model = require_usable_for_stage(deps, kb)
    space = IndexSpace.of(model)
    engine = deps.engine(kb.retrieval_engine)
    if cursor is None:  # a fresh start: entries of an earlier run of this knowledge go first
        engine.delete_by_knowledge(space, kb.id, [knowledge.id])
    earlier = _earlier_slices(deps, knowledge, cursor)

    def report(run: EmbeddingRun, done: int) -> dict[str, Any]:
        # Counted per slice, keyed by the slice's cursor: a redelivered slice replaces its own counts
        slices = {**earlier, cursor or "": run.outputs()}
        counts = {k: sum(int(c.get(k, 0)) for c in slices.values()) for k in COUNTERS}
        return {
            **counts,
            "chunks": chunks_total,
            "texts_total": texts_total,
            "entries_indexed": done,
            "slices": slices,
        }

    position = offset
    run = EmbeddingRun(deps, model)
    run.progress = lambda _out: deps.tracker.progress(knowledge, Stage.EMBEDDING, report(run, position))
    settings = deps.settings
    started = time.monotonic()
    prefix = attempt_chunk_prefix(knowledge.id, knowledge.attempt)
    after = cursor
    more = True
    while more:
        # One read of what is left of the slice's count (a few Queries: DynamoDB pages at 1 MB), then
        # windows of it. Only a hand-over on time, mid-page, leaves chunks read here to be read again.
        left = max(WINDOW, settings.embed_slice_max_texts - (position - offset))
        page, page_after = deps.chunks.list_page(knowledge.id, prefix=prefix, after=after, limit=left)
        more = page_after is not None
        for start in range(0, len(page), WINDOW):
            part = page[start : start + WINDOW]
            window = [
                c
                for c in part
                if c.chunk_type == ChunkType.TEXT and c.metadata.get("attempt") == knowledge.attempt
            ]
            texts = [index_text(knowledge.title, c.context_header, c.content) for c in window]
            vectors = run.embed(texts) if strategy.vector_enabled and texts else None
            entries = chunk_entries(kb.id, knowledge.id, window, texts, vectors)
            if entries:
                _write_entries(deps, engine, space, entries)
            if not kept_after_write(
                deps, knowledge, lambda: engine.delete_by_knowledge(space, kb.id, [knowledge.id])
            ):
                raise Stopped("the row was deleted, cancelled or superseded while indexing")
            position += len(window)
            after = part[-1].id
            more = page_after is not None or start + WINDOW < len(page)
            sliced = position - offset >= settings.embed_slice_max_texts
            if more and (
                sliced or time.monotonic() - started >= settings.embed_slice_seconds or out_of_time()
            ):
                deps.tracker.progress(knowledge, Stage.EMBEDDING, report(run, position))
                return {**report(run, position), "next_offset": position, "next_cursor": after}
    return {
        **report(run, position),
        "model": model.model_id,
        "dimensions": model.dimensions,
        "engine": engine.engine_name,
        "next_offset": None,
        "next_cursor": None,
    }


def _totals(deps: Dependencies, knowledge: Knowledge) -> tuple[int, int]:
    """The attempt's chunks and text chunks, as chunking (or an earlier slice) recorded them on its span;
    counted once, a page at a time, for an attempt chunked before chunking recorded them."""
    spans = deps.spans.get_many(
        knowledge.id, knowledge.attempt, (Stage.EMBEDDING.value, Stage.CHUNKING.value)
    )
    for stage in (Stage.EMBEDDING, Stage.CHUNKING):
        span = spans.get(stage.value)
        outputs = span.outputs if span is not None else {}
        chunks, texts = outputs.get("chunks", outputs.get("chunks_total")), outputs.get("texts_total")
        if isinstance(chunks, int) and isinstance(texts, int):
            return chunks, texts
    chunks = texts = 0
    prefix = attempt_chunk_prefix(knowledge.id, knowledge.attempt)
    after: str | None = None
    while True:
        page, after = deps.chunks.list_page(knowledge.id, prefix=prefix, after=after, limit=1000)
        mine = [c for c in page if c.metadata.get("attempt") == knowledge.attempt]
        chunks += len(mine)
        texts += sum(1 for c in mine if c.chunk_type == ChunkType.TEXT)
        if after is None:
            return chunks, texts


def _earlier_slices(
    deps: Dependencies, knowledge: Knowledge, cursor: str | None
) -> dict[str, dict[str, int]]:
    """What the slices of this attempt counted, by slice cursor (kept on the stage span); none for a
    fresh start."""
    if cursor is None:
        return {}
    span = deps.spans.get(knowledge.id, knowledge.attempt, Stage.EMBEDDING.value)
    outputs = span.outputs if span is not None else {}
    slices = outputs.get("slices")
    if not isinstance(slices, dict):  # a span written before per-slice counts: its totals, as one slice
        return {"": {k: int(outputs.get(k, 0)) for k in COUNTERS}}
    return {
        str(key): {k: int(counts.get(k, 0)) for k in COUNTERS}
        for key, counts in slices.items()
        if isinstance(counts, dict) and key != cursor
    }
