"""postprocess queue: plans the enrichment subtasks; the state machine then sets `finalizing` with the
exact count (only from processing) and fans the subtasks out."""

from __future__ import annotations

from typing import Any

from ..domain.process_config import resolve
from ..domain.types import ChunkType, ParseStatus, SpanStatus, Stage, SummaryStatus
from ..ports import Dependencies
from .messages import TaskMessageModel
from .runner import Skip, run_task, task_knowledge

TEXT_LIKE = (ChunkType.TEXT, ChunkType.IMAGE_OCR, ChunkType.IMAGE_CAPTION)


def handle(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    return run_task(deps, event, context, TaskMessageModel, run, "postprocess")


def run(deps: Dependencies, task: TaskMessageModel) -> dict[str, Any]:
    knowledge = task_knowledge(deps, task, ParseStatus.PROCESSING)
    kb = deps.kbs.get(knowledge.kb_id)
    if kb is None:
        raise Skip("knowledge base deleted")
    effective = resolve(kb, knowledge.process_overrides)
    multimodal = deps.spans.get(knowledge.id, knowledge.attempt, Stage.MULTIMODAL.value)
    if multimodal is not None and multimodal.status == SpanStatus.RUNNING:
        deps.tracker.end_stage(knowledge, Stage.MULTIMODAL)
    deps.tracker.begin_stage(knowledge, Stage.POSTPROCESS)
    text_like = [c for c in deps.chunks.list(knowledge.id) if c.chunk_type in TEXT_LIKE]
    subtasks: list[dict[str, Any]] = []
    if text_like and kb.summary_model_id and effective.summary_enabled:
        subtasks.append({"id": "summary", "kind": "summary"})
        deps.knowledge.set_summary_status(knowledge.id, SummaryStatus.PENDING.value)
    for subtask in subtasks:
        subtask["id_set"] = [subtask["id"]]  # the state machine's ReleaseSlot adds it to done_subtasks
    deps.tracker.end_stage(knowledge, Stage.POSTPROCESS, {"planned": [s["id"] for s in subtasks]})
    return {"skipped": False, "subtasks": subtasks, "count": len(subtasks), "count_n": str(len(subtasks))}
