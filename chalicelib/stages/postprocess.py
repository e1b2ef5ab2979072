"""postprocess queue: the data-table summary (for csv/xlsx/xls, inside the plan, after parsing, so the parse
cleanup can never wipe it) and the enrichment plan. Before it answers, the worker settles the row in one
conditional write (only from processing, at this attempt): `finalizing` with the exact count, or `completed`
when nothing is planned; the state machine then fans the subtasks out (an empty plan fans out nothing).
A second copy of the task finds the row settled and answers the plan stored on it, so the count on the row
and the subtasks the machine runs are always the same plan.

The plan is WeKnora's (spec §1.13–§1.18): a summary if there is any text-like chunk; ⌈text chunks / 20⌉
question items when questions are on and the document is indexed; ⌈text-like chunks / 20⌉ graph items when
the graph is on (each within the operator's per-document cap of chunks); one wiki item when the wiki is
on. LLM work is planned only with a chat model; what is not planned, and why, is recorded on the span and
the row. Auto-tagging runs outside the count.
"""

from __future__ import annotations

from typing import Any

from chalicelib.domain import metering
from chalicelib.domain.events import EventType
from chalicelib.domain.filetypes import DATA_TABLE_EXTENSIONS
from chalicelib.domain.ids import attempt_chunk_prefix
from chalicelib.domain.plan import CallCaps, plan, planned_subtask
from chalicelib.domain.process_config import EffectiveProcessConfig, resolve
from chalicelib.domain.storage_keys import parsed_markdown_key
from chalicelib.domain.types import Chunk, ChunkType, Knowledge, KnowledgeBase, ParseStatus, SpanStatus, Stage
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, ModelRequestError, ModelThrottled, ModelUnavailable
from chalicelib.services.events import completed_again, knowledge_changed
from chalicelib.services.indexing import write_extra_chunks
from chalicelib.services.storage import files_of
from chalicelib.stages.messages import TaskMessageModel
from chalicelib.stages.runner import Skip, checked_task_row, run_task

TABLE_SEQ_BASE = 300_000
#: where the planner leaves the row (finalizing with a count, or completed with nothing planned)
SETTLED = (ParseStatus.FINALIZING, ParseStatus.COMPLETED)


def handle(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    return run_task(deps, event, context, TaskMessageModel, run, "postprocess")


def run(deps: Dependencies, task: TaskMessageModel) -> dict[str, Any]:
    """The plan the state machine fans out; always with `subtasks` (empty when skipped or nothing planned)."""
    try:
        return _plan_and_settle(deps, task)
    except Skip as skipped:
        return {"skipped": True, "reason": str(skipped), "subtasks": [], "count": 0}


def _settled(row: Knowledge | None, task: TaskMessageModel) -> dict[str, Any] | None:
    """The answer of a plan already settled on the row for this attempt (a redelivered or duplicate task
    whose first copy set the row before its answer was sent or seen); None when the row is not settled."""
    if row is None or row.attempt != task.attempt or row.parse_status not in SETTLED:
        return None
    metering.attribute(row.kb_id, row.tenant_id)
    if row.parse_status == ParseStatus.COMPLETED:
        return answer([])  # nothing was planned, or the subtasks ran: the token is closed then
    return answer([planned_subtask(i) for i in row.enrichment.get("planned", [])])


def answer(subtasks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"skipped": False, "subtasks": subtasks, "count": len(subtasks)}


def _plan_and_settle(deps: Dependencies, task: TaskMessageModel) -> dict[str, Any]:
    row = deps.knowledge.get(task.knowledge_id)
    settled = _settled(row, task)
    if settled is not None:
        completed_again(deps, row, task.attempt)
        return settled
    knowledge = checked_task_row(row, task, ParseStatus.PROCESSING)
    kb = deps.kbs.get(knowledge.kb_id)
    if kb is None:
        raise Skip("knowledge base deleted")
    effective = resolve(kb, knowledge.process_overrides)
    multimodal = deps.spans.get(knowledge.id, knowledge.attempt, Stage.MULTIMODAL.value)
    if multimodal is not None and multimodal.status == SpanStatus.RUNNING:
        deps.tracker.end_stage(knowledge, Stage.MULTIMODAL)
    deps.tracker.begin_stage(knowledge, Stage.POSTPROCESS)
    table = _table_summary(deps, knowledge, kb, effective)
    chunks = [c for c in deps.chunks.list(knowledge.id) if c.metadata.get("attempt") == knowledge.attempt]
    caps = CallCaps(deps.settings.max_question_chunks, deps.settings.max_graph_chunks)
    subtasks, not_planned = plan(kb, effective, chunks, caps)
    if effective.graph_enabled and effective.has_chat_model:
        # A new attempt extracts afresh: earlier attempts' facts go. Not this attempt's: a duplicate of this
        # message may run after another copy settled and its graph subtasks began to write.
        deps.graph.keep_only_attempt(
            kb.id, knowledge.id, attempt_chunk_prefix(knowledge.id, knowledge.attempt)
        )
    planned = [s["id"] for s in subtasks]
    deps.tracker.end_stage(
        knowledge, Stage.POSTPROCESS, {"planned": planned, "not_planned": not_planned, **table}
    )
    if effective.auto_tag_enabled and effective.has_chat_model and kb.type == "document":
        from chalicelib.services.dispatch import request_auto_tag

        request_auto_tag(deps, knowledge)  # outside the count
    plan_record = {"planned": planned, "not_planned": not_planned}
    summary_pending = any(s["kind"] == "summary" for s in subtasks)
    settled_row = deps.knowledge.settle_plan(
        knowledge.id, knowledge.attempt, len(subtasks), plan_record, summary_pending=summary_pending
    )
    if settled_row is None:
        # another copy of this task settled the row first (answer its plan), or the row moved on (skip)
        row = deps.knowledge.get(task.knowledge_id)
        settled = _settled(row, task)
        if settled is None:
            raise Skip("superseded, cancelled or deleted")
        completed_again(deps, row, task.attempt)
        return settled
    if settled_row.parse_status == ParseStatus.COMPLETED:  # nothing planned: this write completed it
        knowledge_changed(deps, settled_row, EventType.KNOWLEDGE_COMPLETED)
    return answer(subtasks)


def _table_summary(
    deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, effective: EffectiveProcessConfig
) -> dict[str, Any]:
    """csv/xlsx/xls: the schema and 10 sample rows → `table_summary` and `table_column` chunks, indexed."""
    if knowledge.file_type not in DATA_TABLE_EXTENSIONS:
        return {}
    if not effective.has_chat_model:
        return {"table_summary": "skipped: no chat model configured"}
    from chalicelib.enrich.tables import schema_of, summarise

    parsed = files_of(deps, knowledge).url_for(
        parsed_markdown_key(knowledge.tenant_id, knowledge.id, knowledge.attempt)
    )
    schema = schema_of(deps.files.read(parsed).decode("utf-8"))
    chat = deps.chat_model(effective.chat_model_id)
    if schema is None or chat is None:
        return {"table_summary": "skipped: no table found"}
    try:
        summary = summarise(chat, knowledge.title, schema)
    except ModelRequestError as error:
        logger.warning(
            "table summary failed", extra={"knowledge_id": knowledge.id, "error": type(error).__name__}
        )
        return {"table_summary": f"failed: {error.code}"}  # a stable code: the text may be the server's
    except (ModelThrottled, ModelUnavailable) as error:
        # optional and planned inside the state machine's task: deferring it past the task's timeout failed
        # the whole plan, and with it a document already indexed and searchable
        logger.warning(
            "table summary skipped: the chat model is busy or down",
            extra={"knowledge_id": knowledge.id, "error": type(error).__name__},
        )
        return {"table_summary": "skipped: the chat model is throttled or unavailable"}
    if summary is None:
        return {"table_summary": "failed: the model's reply was not a table description"}
    columns = "\n".join(f"- {name} ({kind})" for name, kind in schema.columns)
    contents = [
        (
            ChunkType.TABLE_SUMMARY,
            f"# Table: {knowledge.title}\n\n{summary.description}\n\nColumns:\n{columns}",
        )
    ]
    types = dict(schema.columns)
    contents += [
        (ChunkType.TABLE_COLUMN, f"Column {name} ({types[name]}) of {knowledge.title}: {text}")
        for name, text in summary.columns.items()
    ]
    chunks = [
        Chunk(
            id=f"{knowledge.id}-a{knowledge.attempt}-table{n:03d}",
            tenant_id=knowledge.tenant_id,
            kb_id=kb.id,
            knowledge_id=knowledge.id,
            seq=TABLE_SEQ_BASE + n,
            content=content,
            chunk_type=kind,
            metadata={"attempt": knowledge.attempt},
        )
        for n, (kind, content) in enumerate(contents)
    ]
    if not write_extra_chunks(deps, knowledge, kb, chunks):
        raise Skip("the knowledge was deleted, cancelled or superseded")
    return {"table_summary": "done", "table_columns": len(chunks) - 1}
