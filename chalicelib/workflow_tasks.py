"""Workers for the state machine's `.waitForTaskToken` tasks: multimodal, post-process plan, enrichment.

Each message carries a task token and pointers. Workers answer the token once their work is durable; a
token that is already closed (timed out, superseded) is treated as done. An image or an enrichment
subtask never fails the document: the state machine catches its failure and releases the slot.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from .batch import process_batch
from .bootstrap import Services
from .domain.errors import SpanErrorCode
from .domain.types import Chunk, ChunkType, Knowledge, ParseStatus, SpanStatus, Stage, SummaryStatus
from .ports import IndexEntry
from .stage_runner import receive_count

log = logging.getLogger(__name__)


class Skip(Exception):
    """The row moved on (superseded, cancelled, deleted): answer the token without doing the work."""


def _knowledge(svc: Services, body: dict[str, Any], *statuses: ParseStatus) -> Knowledge:
    knowledge = svc.knowledge.get(str(body["knowledge_id"]))
    if (
        knowledge is None
        or knowledge.attempt != int(body["attempt"])
        or knowledge.parse_status not in statuses
    ):
        raise Skip("superseded, cancelled or deleted")
    return knowledge


def run_callback_tasks(
    svc: Services,
    event: dict[str, Any],
    context: Any,
    work: Callable[[Services, dict[str, Any]], dict[str, Any]],
    task: str,
) -> dict[str, Any]:
    def handle(record: SQSRecord) -> None:
        try:
            body = json.loads(record.body)
            token = str(body["task_token"])
        except (ValueError, KeyError, TypeError) as error:
            svc.queue.dead_letter(task, record.body, f"not a {task} task: {error}")
            return
        try:
            output = work(svc, body)
        except Skip as skipped:
            svc.workflow.task_success(token, {"skipped": True, "reason": str(skipped)})
            return
        except Exception as error:
            if receive_count(record) >= svc.settings.stage_max_receives:
                svc.workflow.task_failure(token, f"{task}.failed", str(error))
                return
            raise
        svc.workflow.task_success(token, output)

    return process_batch(event, context, handle)


# ---------------------------------------------------------------- multimodal


def multimodal_task(svc: Services, body: dict[str, Any]) -> dict[str, Any]:
    knowledge = _knowledge(svc, body, ParseStatus.PROCESSING)
    image = body["image"]
    span_id = f"multimodal.image[{int(image['index'])}]"
    svc.tracker.begin_stage(knowledge, Stage.MULTIMODAL)
    ocr = svc.ocr()
    if image.get("ocr_done"):
        svc.tracker.subspan(
            knowledge,
            Stage.MULTIMODAL,
            span_id,
            SpanStatus.SKIPPED,
            {"reason": "OCR text is already in the Markdown"},
        )
        return {"ocr_chars": 0}
    if ocr is None:
        svc.tracker.subspan(
            knowledge,
            Stage.MULTIMODAL,
            span_id,
            SpanStatus.SKIPPED,
            {"reason": "no OCR engine or vision model configured"},
        )
        return {"ocr_chars": 0}
    try:
        text = ocr.recognize(svc.files.read(str(image["url"]))).strip()
    except Exception as error:  # an image never fails its document
        svc.tracker.subspan(
            knowledge,
            Stage.MULTIMODAL,
            span_id,
            SpanStatus.FAILED,
            error_code=SpanErrorCode.MULTIMODAL_VLM_FAILED,
            error_message=str(error),
        )
        return {"ocr_chars": 0, "error": str(error)}
    if text:
        _write_image_chunk(svc, knowledge, image, text)
    svc.tracker.subspan(knowledge, Stage.MULTIMODAL, span_id, SpanStatus.DONE, {"ocr_chars": len(text)})
    return {"ocr_chars": len(text)}


def _write_image_chunk(svc: Services, knowledge: Knowledge, image: dict[str, Any], text: str) -> None:
    kb = svc.kbs.get(knowledge.kb_id)
    if kb is None:
        raise Skip("knowledge base deleted")
    texts = [c for c in svc.chunks.list(knowledge.id) if c.chunk_type == ChunkType.TEXT]
    parent = next((c for c in texts if str(image["url"]) in c.content), texts[0] if texts else None)
    chunk = Chunk(
        id=f"{knowledge.id}-a{knowledge.attempt}-ocr{int(image['index']):04d}",
        tenant_id=knowledge.tenant_id,
        kb_id=kb.id,
        knowledge_id=knowledge.id,
        seq=100_000 + int(image["index"]),
        content=text,
        chunk_type=ChunkType.IMAGE_OCR,
        parent_chunk_id=parent.id if parent else "",
        image_info=[{"url": image["url"], "ocr_text": text}],
        metadata={"attempt": knowledge.attempt},
    )
    svc.chunks.put_many([chunk])
    if kb.indexing_strategy.needs_embedding:
        from .indexing import embed_texts

        model = svc.embedding_model(kb.embedding_model_id)
        vector = embed_texts(svc, model, [text])[0] if kb.indexing_strategy.vector_enabled else None
        svc.engine(kb.retrieval_engine).batch_index(
            svc.index_space(model),
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


# ---------------------------------------------------------------- post-process plan


def postprocess_task(svc: Services, body: dict[str, Any]) -> dict[str, Any]:
    """Plans the enrichment subtasks; the state machine then sets `finalizing` with the exact count."""
    knowledge = _knowledge(svc, body, ParseStatus.PROCESSING)
    kb = svc.kbs.get(knowledge.kb_id)
    if kb is None:
        raise Skip("knowledge base deleted")
    from .domain.process_config import resolve

    effective = resolve(kb, knowledge.process_overrides)
    multimodal = svc.spans.get(knowledge.id, knowledge.attempt, Stage.MULTIMODAL.value)
    if multimodal is not None and multimodal.status == SpanStatus.RUNNING:
        svc.tracker.end_stage(knowledge, Stage.MULTIMODAL)
    svc.tracker.begin_stage(knowledge, Stage.POSTPROCESS)
    text_like = [
        c
        for c in svc.chunks.list(knowledge.id)
        if c.chunk_type in (ChunkType.TEXT, ChunkType.IMAGE_OCR, ChunkType.IMAGE_CAPTION)
    ]
    subtasks: list[dict[str, Any]] = []
    if text_like and kb.summary_model_id and effective.summary_enabled:
        subtasks.append({"id": "summary", "kind": "summary"})
        svc.knowledge.set_summary_status(knowledge.id, SummaryStatus.PENDING.value)
    # Question batches (ceil(text chunks / 20)), graph and wiki subtasks join this plan with the
    # enrichment work; the state machine already counts and drains any number of them.
    for subtask in subtasks:
        subtask["id_set"] = [subtask["id"]]
    svc.tracker.end_stage(knowledge, Stage.POSTPROCESS, {"planned": [s["id"] for s in subtasks]})
    return {"skipped": False, "subtasks": subtasks, "count": len(subtasks), "count_n": str(len(subtasks))}


# ---------------------------------------------------------------- enrichment subtasks


def enrichment_task(svc: Services, body: dict[str, Any]) -> dict[str, Any]:
    knowledge = _knowledge(svc, body, ParseStatus.FINALIZING)
    subtask = body["subtask"]
    kind = str(subtask["kind"])
    if kind == "summary":
        return _summary(svc, knowledge)
    raise ValueError(f"unknown enrichment kind {kind!r}")


def _summary(svc: Services, knowledge: Knowledge) -> dict[str, Any]:
    from .enrich.summary import EXTRACTIVE, summarize

    kb = svc.kbs.get(knowledge.kb_id)
    model_id = kb.summary_model_id if kb else ""
    svc.knowledge.set_summary_status(knowledge.id, SummaryStatus.PROCESSING.value)
    texts = sorted(
        (c for c in svc.chunks.list(knowledge.id) if c.chunk_type == ChunkType.TEXT), key=lambda c: c.start_at
    )
    chat = None
    if model_id and model_id != EXTRACTIVE:
        from .adapters.models.registry import build_chat_model

        chat = build_chat_model(model_id)
    try:
        summary = summarize([c.content for c in texts], model_id, chat, knowledge.title)
    except ValueError as error:
        # terminal for this document: the first chunk stands in as its description (spec §1.13)
        svc.knowledge.set_description(knowledge.id, texts[0].content[:500] if texts else "")
        svc.knowledge.set_summary_status(knowledge.id, SummaryStatus.FAILED.value)
        svc.tracker.subspan(
            knowledge, Stage.POSTPROCESS, "postprocess.summary", SpanStatus.FAILED, error_message=str(error)
        )
        return {"summary_chars": 0, "reason": str(error)}
    svc.knowledge.set_description(knowledge.id, summary)
    svc.knowledge.set_summary_status(knowledge.id, SummaryStatus.COMPLETED.value)
    svc.tracker.subspan(
        knowledge,
        Stage.POSTPROCESS,
        "postprocess.summary",
        SpanStatus.DONE,
        {"summary_chars": len(summary), "model": model_id},
    )
    return {"summary_chars": len(summary)}


__all__ = ["enrichment_task", "multimodal_task", "postprocess_task", "run_callback_tasks"]
