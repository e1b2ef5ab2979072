"""chunking queue: the attempt's parsed Markdown → chunks with offsets and breadcrumbs (DynamoDB).

Chunk ids are deterministic per (knowledge, attempt, sequence) and the write replaces the attempt's
chunks, so a redelivered message or a crash mid-stage never duplicates chunks, and a superseded attempt's
late write never touches a newer attempt's chunks (and is taken back).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

# named here too: the image chunks' numbering (multimodal) and tests read it as the stage's
from chalicelib.domain.chunk_limits import MAX_CHUNKS_PER_DOCUMENT as MAX_CHUNKS_PER_DOCUMENT
from chalicelib.domain.chunk_limits import TooManyChunks, chunk_limit, chunker_cap, too_many_chunks_message
from chalicelib.domain.errors import PermanentStageError, SpanErrorCode
from chalicelib.domain.ids import chunk_id, content_hash, made_by_the_chunker
from chalicelib.domain.image_info import ShownImages
from chalicelib.domain.process_config import resolve
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.domain.types import Chunk, ChunkingConfig, ChunkType, Knowledge, Stage, StageMessage
from chalicelib.observability import logger
from chalicelib.ports import Dependencies
from chalicelib.services.chunk_pages import attempt_chunk_pages
from chalicelib.services.fairness import give_back_if_left, keep_place
from chalicelib.services.indexing import handed_over_since, take_back_chunks
from chalicelib.services.liveness import kept_after_write, live_knowledge
from chalicelib.services.stage_queue import enqueue
from chalicelib.services.storage import files_of, image_manifest
from chalicelib.stages.runner import run_stage


def handle(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    return run_stage(deps, Stage.CHUNKING, event, context, run)


def run(deps: Dependencies, message: StageMessage) -> None:
    knowledge = live_knowledge(deps, message)
    if knowledge is None:
        return
    keep_place(deps, knowledge)  # a long chunking and embedding keeps its tenant's place
    if knowledge.processed_at is not None:
        # indexed already (a redelivered message): chunking again would replace the chunks enrichment
        # has added since and queue the embedding once more
        logger.info("chunking: the attempt is indexed already", extra={"knowledge_id": knowledge.id})
        return
    kb = deps.kbs.get(knowledge.kb_id)
    if kb is None:
        raise PermanentStageError("the knowledge base no longer exists")
    config = resolve(kb, knowledge.process_overrides).chunking
    deps.tracker.begin_stage(
        knowledge,
        Stage.CHUNKING,
        {
            "chunk_size": config.chunk_size,
            "chunk_overlap": config.chunk_overlap,
            "strategy": config.strategy,
            "parent_child": config.enable_parent_child,
        },
    )
    from chalicelib.chunker import normalise_markdown

    parsed = files_of(deps, knowledge).url_for(
        parsed_markdown_key(knowledge.tenant_id, knowledge.id, knowledge.attempt)
    )
    try:
        markdown = normalise_markdown(deps.files.read(parsed).decode("utf-8"))
        images = image_manifest(deps, knowledge)
    except FileNotFoundError:
        # a delete (or a reparse's clean-up) that landed since the live read took its Markdown or manifest
        if live_knowledge(deps, message) is not None:
            raise
        give_back_if_left(deps, knowledge.tenant_id, knowledge.id)
        return
    chunks, extra = build_chunks(knowledge, markdown, config)
    show_images(chunks, images)
    if not chunks:
        raise PermanentStageError("the document produced no chunks", code=SpanErrorCode.CHUNKING_FAILED)
    if _handed_over(deps, knowledge):
        # another copy of this message chunked and indexed the attempt while this one chunked: writing now
        # would undo the chunk edits and switches made since (and the embedding would be queued again)
        return
    write_chunks(deps, knowledge, chunks)
    if not kept_after_write(
        deps,
        knowledge,
        lambda: deps.chunks.delete_all(knowledge.id),
        # the reparse may have cleaned up before this write landed: nothing else would remove these
        undo_superseded=lambda: take_back_chunks(deps, knowledge, [c.id for c in chunks], None),
    ):
        # deleted or cancelled meanwhile: the place the document kept goes back with it
        give_back_if_left(deps, knowledge.tenant_id, knowledge.id)
        return
    if _handed_over(deps, knowledge):  # in the few milliseconds of the write: the embedding is not queued
        # again (what it wrote are the parse's chunks: a chunk edit answered in those milliseconds is lost)
        return
    deps.tracker.end_stage(
        knowledge,
        Stage.CHUNKING,
        {
            "chunks_written": len(chunks),
            "chunks_total": len(chunks),
            "texts_total": sum(1 for c in chunks if c.chunk_type == ChunkType.TEXT),
            # the text chunks' sequence numbers run below this: embedding plans its slices from it
            "seq_end": 1 + max((c.seq for c in chunks if c.chunk_type == ChunkType.TEXT), default=-1),
            "total_text_chars": len(markdown),
            **extra,
        },
    )
    enqueue(deps, Stage.EMBEDDING, message)


def _handed_over(deps: Dependencies, knowledge: Knowledge) -> bool:
    """`handed_over_since`; then this copy stops, its place (one it may have taken back) given back."""
    if not handed_over_since(deps, knowledge):
        return False
    logger.info("chunking: another copy indexed the attempt", extra={"knowledge_id": knowledge.id})
    give_back_if_left(deps, knowledge.tenant_id, knowledge.id)
    return True


def write_chunks(deps: Dependencies, knowledge: Knowledge, chunks: Sequence[Chunk]) -> None:
    """The attempt's chunker chunks become `chunks`: written, and those an earlier try of this chunking
    wrote that are not among them deleted. Only the chunker's ids: the chunks enrichment adds under the
    attempt's prefix are never a chunking's to remove (a late copy of the message would take them from
    the document while their index entries stay). This attempt's chunks only: a reparse may have chunked a
    newer attempt since the live read."""
    keep = {c.id for c in chunks}
    stale = [
        c.id
        for page in attempt_chunk_pages(deps, knowledge)
        for c in page
        if c.id not in keep and made_by_the_chunker(knowledge.id, knowledge.attempt, c.id)
    ]
    deps.chunks.put_many(chunks)
    if stale:
        deps.chunks.delete_many(knowledge.id, stale)


def build_chunks(
    knowledge: Knowledge, markdown: str, config: ChunkingConfig
) -> tuple[list[Chunk], dict[str, Any]]:
    """The chunks to store. A document that would store more than `chunk_limit` chunks fails for good; the
    chunker stops soon after `chunker_cap` pieces, so a refused setting is never cut whole first."""
    limit = chunk_limit(len(markdown.encode()))
    refused = PermanentStageError(
        too_many_chunks_message(limit, config.enable_parent_child), code=SpanErrorCode.CHUNKING_FAILED
    )
    try:
        chunks, outputs = _build_chunks(knowledge, markdown, config, chunker_cap(limit))
    except TooManyChunks:
        raise refused from None
    if len(chunks) > limit:  # (blank pieces are cut, not stored)
        raise refused
    return chunks, outputs


def _build_chunks(
    knowledge: Knowledge, markdown: str, config: ChunkingConfig, max_chunks: int
) -> tuple[list[Chunk], dict[str, Any]]:
    from chalicelib.chunker import split, split_parent_child

    def make(seq: int, piece: Any, chunk_type: ChunkType, parent: bool = False) -> Chunk:
        return Chunk(
            id=chunk_id(knowledge.id, knowledge.attempt, seq, parent),
            tenant_id=knowledge.tenant_id,
            kb_id=knowledge.kb_id,
            knowledge_id=knowledge.id,
            seq=seq,
            content=piece.content,
            chunk_type=chunk_type,
            start_at=piece.start,
            end_at=piece.end,
            context_header=piece.context_header,
            content_hash=content_hash(piece.content),
            metadata={"attempt": knowledge.attempt},
        )

    # Blank chunks are neither stored nor embedded (WeKnora skips them). Sequence numbers stay the chunker's
    # (a dropped chunk leaves a gap), so ids do not depend on what was dropped.
    if config.enable_parent_child:
        result = split_parent_child(markdown, config, max_chunks=max_chunks)
        parents = [
            make(i, p, ChunkType.PARENT_TEXT, parent=True) if p.content.strip() else None
            for i, p in enumerate(result.parents)
        ]
        children = []
        for i, child in enumerate(result.children):
            if not child.piece.content.strip():
                continue
            chunk = make(i, child.piece, ChunkType.TEXT)
            parent = parents[child.parent_index] if child.parent_index >= 0 else None
            if parent is not None:
                chunk.parent_chunk_id = parent.id
            children.append(chunk)
        used = {c.parent_chunk_id for c in children}
        kept = [p for p in parents if p is not None and p.id in used]
        _link(kept)
        _link(children)
        return kept + children, {"parents": len(kept), "children": len(children)}
    chunks = [
        make(i, piece, ChunkType.TEXT)
        for i, piece in enumerate(split(markdown, config, max_chunks=max_chunks))
    ]
    chunks = [c for c in chunks if c.content.strip()]
    _link(chunks)
    return chunks, {}


def show_images(chunks: Sequence[Chunk], images: Sequence[Mapping[str, Any]]) -> None:
    """Each text chunk's `image_info`: an entry per stored image of the manifest its text shows (spec §1.9),
    which the image's task later completes with its caption and OCR text."""
    shown = ShownImages(images)
    for chunk in chunks:
        if chunk.chunk_type == ChunkType.TEXT:
            chunk.image_info = shown.image_info(chunk.content)


def _link(chunks: list[Chunk]) -> None:
    for before, after in itertools.pairwise(chunks):
        before.next_chunk_id = after.id
        after.pre_chunk_id = before.id
