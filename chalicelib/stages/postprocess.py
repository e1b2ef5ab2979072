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

A data table's summary is one model reply, written as one set of chunks whose ids name the reply
(`<attempt>-table-<set>-<n>`), so two copies' replies never overwrite each other's chunks. The chunks are
the checkpoint (as an image's texts are multimodal's): a retry or a duplicate copy that finds a whole set
of this attempt indexes it again instead of asking the model. The settled plan names the set that stands;
whichever copy finds the row settled (the one that settled it, a second copy, a redelivery) removes every
other table chunk of the attempt with its index entries (another copy's reply, a set cut short) and puts
the standing table's figures back on the span if a losing copy wrote its own there.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
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
from chalicelib.ports import Dependencies, IndexSpace, ModelRequestError, ModelThrottled, ModelUnavailable
from chalicelib.services.chunk_pages import attempt_chunk_pages
from chalicelib.services.events import completed_again, knowledge_changed
from chalicelib.services.indexing import take_back_chunks, write_extra_chunks
from chalicelib.services.storage import files_of
from chalicelib.stages.messages import TaskMessageModel
from chalicelib.stages.runner import Skip, checked_task_row, run_task

TABLE_SEQ_BASE = 300_000
#: what a table chunk's id has after its attempt's prefix, before its set
TABLE_KIND = "table"
#: the summary chunk's metadata key (a stage's own: never shown): how many chunks its set has, so a set a
#: try wrote only in part is never taken for the reply
TABLE_SET_SIZE = "_table_set_size"
#: the plan record's key: the table's span outputs and the set that stands (`set`, "" when none does)
TABLE_RECORD = "table"
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
        _settle_table(deps, row)
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
        knowledge, Stage.POSTPROCESS, {"planned": planned, "not_planned": not_planned, **table.outputs}
    )
    if effective.auto_tag_enabled and effective.has_chat_model and kb.type == "document":
        from chalicelib.services.dispatch import request_auto_tag

        request_auto_tag(deps, knowledge)  # outside the count
    plan_record: dict[str, Any] = {"planned": planned, "not_planned": not_planned}
    if table.outputs:
        plan_record[TABLE_RECORD] = {**table.outputs, "set": table.set_name}
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
        _settle_table(deps, row, kb, table.written)
        completed_again(deps, row, task.attempt)
        return settled
    _settle_table(deps, settled_row, kb, table.written)
    if settled_row.parse_status == ParseStatus.COMPLETED:  # nothing planned: this write completed it
        knowledge_changed(deps, settled_row, EventType.KNOWLEDGE_COMPLETED)
    return answer(subtasks)


@dataclass(frozen=True)
class _Table:
    """What the table summary did: the span's outputs ({} for a document that is no data table), the set of
    chunks that holds the reply ("" when none does) and the chunk ids this copy wrote."""

    outputs: dict[str, Any] = field(default_factory=dict)
    set_name: str = ""
    written: tuple[str, ...] = ()


def _no_table(reason: str) -> _Table:
    # table_columns always: a span's outputs are merged, and a losing copy's count must not outlive its set
    return _Table({"table_summary": reason, "table_columns": 0})


def _table_summary(
    deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, effective: EffectiveProcessConfig
) -> _Table:
    """csv/xlsx/xls: the schema and 10 sample rows → `table_summary` and `table_column` chunks, indexed; or
    the whole set an earlier copy of this attempt wrote, indexed again (its reply is not asked for twice)."""
    if knowledge.file_type not in DATA_TABLE_EXTENSIONS:
        return _Table()
    if not effective.has_chat_model:
        return _no_table("skipped: no chat model configured")
    chunks = _table_written_before(deps, knowledge)
    if chunks is None:
        asked = _ask_for_table(deps, knowledge, kb, effective)
        if isinstance(asked, _Table):
            return asked
        chunks = asked
    if not write_extra_chunks(deps, knowledge, kb, chunks):
        raise Skip("the knowledge was deleted, cancelled or superseded")
    set_name = _set_of(knowledge, chunks[0].id)
    outputs = {"table_summary": "done", "table_columns": len(chunks) - 1}
    return _Table(outputs, set_name, tuple(c.id for c in chunks))


def _ask_for_table(
    deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, effective: EffectiveProcessConfig
) -> list[Chunk] | _Table:
    """The chunks of the chat model's table description, or why there are none."""
    from chalicelib.enrich.tables import lines_of, schema_of_lines, summarise

    parsed = files_of(deps, knowledge).url_for(
        parsed_markdown_key(knowledge.tenant_id, knowledge.id, knowledge.attempt)
    )
    # read as a stream, up to the table's end: a big sheet's Markdown, held whole, outgrew the task's memory
    schema = schema_of_lines(lines_of(deps.files.read_chunks(parsed)))
    chat = deps.chat_model(effective.chat_model_id)
    if schema is None or chat is None:
        return _no_table("skipped: no table found")
    try:
        summary = summarise(chat, knowledge.title, schema)
    except ModelRequestError as error:
        logger.warning(
            "table summary failed", extra={"knowledge_id": knowledge.id, "error": type(error).__name__}
        )
        return _no_table(f"failed: {error.code}")  # a stable code: the text may be the server's
    except (ModelThrottled, ModelUnavailable) as error:
        # optional and planned inside the state machine's task: deferring it past the task's timeout failed
        # the whole plan, and with it a document already indexed and searchable
        logger.warning(
            "table summary skipped: the chat model is busy or down",
            extra={"knowledge_id": knowledge.id, "error": type(error).__name__},
        )
        return _no_table("skipped: the chat model is throttled or unavailable")
    if summary is None:
        return _no_table("failed: the model's reply was not a table description")
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
    # named by the reply: another copy's reply (the model runs at temperature 0.3) is another set
    spelled = json.dumps([[kind.value, content] for kind, content in contents])
    set_name = hashlib.sha256(spelled.encode()).hexdigest()[:16]
    return [
        Chunk(
            id=f"{_table_prefix(knowledge)}-{set_name}-{n:03d}",
            tenant_id=knowledge.tenant_id,
            kb_id=kb.id,
            knowledge_id=knowledge.id,
            seq=TABLE_SEQ_BASE + n,
            content=content,
            chunk_type=kind,
            metadata={"attempt": knowledge.attempt, **({TABLE_SET_SIZE: len(contents)} if n == 0 else {})},
        )
        for n, (kind, content) in enumerate(contents)
    ]


def _table_prefix(knowledge: Knowledge) -> str:
    """Where the attempt's table chunks are: `<prefix>-<set>-<n>` (`<prefix><n>` before sets were named)."""
    return f"{attempt_chunk_prefix(knowledge.id, knowledge.attempt)}{TABLE_KIND}"


def _set_of(knowledge: Knowledge, chunk_id: str) -> str:
    """The set a table chunk of the attempt belongs to; "" for an id of an older shape."""
    parts = chunk_id.removeprefix(_table_prefix(knowledge)).split("-")
    return parts[1] if len(parts) == 3 and not parts[0] else ""


def _stored_table_chunks(deps: Dependencies, knowledge: Knowledge) -> list[Chunk]:
    """Every table chunk of the attempt, read by its id prefix (never the document's other chunks)."""
    return [c for page in attempt_chunk_pages(deps, knowledge, kind=TABLE_KIND) for c in page]


def _table_written_before(deps: Dependencies, knowledge: Knowledge) -> list[Chunk] | None:
    """A whole set an earlier copy of this attempt wrote (the first by name when several copies did), in
    order; None when there is none (a set a try wrote in part is not one)."""
    sets: dict[str, list[Chunk]] = {}
    for chunk in _stored_table_chunks(deps, knowledge):
        if name := _set_of(knowledge, chunk.id):
            sets.setdefault(name, []).append(chunk)
    for name in sorted(sets):
        chunks = sorted(sets[name], key=lambda c: c.seq)
        head = chunks[0]
        if head.chunk_type == ChunkType.TABLE_SUMMARY and head.metadata.get(TABLE_SET_SIZE) == len(chunks):
            return chunks
    return None


def _settle_table(
    deps: Dependencies, row: Knowledge | None, kb: KnowledgeBase | None = None, written: Sequence[str] = ()
) -> None:
    """The settled row's table stands alone: every other table chunk of the attempt goes, with its index
    entries (another copy's set; a set cut short; `written`, this copy's own, whose rows the copy that
    settled may have removed while this one was indexing them), and the span shows the standing table's
    figures if a losing copy wrote its own there. Nothing for a row settled without a table record."""
    record = row.enrichment.get(TABLE_RECORD) if row is not None else None
    if row is None or not isinstance(record, dict):
        return
    kb = kb or deps.kbs.get(row.kb_id)
    if kb is None:
        return
    keep = str(record.get("set") or "")
    stale = [c.id for c in _stored_table_chunks(deps, row)] + list(written)
    stale = [i for i in dict.fromkeys(stale) if not keep or _set_of(row, i) != keep]
    if stale:
        index = None
        if kb.indexing_strategy.needs_embedding:
            index = (
                deps.engine(kb.retrieval_engine),
                IndexSpace.of(deps.embedding_model(kb.embedding_model_id)),
            )
        take_back_chunks(deps, row, stale, index)
    outputs = {k: v for k, v in record.items() if k != "set"}
    span = deps.spans.get(row.id, row.attempt, Stage.POSTPROCESS.value)
    if (
        span is not None
        and span.status == SpanStatus.DONE
        and any(span.outputs.get(k) != v for k, v in outputs.items())
    ):
        deps.tracker.end_stage(row, Stage.POSTPROCESS, outputs)
