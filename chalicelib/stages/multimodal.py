"""multimodal queue: one state machine Map item per stored image → its OCR text and its caption, as
`image_ocr` and `image_caption` chunks bound to the first text chunk that shows the image (spec §1.11).

Gated by `enable_multimodel` (an uploaded image is always read: it is the document) and by the models the
knowledge base has: OCR from the deployment's engine, or from the vision model when `ocr_engine` is "vlm";
a caption only with a vision model (the sub-span says so when there is none). An image never fails its
document: a failure is recorded on its sub-span and the task is answered. Chunk ids are deterministic per
(knowledge, attempt, image, kind), so a redelivered task rewrites the same chunks and entries, and takes the
texts an earlier delivery wrote instead of asking the model again; then the tenant's image text cache
(services/image_texts: the same bytes read by the same recipe in another document or an earlier attempt).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chalicelib.domain.errors import SpanErrorCode, StageError
from chalicelib.domain.ids import chunk_id, image_chunk_id
from chalicelib.domain.languages import with_languages
from chalicelib.domain.markup import strip_active_content
from chalicelib.domain.process_config import EffectiveProcessConfig, describes_images, resolve
from chalicelib.domain.types import Chunk, ChunkType, Knowledge, KnowledgeBase, ParseStatus, SpanStatus, Stage
from chalicelib.enrich import images as prompts
from chalicelib.ports import (
    Dependencies,
    IndexSpace,
    ModelRequestError,
    ModelThrottled,
    ModelUnavailable,
    VisionModel,
)
from chalicelib.services.image_parents import bound_text_chunks
from chalicelib.services.image_texts import Recipe, cached_text, image_digest, remember_text
from chalicelib.services.liveness import kept_after_write
from chalicelib.stages.messages import ImageRef, ImageTaskModel
from chalicelib.stages.runner import Skip, run_task, task_knowledge

#: image chunks sort after every text chunk of the document: the base is chunking's MAX_CHUNKS_PER_DOCUMENT
#: (at 100,000, a document of more text chunks shared its chunk_index numbers with its images)
IMAGE_SEQ_BASE = 150_000
OCR_MAX_TOKENS = 2048
CAPTION_MAX_TOKENS = 512


def handle(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    return run_task(deps, event, context, ImageTaskModel, run, "multimodal")


def run(deps: Dependencies, task: ImageTaskModel) -> dict[str, Any]:
    knowledge = task_knowledge(deps, task, ParseStatus.PROCESSING)
    kb = deps.kbs.get(knowledge.kb_id)
    if kb is None:
        raise Skip("knowledge base deleted")
    image = task.image
    span_id = task.span_id
    deps.tracker.begin_stage(knowledge, Stage.MULTIMODAL)
    effective = resolve(kb, knowledge.process_overrides)
    if not describes_images(effective, image.original):
        deps.tracker.subspan(
            knowledge, Stage.MULTIMODAL, span_id, SpanStatus.SKIPPED, {"reason": "enable_multimodel is off"}
        )
        return {"ocr_chars": 0, "caption_chars": 0}
    outputs: dict[str, Any] = {}
    # what an earlier delivery of this attempt read is not asked of the model again (a retry after the
    # caption's model timed out pays for the OCR once)
    texts: dict[ChunkType, str] = _read_before(deps, knowledge, image)
    failures: list[str] = []
    data: bytes | None = None
    digest = ""
    cached = {ChunkType.IMAGE_OCR: 0, ChunkType.IMAGE_CAPTION: 0}
    for kind, plan in ((ChunkType.IMAGE_OCR, _ocr), (ChunkType.IMAGE_CAPTION, _caption)):
        if kind in texts:
            continue
        if data is None:
            data = deps.files.read(image.url)
            digest = image_digest(data)
        reading = plan(deps, effective, image)
        if isinstance(reading, str):
            outputs[f"{kind.value}_skipped"] = reading
            continue
        # the tenant's text of these very bytes by this very recipe (another document, an earlier attempt)
        text = cached_text(deps, knowledge.tenant_id, digest, kind.value, reading.recipe)
        if text:
            texts[kind] = text
            cached[kind] = 1
            continue
        try:
            text, note = reading.read(data)
        except (StageError, ModelRequestError) as error:  # an image never fails its document
            failures.append(f"{kind.value}: {getattr(error, 'message', type(error).__name__)}")
            continue
        except (ModelUnavailable, ModelThrottled):  # retried: what was read is kept, for it and the last try
            if texts:
                _write_chunks(deps, knowledge, kb, image, texts)
            raise
        if note:
            outputs[f"{kind.value}_skipped"] = note
        # stored as chunks a front end shows as Markdown: a model's (or a pictured page's) active HTML goes,
        # as every text's does (domain.markup); cached as stored
        text = strip_active_content(text).strip()
        if text:
            texts[kind] = text
            remember_text(deps, knowledge.tenant_id, digest, kind.value, reading.recipe, text)
    if texts:
        _write_chunks(deps, knowledge, kb, image, texts)
    outputs.update(
        {
            "ocr_chars": len(texts.get(ChunkType.IMAGE_OCR, "")),
            "caption_chars": len(texts.get(ChunkType.IMAGE_CAPTION, "")),
            # texts this task took from the tenant's image text cache instead of a model call
            "ocr_cached": cached[ChunkType.IMAGE_OCR],
            "caption_cached": cached[ChunkType.IMAGE_CAPTION],
        }
    )
    status = SpanStatus.FAILED if failures and not texts else SpanStatus.DONE
    deps.tracker.subspan(
        knowledge,
        Stage.MULTIMODAL,
        span_id,
        status,
        outputs,
        error_code=SpanErrorCode.MULTIMODAL_VLM_FAILED if failures else "",
        error_message="; ".join(failures),
    )
    return {k: v for k, v in outputs.items() if k.endswith("_chars")}


#: the `image_info` field of each of an image's texts
_INFO_FIELD = {ChunkType.IMAGE_OCR: "ocr_text", ChunkType.IMAGE_CAPTION: "caption"}


def _kind_tag(kind: ChunkType) -> str:
    return "ocr" if kind == ChunkType.IMAGE_OCR else "cap"


def _read_before(deps: Dependencies, knowledge: Knowledge, image: ImageRef) -> dict[ChunkType, str]:
    """The image's texts an earlier delivery of this attempt wrote (its chunks, by their deterministic ids)."""
    keys = {
        kind: (knowledge.id, image_chunk_id(knowledge.id, knowledge.attempt, image.index, _kind_tag(kind)))
        for kind in (ChunkType.IMAGE_OCR, ChunkType.IMAGE_CAPTION)
    }
    found = deps.chunks.get_many(list(keys.values()))
    # cleaned as a text read now is: a delivery of code from before the cleaning may have written them
    texts = {
        kind: strip_active_content(found[key].content).strip()
        for kind, key in keys.items()
        if key in found and found[key].chunk_type == kind
    }
    return {kind: text for kind, text in texts.items() if text}


@dataclass(frozen=True)
class _Reading:
    """How one of an image's texts is read: what decides the answer (the cache's recipe) and the paid call,
    which answers (text, why there is none)."""

    recipe: Recipe
    read: Callable[[bytes], tuple[str, str]]


def _ocr(deps: Dependencies, effective: EffectiveProcessConfig, image: ImageRef) -> _Reading | str:
    """How the image's OCR text is read, or why it is not."""
    if image.ocr_done:
        return "the OCR text is already in the document"
    if effective.ocr_engine == "none":
        return "ocr_engine is none"
    if effective.ocr_engine == "vlm":
        vision = deps.vision_model(effective.vlm_model_id)
        if vision is None:
            return "no vision model configured"
        return _vision_reading(vision, prompts.OCR_PROMPT, OCR_MAX_TOKENS)
    ocr = deps.ocr()
    if ocr is None:
        return "no OCR engine on this deployment"
    engine = with_languages(ocr, effective.ocr_languages)
    recipe: Recipe = {
        "ocr_engine": effective.ocr_engine,
        "engine": ocr.name,
        "languages": list(effective.ocr_languages),
    }
    return _Reading(recipe, lambda data: (engine.recognize(data).strip(), ""))


def _caption(deps: Dependencies, effective: EffectiveProcessConfig, image: ImageRef) -> _Reading | str:
    vision = deps.vision_model(effective.vlm_model_id) if effective.vlm_model_id else None
    if vision is None:
        return "no vision model configured (vlm_model_id)"
    prompt = prompts.caption_prompt(effective.caption_language, effective.caption_instructions)
    return _vision_reading(vision, prompt, CAPTION_MAX_TOKENS)


def _vision_reading(vision: VisionModel, prompt: str, max_tokens: int) -> _Reading:
    recipe: Recipe = {
        # the model the catalog resolves the tenant's name to now (an operator may point the name elsewhere)
        "model": vision.model_id,
        "prompt_sha256": hashlib.sha256(prompt.encode()).hexdigest(),
        "max_tokens": max_tokens,
    }
    return _Reading(recipe, lambda data: _described(vision.describe(data, prompt, max_tokens=max_tokens)))


def _described(reply: str) -> tuple[str, str]:
    """(text, why there is none) of a vision model's reply: a refusal is not the image's text."""
    text = prompts.clean(reply)
    return ("", "the vision model declined to read the image") if prompts.declined(text) else (text, "")


def _parent(deps: Dependencies, knowledge: Knowledge, image: ImageRef) -> Chunk | None:
    """The text chunk the image's chunks are bound to: the one the hand-over found (one read by key), else
    (a message from before it, or that chunk gone since) looked up among the document's chunks."""
    if image.parent_seq is not None:
        key = (knowledge.id, chunk_id(knowledge.id, knowledge.attempt, image.parent_seq))
        chunk = deps.chunks.get_many([key]).get(key)
        if chunk is not None and chunk.chunk_type == ChunkType.TEXT:
            return chunk
    return bound_text_chunks(deps, knowledge, [image.url]).get(image.url)


def _write_chunks(
    deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, image: ImageRef, texts: dict[ChunkType, str]
) -> None:
    parent = _parent(deps, knowledge, image)
    chunks = [
        Chunk(
            id=image_chunk_id(knowledge.id, knowledge.attempt, image.index, _kind_tag(kind)),
            tenant_id=knowledge.tenant_id,
            kb_id=kb.id,
            knowledge_id=knowledge.id,
            seq=IMAGE_SEQ_BASE + 2 * image.index + (0 if kind == ChunkType.IMAGE_OCR else 1),
            content=text,
            chunk_type=kind,
            # where the image stands: what reads the document in order (by start_at) meets it there
            start_at=parent.start_at if parent else 0,
            end_at=parent.end_at if parent else 0,
            parent_chunk_id=parent.id if parent else "",
            image_info=[{"url": image.url, _INFO_FIELD[kind]: text}],
            metadata={"attempt": knowledge.attempt},
        )
        for kind, text in texts.items()
    ]
    deps.chunks.put_many(chunks)
    model = deps.embedding_model(kb.embedding_model_id)
    space = IndexSpace.of(model)

    def undo() -> None:
        deps.chunks.delete_all(knowledge.id)
        deps.engine(kb.retrieval_engine).delete_by_knowledge(space, kb.id, [knowledge.id])

    def undo_superseded() -> None:  # a reparse's attempt would never clean what this one wrote after it
        from chalicelib.services.indexing import take_back_chunks

        take_back_chunks(deps, knowledge, [c.id for c in chunks], (deps.engine(kb.retrieval_engine), space))

    if not kept_after_write(deps, knowledge, undo, undo_superseded=undo_superseded):
        raise Skip("the knowledge was deleted, cancelled or superseded")
    if parent is not None:  # the text chunk showing the image describes it too (its text and index kept)
        fields = {_INFO_FIELD[kind]: text for kind, text in texts.items()}
        deps.chunks.merge_image_info(
            knowledge.id, parent.id, image.url, fields, kb_id=kb.id, attempt=knowledge.attempt
        )
    if not kb.indexing_strategy.needs_embedding:
        return
    from chalicelib.services.embedding_runs import embed_texts
    from chalicelib.services.indexing import chunk_entries, index_as_the_document_is

    # No title prefix: the image's own words are what a query should meet (spec §1.11); a hit shows the
    # image's text, and the chunk names its bound text chunk.
    contents = [c.content for c in chunks]
    vectors = (
        embed_texts(deps, kb.tenant_id, model, contents) if kb.indexing_strategy.vector_enabled else None
    )
    entries = chunk_entries(kb.id, knowledge.id, chunks, contents, vectors)
    index_as_the_document_is(deps, knowledge, deps.engine(kb.retrieval_engine), space, entries)
    if not kept_after_write(deps, knowledge, undo, undo_superseded=undo_superseded):
        raise Skip("the knowledge was deleted, cancelled or superseded")
