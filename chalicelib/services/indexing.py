"""Indexing work that stages and the FAQ share: index entries of chunks, the extra chunks enrichment writes, and
indexing a document's chunks in slices (`index_knowledge`, a chain; `index_slice`, one of a fan-out's parallel
slices). The embedding itself is `embedding_runs`'s.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from chalicelib.domain import metering
from chalicelib.domain.errors import (
    PermanentStageError,
    SpanErrorCode,
    TransientStageError,
)
from chalicelib.domain.ids import attempt_chunk_prefix, chunk_id, question_entry_id
from chalicelib.domain.types import Chunk, ChunkType, EnableStatus, Knowledge, KnowledgeBase, Stage
from chalicelib.observability import logger
from chalicelib.ports import (
    Dependencies,
    IndexEntry,
    IndexSpace,
    IndexUnavailable,
    IndexWriteError,
)
from chalicelib.services.chunk_pages import attempt_chunk_pages
from chalicelib.services.deadline import out_of_time
from chalicelib.services.liveness import kept_after_write
from chalicelib.services.usable import require_usable_for_stage

if TYPE_CHECKING:
    from chalicelib.ports import Vectors

from chalicelib.services.embedding_runs import EmbeddingRun, embed_texts


def chunk_entries(
    kb_id: str, knowledge_id: str, chunks: Sequence[Chunk], contents: Sequence[str], vectors: Vectors | None
) -> list[IndexEntry]:
    """Each chunk's index entry: the chunk's id throughout, the given index text and vector (None when the
    knowledge base keeps no vectors), the chunk's type and enabled state."""
    return [
        IndexEntry(
            id=chunk.id,
            kb_id=kb_id,
            knowledge_id=knowledge_id,
            chunk_id=chunk.id,
            content=contents[n],
            vector=None if vectors is None else vectors[n],
            source_id=chunk.id,
            chunk_type=chunk.chunk_type.value,
            is_enabled=chunk.is_enabled,
        )
        for n, chunk in enumerate(chunks)
    ]


def question_entry(
    kb_id: str,
    knowledge_id: str,
    chunk_id_: str,
    n: int,
    content: str,
    vector: Vectors | None,
    is_enabled: bool,
) -> IndexEntry:
    """The index entry of a chunk's n-th generated question: a hit on it returns the chunk that answers it."""
    return IndexEntry(
        id=question_entry_id(chunk_id_, n),
        kb_id=kb_id,
        knowledge_id=knowledge_id,
        chunk_id=chunk_id_,
        content=content,
        vector=vector,
        source_id=chunk_id_,
        source_type="question",
        chunk_type=ChunkType.TEXT.value,
        is_enabled=is_enabled,
    )


def write_extra_chunks(
    deps: Dependencies,
    knowledge: Knowledge,
    kb: KnowledgeBase,
    chunks: list[Chunk],
    *,
    undo_moved: Callable[[Knowledge], Any] | None = None,
) -> bool:
    """Chunks made by enrichment (table summaries, the summary): stored, embedded and indexed under their own
    ids with the title in front, and undone if the row was deleted meanwhile. False: the row moved on
    (deleted, cancelled, superseded, moved to another knowledge base: `undo_moved` gets the row as it is
    then), so the caller goes no further."""
    from chalicelib.chunker import index_text

    deps.chunks.put_many(chunks)
    if not kb.indexing_strategy.needs_embedding:
        return True
    model = deps.embedding_model(kb.embedding_model_id)
    space = IndexSpace.of(model)
    texts = [index_text(knowledge.title, "", c.content) for c in chunks]
    vectors = embed_texts(deps, kb.tenant_id, model, texts) if kb.indexing_strategy.vector_enabled else None
    engine = deps.engine(kb.retrieval_engine)
    entries = chunk_entries(kb.id, knowledge.id, chunks, texts, vectors)
    index_as_the_document_is(deps, knowledge, engine, space, entries)

    def undo() -> None:
        deps.chunks.delete_all(knowledge.id)
        engine.delete_by_knowledge(space, kb.id, [knowledge.id])

    def undo_superseded() -> None:  # a reparse's attempt would never clean what this one wrote after it
        take_back_chunks(deps, knowledge, [c.id for c in chunks], (engine, space))

    return kept_after_write(deps, knowledge, undo, undo_moved=undo_moved, undo_superseded=undo_superseded)


def take_back_chunks(
    deps: Dependencies, knowledge: Knowledge, chunk_ids: Sequence[str], index: tuple[Any, IndexSpace] | None
) -> None:
    """Removes chunks a write made, by id: their index entries (an entry's id is its chunk's), when `index`
    (engine, space) was written, then their rows."""
    if index is not None:
        engine, space = index
        engine.delete_by_ids(space, knowledge.kb_id, list(chunk_ids))
    deps.chunks.delete_many(knowledge.id, chunk_ids)


def index_as_the_document_is(
    deps: Dependencies, knowledge: Knowledge, engine: Any, space: IndexSpace, entries: Sequence[IndexEntry]
) -> None:
    """Entries enrichment adds to an indexed document (image text, the summary, generated questions): written
    disabled while the document is disabled, so enrichment never brings it back to search, and switched when
    the document was enabled or disabled while they were written. An entry keeps its chunk's own switch."""
    enabled = searchable(deps, knowledge)
    engine.batch_index(space, [replace(e, is_enabled=e.is_enabled and enabled) for e in entries])
    if searchable(deps, knowledge) != enabled:  # enabled or disabled while these were written
        switched = list(dict.fromkeys(e.chunk_id for e in entries if e.is_enabled or enabled))
        engine.set_enabled(space, entries[0].kb_id, switched, not enabled)


def searchable(deps: Dependencies, knowledge: Knowledge) -> bool:
    """Whether the document is on now (its row read again; the given one when it is gone)."""
    row = deps.knowledge.get(knowledge.id)
    return (row or knowledge).enable_status == EnableStatus.ENABLED


class Stopped(Exception):
    """The row moved on while this slice indexed (what a deleted row got was undone)."""


def write_entries(deps: Dependencies, engine: Any, space: IndexSpace, entries: list[IndexEntry]) -> None:
    """Upserts by entry id. An engine that cannot take the write now gets a few quick retries (200 ms
    doubling, as WeKnora's indexer does), then the stage's own; one that refuses it fails the document at
    once. Anything else is not an engine outage and goes to the runner as it is. The API's chunk edit
    writes through it too, and answers its stage errors (their messages never carry the engine's reply)."""
    delay = 0.2
    for attempt in range(deps.settings.index_write_attempts):
        try:
            engine.batch_index(space, entries)
            return
        except IndexWriteError as error:
            raise PermanentStageError(
                f"the index refused {len(entries)} entries", code=SpanErrorCode.VECTORSTORE_WRITE_FAILED
            ) from error
        except IndexUnavailable as error:
            if attempt + 1 >= deps.settings.index_write_attempts:
                raise TransientStageError(
                    f"index write failed: {error}", code=SpanErrorCode.VECTORSTORE_WRITE_FAILED
                ) from error
            logger.warning("index unavailable", extra={"try": attempt + 1, "error": str(error)})
            deps.sleep(delay)
            delay *= 2


#: chunks embedded and indexed together: one cache read, one checkpoint write, one index write
WINDOW = 64
COUNTERS = ("texts_embedded", "cache_hits", "batches")


def _added(carried: Mapping[str, int] | None, run: EmbeddingRun | None) -> dict[str, int]:
    """What a slice's earlier hand-overs counted (carried in its message) plus this run's counts (None:
    nothing embedded)."""
    mine = run.outputs() if run is not None else {}
    return {k: int((carried or {}).get(k, 0)) + int(mine.get(k, 0)) for k in COUNTERS}


@dataclass(frozen=True)
class Indexed:
    """What one run of `index_knowledge` or `index_slice` did, one shape whatever happened (indexing off
    included): `counts`, what the chain or the slice counted so far (carried in its next message), and where
    the next run starts: `next_offset` (None when done) and, for a chain, `next_cursor` (the last chunk id
    read; None when done). `outputs`: the span's figures (a done chain ends its span with them)."""

    outputs: dict[str, Any]
    counts: dict[str, int]
    next_offset: int | None = None
    next_cursor: str | None = None


def index_knowledge(
    deps: Dependencies,
    knowledge: Knowledge,
    kb: KnowledgeBase,
    offset: int = 0,
    cursor: str | None = None,
    carried: Mapping[str, int] | None = None,
    totals: ChunkTotals | None = None,
) -> Indexed:
    """Embeds and indexes the attempt's text chunks after the chunk id `cursor` (None: from the first),
    for at most one slice (time and count), and says where the next slice starts: `next_cursor` (the
    last chunk id read; None when done) and `next_offset` (texts indexed so far, `offset` before this
    slice). A slice reads only its own chunks (one `list_page` in chunk-id order), so a document of any
    size is read once in all (issue 12). Entries are upserted by chunk id, so a redelivered slice
    (the same cursor) rereads the same chunks and rewrites the same entries; what earlier slices counted
    comes in `carried` (their message's counts) and goes out in `counts`, so the span holds a few totals,
    whatever the number of slices, and a redelivered slice counts nothing twice. `totals`: the attempt's
    chunk totals, if the caller read them already (one read of the spans, not two)."""
    totals = totals or chunk_totals(deps, knowledge)
    chunks_total, texts_total = totals.chunks, totals.texts
    strategy = kb.indexing_strategy
    if not strategy.needs_embedding:  # a wiki or graph only knowledge base: nothing to embed or index
        skipped = {"chunks": chunks_total, "texts_total": 0, "entries_indexed": 0}
        return Indexed({**skipped, "skipped": "vector and keyword indexing are off"}, _added(carried, None))
    from chalicelib.chunker import index_text

    model = require_usable_for_stage(deps, kb)
    space = IndexSpace.of(model)
    engine = deps.engine(kb.retrieval_engine)
    if cursor is None:  # a fresh start: entries of the knowledge's other attempts go first
        _remove_other_attempts(engine, space, kb.id, knowledge)

    def report(run: EmbeddingRun, done: int) -> dict[str, Any]:
        return {
            **_added(carried, run),
            "chunks": chunks_total,
            "texts_total": texts_total,
            "entries_indexed": done,
        }

    position = offset
    run = EmbeddingRun(deps, kb.tenant_id, model)
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
            _index_window(deps, knowledge, kb, run, engine, space, window, index_text)
            position += len(window)
            after = part[-1].id
            more = page_after is not None or start + WINDOW < len(page)
            sliced = position - offset >= settings.embed_slice_max_texts
            if more and (
                sliced or time.monotonic() - started >= settings.embed_slice_seconds or out_of_time()
            ):
                deps.tracker.progress(knowledge, Stage.EMBEDDING, report(run, position))
                return Indexed(report(run, position), _added(carried, run), position, after)
    return Indexed(
        {
            **report(run, position),
            "model": metering.shown_model_id(model.model_id),
            "dimensions": model.dimensions,
            "engine": engine.engine_name,
        },
        _added(carried, run),
    )


def _remove_other_attempts(engine: Any, space: IndexSpace, kb_id: str, knowledge: Knowledge) -> None:
    """Entries of the knowledge's other attempts (a superseded attempt's late window, a reparse's
    leftovers). This attempt's own stay: its text entries are rewritten by chunk id anyway, and a message
    delivered again must not take the entries enrichment has added since (a redelivered start had)."""
    own = attempt_chunk_prefix(knowledge.id, knowledge.attempt)
    stale = [e.id for e in engine.entries_of(space, kb_id, knowledge.id) if not e.chunk_id.startswith(own)]
    if stale:
        engine.delete_by_ids(space, kb_id, stale)


def _index_window(
    deps: Dependencies,
    knowledge: Knowledge,
    kb: KnowledgeBase,
    run: EmbeddingRun,
    engine: Any,
    space: IndexSpace,
    window: Sequence[Chunk],
    index_text: Callable[[str, str, str], str],
) -> None:
    """Embeds and indexes one window of text chunks; Stopped when the row moved on meanwhile (what a
    deleted row got is undone)."""
    texts = [index_text(knowledge.title, c.context_header, c.content) for c in window]
    vectors = run.embed(texts) if kb.indexing_strategy.vector_enabled and texts else None
    entries = chunk_entries(kb.id, knowledge.id, window, texts, vectors)
    if entries:
        # the embedding took its time: another copy may have handed the attempt over meanwhile
        if handed_over_since(deps, knowledge):
            raise Stopped("another copy of the message indexed the attempt and handed it over")
        write_entries(deps, engine, space, entries)
        if handed_over_since(deps, knowledge):  # between that read and this write
            _rewrite_as_now(deps, knowledge, kb, run, engine, space, window, index_text)
            raise Stopped("another copy of the message handed the attempt over while this one wrote")
    if not kept_after_write(
        deps,
        knowledge,
        lambda: engine.delete_by_knowledge(space, kb.id, [knowledge.id]),
        # a move that landed after the write: the knowledge base it left holds nothing of it any more
        undo_moved=lambda _row: engine.delete_by_ids(space, kb.id, [e.id for e in entries]),
        undo_superseded=lambda: engine.delete_by_ids(space, kb.id, [e.id for e in entries]),
    ):
        raise Stopped("the row was deleted, cancelled, superseded or moved while indexing")


def handed_over_since(deps: Dependencies, knowledge: Knowledge) -> bool:
    """Whether another copy of this attempt's message (SQS may deliver one twice, even at once) indexed the
    attempt and handed it over after this copy read the row (`knowledge`). From then on a person may switch
    or edit its chunks or switch the document off, so what this copy read is stale: it writes nothing more
    (a consistent read just before each write; what is left is the write's own few milliseconds)."""
    row = deps.knowledge.get(knowledge.id)
    return row is not None and row.attempt == knowledge.attempt and row.processed_at != knowledge.processed_at


def _rewrite_as_now(
    deps: Dependencies,
    knowledge: Knowledge,
    kb: KnowledgeBase,
    run: EmbeddingRun,
    engine: Any,
    space: IndexSpace,
    window: Sequence[Chunk],
    index_text: Callable[[str, str, str], str],
) -> None:
    """The attempt was handed over between the last check and this copy's write of `window`: its entries are
    written again from the chunks as they are stored now (gone ones removed), disabled while the document
    is, so a switch or an edit made in between is not undone by the stale write."""
    keys = [(knowledge.id, c.id) for c in window]
    found = deps.chunks.get_many(keys)
    gone = [key[1] for key in keys if key not in found]
    if gone:
        engine.delete_by_ids(space, kb.id, gone)
    now = [found[key] for key in keys if key in found]
    if not now:
        return
    texts = [index_text(knowledge.title, c.context_header, c.content) for c in now]
    vectors = run.embed(texts) if kb.indexing_strategy.vector_enabled else None
    index_as_the_document_is(
        deps, knowledge, engine, space, chunk_entries(kb.id, knowledge.id, now, texts, vectors)
    )


def index_slice(
    deps: Dependencies,
    knowledge: Knowledge,
    kb: KnowledgeBase,
    start: int,
    end: int,
    carried: Mapping[str, int] | None = None,
) -> Indexed:
    """One slice of a fanned-out document (issue 27): embeds and indexes the attempt's text chunks of
    sequence numbers [start, end), read by key (BatchGetItem, a window at a time: a slice reads only its
    own chunks, and slices run in parallel without listing anything). Stops early on time or count and
    says where to resume (`next_offset`, a sequence number; None when the slice is done). `counts` is
    what the slice counted, `carried` included: entries indexed, texts embedded, cache hits, batches.
    Entries are upserted by chunk id: a redelivered slice rewrites the same entries."""
    from chalicelib.chunker import index_text

    model = require_usable_for_stage(deps, kb)
    space = IndexSpace.of(model)
    engine = deps.engine(kb.retrieval_engine)
    run = EmbeddingRun(deps, kb.tenant_id, model)
    settings = deps.settings
    started = time.monotonic()
    indexed = int((carried or {}).get("entries_indexed", 0))
    done_here = 0
    position = start
    while position < end:
        seqs = range(position, min(position + WINDOW, end))
        keys = [(knowledge.id, chunk_id(knowledge.id, knowledge.attempt, seq)) for seq in seqs]
        found = deps.chunks.get_many(keys)
        window = [
            chunk
            for key in keys
            if (chunk := found.get(key)) is not None
            and chunk.chunk_type == ChunkType.TEXT
            and chunk.metadata.get("attempt") == knowledge.attempt
        ]
        _index_window(deps, knowledge, kb, run, engine, space, window, index_text)
        position = seqs.stop
        indexed += len(window)
        done_here += len(window)
        counts = {**_added(carried, run), "entries_indexed": indexed}
        if position < end and (
            done_here >= settings.embed_slice_max_texts
            or time.monotonic() - started >= settings.embed_slice_seconds
            or out_of_time()
        ):
            return Indexed({}, counts, position)
    return Indexed(
        {
            "model": metering.shown_model_id(model.model_id),
            "dimensions": model.dimensions,
            "engine": engine.engine_name,
        },
        {**_added(carried, run), "entries_indexed": indexed},
    )


@dataclass(frozen=True)
class ChunkTotals:
    """The attempt's chunks, its text chunks, and one past its highest text chunk's sequence number
    (None when chunking did not record it: a document chunked before issue 27 is never fanned out)."""

    chunks: int
    texts: int
    seq_end: int | None = None


def chunk_totals(deps: Dependencies, knowledge: Knowledge) -> ChunkTotals:
    """The attempt's chunks and text chunks, as chunking (or an earlier slice) recorded them on its span;
    counted once, a page at a time, for an attempt chunked before chunking recorded them."""
    spans = deps.spans.get_many(
        knowledge.id, knowledge.attempt, (Stage.EMBEDDING.value, Stage.CHUNKING.value)
    )
    chunking = spans.get(Stage.CHUNKING.value)
    seq_end = chunking.outputs.get("seq_end") if chunking is not None else None
    seq_end = seq_end if isinstance(seq_end, int) and not isinstance(seq_end, bool) else None
    for stage in (Stage.EMBEDDING, Stage.CHUNKING):
        span = spans.get(stage.value)
        outputs = span.outputs if span is not None else {}
        chunks, texts = outputs.get("chunks", outputs.get("chunks_total")), outputs.get("texts_total")
        if isinstance(chunks, int) and isinstance(texts, int):
            return ChunkTotals(chunks, texts, seq_end)
    chunks = texts = 0
    for page in attempt_chunk_pages(deps, knowledge):
        mine = [c for c in page if c.metadata.get("attempt") == knowledge.attempt]
        chunks += len(mine)
        texts += sum(1 for c in mine if c.chunk_type == ChunkType.TEXT)
    return ChunkTotals(chunks, texts, None)
