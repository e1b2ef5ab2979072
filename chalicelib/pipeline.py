"""The three main stages: docreader → chunking → embedding/indexing. Each is idempotent:

- every stage first checks the row is `processing` for this very attempt (a superseded attempt, a
  cancelled or deleted row is acknowledged and dropped);
- outputs are written under deterministic keys (the parsed Markdown per attempt, chunk ids per attempt
  and sequence, index entries by chunk id), and chunking/indexing delete-then-write, so a redelivered
  message or a crash mid-stage never duplicates chunks or vectors.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
from typing import Any

from .bootstrap import Services
from .domain.errors import PermanentStageError, SpanErrorCode, TransientStageError
from .domain.process_config import engine_rules, resolve
from .domain.storage_keys import parsed_markdown_key
from .domain.types import (
    Chunk,
    ChunkType,
    Knowledge,
    KnowledgeBase,
    KnowledgeType,
    ParseStatus,
    Stage,
    StageMessage,
)
from .ports import ReadRequest

log = logging.getLogger(__name__)

MAX_CHUNKS_PER_DOCUMENT = 50_000
NO_SPEECH_TEXT = "(no speech was recognised in this audio)"


def _live(svc: Services, message: StageMessage) -> tuple[Knowledge, KnowledgeBase] | None:
    """The row and its KB when this attempt may still write; None to drop the message."""
    knowledge = svc.knowledge.get(message.knowledge_id)
    if (
        knowledge is None
        or knowledge.attempt != message.attempt
        or knowledge.parse_status != ParseStatus.PROCESSING
    ):
        log.info("dropping %s: row missing, superseded or not processing", message)
        return None
    kb = svc.kbs.get(knowledge.kb_id)
    if kb is None:
        raise PermanentStageError("the knowledge base no longer exists", code=SpanErrorCode.UNKNOWN)
    return knowledge, kb


def images_manifest_key(knowledge: Knowledge) -> str:
    return parsed_markdown_key(knowledge.tenant_id, knowledge.id, knowledge.attempt).replace(
        ".md", ".images.json"
    )


# ---------------------------------------------------------------- docreader


def _source_bytes(svc: Services, knowledge: Knowledge) -> tuple[bytes, str, str, str]:
    """(data, file_name, file_type, title) of the knowledge's source."""
    if knowledge.type in (KnowledgeType.URL, KnowledgeType.FILE_URL):
        return _fetch_url(svc, knowledge)
    try:
        data = svc.files.read(knowledge.file_path)
    except FileNotFoundError as error:
        raise PermanentStageError(
            "the stored source file is missing", code=SpanErrorCode.DOCREADER_PARSE_FAILED
        ) from error
    except Exception as error:
        raise TransientStageError(
            f"could not read the source file: {error}", code=SpanErrorCode.DOCREADER_UNAVAILABLE
        ) from error
    return data, knowledge.file_name, knowledge.file_type, knowledge.title


def _fetch_url(svc: Services, knowledge: Knowledge) -> tuple[bytes, str, str, str]:
    from .domain.errors import BadRequest
    from .domain.filetypes import is_importable
    from .net.client import FetchError
    from .net.urlimport import fetch_url_document

    try:
        svc.check_url(knowledge.source)  # again in the worker: DNS may have changed since the API checked
    except BadRequest as error:
        raise PermanentStageError(error.message, code=SpanErrorCode.DOCREADER_PARSE_FAILED) from error
    try:
        file_name, file_type, data, title = fetch_url_document(
            knowledge.source, allow_list=svc.url_allow_list()
        )
    except FetchError as error:
        stage_error = PermanentStageError if error.permanent else TransientStageError
        raise stage_error(
            f"could not fetch {knowledge.source}: {error.message}", code=SpanErrorCode.DOCREADER_PARSE_FAILED
        ) from error
    if not is_importable(file_type):  # what the URL really served decides, not what its path claimed
        raise PermanentStageError(
            f"the URL served an unsupported file type ({file_type or 'unknown'})",
            code=SpanErrorCode.UNSUPPORTED_TYPE,
        )
    return data, file_name, file_type, title or knowledge.title


def docreader_stage(svc: Services, message: StageMessage) -> None:
    knowledge = svc.knowledge.begin_processing(message.knowledge_id, message.attempt)
    if knowledge is None:
        log.info("docreader: %s is not processable (superseded, cancelled, deleted or done)", message)
        return
    kb = svc.kbs.get(knowledge.kb_id)
    if kb is None:
        raise PermanentStageError("the knowledge base no longer exists")
    svc.tracker.begin_stage(
        knowledge,
        Stage.DOCREADER,
        {
            "file_name": knowledge.file_name,
            "file_type": knowledge.file_type,
            "is_url": knowledge.type in (KnowledgeType.URL, KnowledgeType.FILE_URL),
        },
    )
    data, file_name, file_type, title = _source_bytes(svc, knowledge)
    tenant = svc.tenants.get(knowledge.tenant_id)
    rules = engine_rules(kb, tenant.parser_engine_rules if tenant else {}, knowledge.process_overrides)
    engine = rules.get(file_type, "")
    result = svc.docreader().read(
        ReadRequest(
            data=data,
            file_name=file_name or f"source.{file_type}",
            file_type=file_type,
            engine=engine,
            options={"parser_engine_rules": rules},
            url=knowledge.source,
        )
    )
    markdown = result.markdown
    if result.is_audio:
        asr = svc.asr()
        if asr is None:
            raise PermanentStageError(
                "audio needs a speech-recognition engine, and none is configured",
                code=SpanErrorCode.DOCREADER_UNAVAILABLE,
            )
        markdown = asr.transcribe(result.audio, file_name).strip() or NO_SPEECH_TEXT
    ocr_text = _ocr_original_image(svc, result)
    stored_images = _store_images(svc, knowledge, markdown, result)
    markdown = stored_images.pop("markdown")
    if ocr_text:
        markdown = f"{markdown.rstrip()}\n\n{ocr_text}\n"
        for image in stored_images["images"]:
            if image.get("is_original"):
                image["ocr_in_markdown"] = True
    if not markdown.strip() and not stored_images["images"]:
        raise PermanentStageError(
            "the document has no extractable text", code=SpanErrorCode.DOCREADER_PARSE_FAILED
        )
    key = parsed_markdown_key(knowledge.tenant_id, knowledge.id, knowledge.attempt)
    svc.files.save(key, markdown.encode(), "text/markdown; charset=utf-8")
    svc.files.save(
        images_manifest_key(knowledge), json.dumps(stored_images["images"]).encode(), "application/json"
    )
    svc.tracker.end_stage(
        knowledge,
        Stage.DOCREADER,
        {
            "markdown_chars": len(markdown),
            "images": len(stored_images["images"]),
            "title": title,
            "engine": result.metadata.get("engine", engine or "default"),
        },
    )
    svc.queue.send(Stage.CHUNKING, message)


def _store_images(svc: Services, knowledge: Knowledge, markdown: str, result: Any) -> dict[str, Any]:
    """Stores every image (data URIs, bare base64, parser refs, remote ones through the SSRF-safe client)
    through the KB's FileStore, with dedupe, and rewrites the Markdown links to the stored URLs."""
    from dataclasses import asdict

    from .domain.storage_keys import exports_key
    from .net.client import SafeHttpClient
    from .parsers.images import ImageResolver

    def save(data: bytes, ext: str) -> str:
        return svc.files.save(exports_key(knowledge.tenant_id, ext), data)

    resolver = ImageResolver(save, http=SafeHttpClient(svc.url_allow_list()))
    resolved = resolver.resolve(markdown, result.images)
    return {
        "markdown": resolved.markdown,
        "images": [asdict(image) for image in resolved.images],
        "dropped_icons": resolved.dropped_icons,
        "dropped_over_limit": resolved.dropped_over_limit,
    }


def _ocr_original_image(svc: Services, result: Any) -> str:
    """An uploaded image's text goes into the Markdown, so it is chunked and searchable like any text."""
    original = next((image for image in result.images if image.is_original), None)
    ocr = svc.ocr()
    if original is None or ocr is None:
        return ""
    try:
        return str(ocr.recognize(original.data)).strip()
    except Exception as error:
        raise TransientStageError(f"OCR failed: {error}", code=SpanErrorCode.DOCREADER_UNAVAILABLE) from error


# ---------------------------------------------------------------- chunking


def chunk_id(knowledge: Knowledge, seq: int, parent: bool = False) -> str:
    return f"{knowledge.id}-a{knowledge.attempt}-{'p' if parent else ''}{seq:05d}"


def _content_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def build_chunks(knowledge: Knowledge, markdown: str, config: Any) -> tuple[list[Chunk], dict[str, Any]]:
    from .chunker import split, split_parent_child

    def make(seq: int, piece: Any, chunk_type: ChunkType, parent: bool = False) -> Chunk:
        return Chunk(
            id=chunk_id(knowledge, seq, parent),
            tenant_id=knowledge.tenant_id,
            kb_id=knowledge.kb_id,
            knowledge_id=knowledge.id,
            seq=seq,
            content=piece.content,
            chunk_type=chunk_type,
            start_at=piece.start,
            end_at=piece.end,
            context_header=piece.context_header,
            content_hash=_content_hash(piece.content),
            metadata={"attempt": knowledge.attempt},
        )

    if config.enable_parent_child:
        result = split_parent_child(markdown, config)
        parents = [make(i, p, ChunkType.PARENT_TEXT, parent=True) for i, p in enumerate(result.parents)]
        children = []
        for i, child in enumerate(result.children):
            chunk = make(i, child.piece, ChunkType.TEXT)
            if child.parent_index >= 0:
                chunk.parent_chunk_id = parents[child.parent_index].id
            children.append(chunk)
        used = {c.parent_chunk_id for c in children}
        parents = [p for p in parents if p.id in used]
        _link(parents)
        _link(children)
        return parents + children, {"parents": len(parents), "children": len(children)}
    chunks = [make(i, piece, ChunkType.TEXT) for i, piece in enumerate(split(markdown, config))]
    chunks = [c for c in chunks if c.content.strip()]
    _link(chunks)
    return chunks, {}


def _link(chunks: list[Chunk]) -> None:
    for before, after in itertools.pairwise(chunks):
        before.next_chunk_id = after.id
        after.pre_chunk_id = before.id


def chunking_stage(svc: Services, message: StageMessage) -> None:
    live = _live(svc, message)
    if live is None:
        return
    knowledge, kb = live
    effective = resolve(kb, knowledge.process_overrides)
    svc.tracker.begin_stage(
        knowledge,
        Stage.CHUNKING,
        {
            "chunk_size": effective.chunking.chunk_size,
            "chunk_overlap": effective.chunking.chunk_overlap,
            "strategy": effective.chunking.strategy,
            "parent_child": effective.chunking.enable_parent_child,
        },
    )
    from .chunker import normalise_markdown

    parsed_url = svc.files.url_for(parsed_markdown_key(knowledge.tenant_id, knowledge.id, knowledge.attempt))
    markdown = normalise_markdown(svc.files.read(parsed_url).decode("utf-8"))
    try:
        chunks, extra = build_chunks(knowledge, markdown, effective.chunking)
    except Exception as error:
        raise PermanentStageError(f"chunking failed: {error}", code=SpanErrorCode.CHUNKING_FAILED) from error
    if not chunks:
        raise PermanentStageError("the document produced no chunks", code=SpanErrorCode.CHUNKING_FAILED)
    if len(chunks) > MAX_CHUNKS_PER_DOCUMENT:
        raise PermanentStageError(
            f"{len(chunks)} chunks is over the limit of {MAX_CHUNKS_PER_DOCUMENT}; use a larger chunk_size",
            code=SpanErrorCode.CHUNKING_FAILED,
        )
    svc.chunks.replace_all(knowledge.id, chunks)
    svc.tracker.end_stage(
        knowledge,
        Stage.CHUNKING,
        {
            "chunks_written": len(chunks),
            "total_text_chars": len(markdown),
            **extra,
        },
    )
    svc.queue.send(Stage.EMBEDDING, message)


# ---------------------------------------------------------------- embedding and indexing


def execution_name(knowledge_id: str, attempt: int) -> str:
    return f"{knowledge_id}-{attempt}"[:80]


def embedding_stage(svc: Services, message: StageMessage) -> None:
    live = _live(svc, message)
    if live is None:
        return
    knowledge, kb = live
    from .indexing import index_knowledge

    svc.tracker.begin_stage(knowledge, Stage.EMBEDDING, {"model": kb.embedding_model_id or "default"})
    outputs = index_knowledge(svc, knowledge, kb)
    images = json.loads(svc.files.read(svc.files.url_for(images_manifest_key(knowledge))))
    if not svc.knowledge.mark_indexed(
        knowledge.id,
        knowledge.attempt,
        chunk_count=outputs["chunks"],
        storage_size=knowledge.file_size,
        completed=False,
    ):
        log.info("embedding: %s was superseded or cancelled while indexing", knowledge.id)
        return
    svc.tracker.end_stage(knowledge, Stage.EMBEDDING, outputs)
    if not images:
        svc.tracker.skip_stage(knowledge, Stage.MULTIMODAL, "no images")
    svc.workflow.start(
        execution_name(knowledge.id, knowledge.attempt),
        {
            "knowledge_id": knowledge.id,
            "tenant_id": knowledge.tenant_id,
            "attempt": knowledge.attempt,
            "attempt_n": str(knowledge.attempt),
            "images": [
                {"index": i, "url": image["url"], "ocr_done": bool(image.get("ocr_in_markdown"))}
                for i, image in enumerate(images)
            ],
        },
    )


def rollback_embedding(svc: Services, message: StageMessage) -> None:
    """Indexing failed for good: delete this attempt's chunks and index entries (spec §1.10)."""
    from .indexing import rollback_indexing

    knowledge = svc.knowledge.get(message.knowledge_id)
    if knowledge is not None and knowledge.attempt == message.attempt:
        rollback_indexing(svc, knowledge.id)
