"""enrichment queue: one state machine Map item per planned subtask (today: the summary).

The state machine releases the subtask's slot once, whatever the outcome, and promotes the row to
`completed` when the last slot is released.
"""

from __future__ import annotations

from typing import Any

from ..domain.types import ChunkType, Knowledge, ParseStatus, SpanStatus, Stage, SummaryStatus
from ..ports import Dependencies
from .messages import SubtaskMessageModel
from .runner import run_task, task_knowledge


class UnknownSubtask(ValueError):
    pass


def handle(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    return run_task(deps, event, context, SubtaskMessageModel, run, "enrichment")


def run(deps: Dependencies, task: SubtaskMessageModel) -> dict[str, Any]:
    knowledge = task_knowledge(deps, task, ParseStatus.FINALIZING)
    if task.subtask.kind == "summary":
        return summary(deps, knowledge)
    raise UnknownSubtask(f"unknown enrichment kind {task.subtask.kind!r}")


def summary(deps: Dependencies, knowledge: Knowledge) -> dict[str, Any]:
    from ..enrich.summary import EXTRACTIVE, summarize

    kb = deps.kbs.get(knowledge.kb_id)
    model_id = kb.summary_model_id if kb else ""
    deps.knowledge.set_summary_status(knowledge.id, SummaryStatus.PROCESSING.value)
    texts = sorted(
        (c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.TEXT),
        key=lambda c: c.start_at,
    )
    chat = deps.chat_model(model_id) if model_id and model_id != EXTRACTIVE else None
    try:
        text = summarize([c.content for c in texts], model_id, chat, knowledge.title)
    except ValueError as error:
        # terminal for this document: the first chunk stands in as its description (spec §1.13)
        deps.knowledge.set_description(knowledge.id, texts[0].content[:500] if texts else "")
        deps.knowledge.set_summary_status(knowledge.id, SummaryStatus.FAILED.value)
        deps.tracker.subspan(
            knowledge, Stage.POSTPROCESS, "postprocess.summary", SpanStatus.FAILED, error_message=str(error)
        )
        return {"summary_chars": 0, "reason": str(error)}
    deps.knowledge.set_description(knowledge.id, text)
    deps.knowledge.set_summary_status(knowledge.id, SummaryStatus.COMPLETED.value)
    deps.tracker.subspan(
        knowledge,
        Stage.POSTPROCESS,
        "postprocess.summary",
        SpanStatus.DONE,
        {"summary_chars": len(text), "model": model_id},
    )
    return {"summary_chars": len(text)}
