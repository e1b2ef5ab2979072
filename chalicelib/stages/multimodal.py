"""multimodal queue: one state machine Map item per stored image → OCR text as an `image_ocr` chunk.

An image never fails its document: a failing image is recorded on its sub-span and answered as done.
The chunk id is deterministic per (knowledge, attempt, image), so a redelivered task rewrites it.
"""

from __future__ import annotations

from typing import Any

from ..domain.errors import SpanErrorCode, StageError
from ..domain.ids import image_chunk_id
from ..domain.types import Chunk, ChunkType, Knowledge, ParseStatus, SpanStatus, Stage
from ..ports import Dependencies, IndexEntry, IndexSpace
from .messages import ImageRef, ImageTaskModel
from .runner import Skip, kept_after_write, run_task, task_knowledge

#: image chunks sort after every text chunk of the document
IMAGE_SEQ_BASE = 100_000


def handle(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    return run_task(deps, event, context, ImageTaskModel, run, "multimodal")


def run(deps: Dependencies, task: ImageTaskModel) -> dict[str, Any]:
    knowledge = task_knowledge(deps, task, ParseStatus.PROCESSING)
    image = task.image
    span_id = f"multimodal.image[{image.index}]"
    deps.tracker.begin_stage(knowledge, Stage.MULTIMODAL)
    if image.ocr_done:
        deps.tracker.subspan(
            knowledge,
            Stage.MULTIMODAL,
            span_id,
            SpanStatus.SKIPPED,
            {"reason": "OCR text is already in the Markdown"},
        )
        return {"ocr_chars": 0}
    ocr = deps.ocr()
    if ocr is None:
        deps.tracker.subspan(
            knowledge,
            Stage.MULTIMODAL,
            span_id,
            SpanStatus.SKIPPED,
            {"reason": "no OCR engine or vision model configured"},
        )
        return {"ocr_chars": 0}
    try:
        text = ocr.recognize(deps.files.read(image.url)).strip()
    except StageError as error:  # an image never fails its document
        deps.tracker.subspan(
            knowledge,
            Stage.MULTIMODAL,
            span_id,
            SpanStatus.FAILED,
            error_code=SpanErrorCode.MULTIMODAL_VLM_FAILED,
            error_message=error.message,
        )
        return {"ocr_chars": 0, "error": error.message}
    if text:
        _write_image_chunk(deps, knowledge, image, text)
    deps.tracker.subspan(knowledge, Stage.MULTIMODAL, span_id, SpanStatus.DONE, {"ocr_chars": len(text)})
    return {"ocr_chars": len(text)}


def _write_image_chunk(deps: Dependencies, knowledge: Knowledge, image: ImageRef, text: str) -> None:
    kb = deps.kbs.get(knowledge.kb_id)
    if kb is None:
        raise Skip("knowledge base deleted")
    texts = [c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.TEXT]
    parent = next((c for c in texts if image.url in c.content), texts[0] if texts else None)
    chunk = Chunk(
        id=image_chunk_id(knowledge.id, knowledge.attempt, image.index),
        tenant_id=knowledge.tenant_id,
        kb_id=kb.id,
        knowledge_id=knowledge.id,
        seq=IMAGE_SEQ_BASE + image.index,
        content=text,
        chunk_type=ChunkType.IMAGE_OCR,
        parent_chunk_id=parent.id if parent else "",
        image_info=[{"url": image.url, "ocr_text": text}],
        metadata={"attempt": knowledge.attempt},
    )
    deps.chunks.put_many([chunk])
    space = IndexSpace.of(deps.embedding_model(kb.embedding_model_id))

    def undo() -> None:
        deps.chunks.delete_all(knowledge.id)
        deps.engine(kb.retrieval_engine).delete_by_knowledge(space, kb.id, [knowledge.id])

    if not kept_after_write(deps, knowledge, undo):
        raise Skip("the knowledge was deleted, cancelled or superseded")
    if kb.indexing_strategy.needs_embedding:
        from .embedding import embed_texts

        model = deps.embedding_model(kb.embedding_model_id)
        vector = embed_texts(deps, model, [text])[0] if kb.indexing_strategy.vector_enabled else None
        deps.engine(kb.retrieval_engine).batch_index(
            space,
            [
                IndexEntry(
                    id=chunk.id,
                    kb_id=kb.id,
                    knowledge_id=knowledge.id,
                    chunk_id=parent.id if parent else chunk.id,
                    content=text,
                    vector=vector,
                    source_id=chunk.id,
                    chunk_type=chunk.chunk_type.value,
                )
            ],
        )
        if not kept_after_write(deps, knowledge, undo):
            raise Skip("the knowledge was deleted, cancelled or superseded")
