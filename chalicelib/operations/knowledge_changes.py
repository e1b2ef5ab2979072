"""Knowledge lifecycle: delete (one, a batch, a whole knowledge base), cancel, edit, publish, batch reparse,
retry of a knowledge base's failed rows, and the durable tasks that carry the long ones.

A request never loops over documents: it makes one conditional write per row it names (to `deleting`, so
the row disappears from use at once), records a task and queues it. The lifecycle worker
(`stages/lifecycle.py`) does the work item by item, resumable and idempotent, and GET /tasks/{id} shows it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any, NoReturn

from chalicelib.commands import BatchDeleteRequest, BatchReparseRequest, EditKnowledgeRequest, ReparseRequest
from chalicelib.domain.errors import (
    AppError,
    BadRequest,
    Conflict,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
)
from chalicelib.domain.events import EventType
from chalicelib.domain.ids import execution_name, file_md5
from chalicelib.domain.process_config import check_document_settings
from chalicelib.domain.status import CANCEL_FROM, REPARSE_FROM
from chalicelib.domain.storage_keys import source_object_key
from chalicelib.domain.types import (
    OPEN_TASK_STATUSES,
    EnableStatus,
    Knowledge,
    KnowledgeType,
    ParseStatus,
    SpanStatus,
    Task,
    TaskKind,
    TaskStatus,
    utcnow,
)
from chalicelib.observability import logger
from chalicelib.operations.create import sanitize_manual
from chalicelib.ports import (
    Dependencies,
    IndexWriteError,
    ServiceUnreachable,
    StorageQuotaExceeded,
)
from chalicelib.services.dispatch import enqueue_first_stage
from chalicelib.services.document_switch import INLINE_CHUNKS, EntrySwitch, entry_switch
from chalicelib.services.events import knowledge_changed
from chalicelib.services.fairness import leave_pipeline
from chalicelib.services.ownership import owned_knowledge, require_kb
from chalicelib.services.quotas import storage_left, storage_refusal
from chalicelib.services.stage_spans import ROOT
from chalicelib.services.storage import files_of
from chalicelib.services.stored_size import recount_quietly
from chalicelib.tasks import (
    deliver_again,
    drive_kb_delete,
    kb_delete_task,
    new_task,
    open_kb_delete_task,
    start_delete,
    start_deleting,
    start_task,
)
from chalicelib.tasks.reparse import reparse

CANCEL_MESSAGE = "cancelled by the user"


# ---------------------------------------------------------------- delete


def delete_knowledge(deps: Dependencies, tenant_id: str, knowledge_id: str) -> Task:
    """One document, one task for it: a DELETE repeated answers that task (tasks/delete.py)."""
    return start_delete(deps, owned_knowledge(deps, tenant_id, knowledge_id))


def batch_delete(deps: Dependencies, tenant_id: str, request: BatchDeleteRequest) -> Task:
    require_kb(deps, tenant_id, request.kb_id)
    rows = _rows_of_kb(deps, tenant_id, request.kb_id, request.ids)
    return _delete(deps, tenant_id, request.kb_id, rows)


def _rows_of_kb(deps: Dependencies, tenant_id: str, kb_id: str, ids: list[str]) -> list[Knowledge]:
    """Every id must name a row of this tenant in this knowledge base (WeKnora's rule): all or nothing."""
    rows = []
    for knowledge_id in dict.fromkeys(ids):
        row = deps.knowledge.get(knowledge_id)
        if row is None or row.tenant_id != tenant_id or row.kb_id != kb_id:
            raise NotFound(
                f"knowledge {knowledge_id} not found in knowledge base {kb_id}", code="knowledge_not_found"
            )
        rows.append(row)
    return rows


def _delete(deps: Dependencies, tenant_id: str, kb_id: str, rows: list[Knowledge]) -> Task:
    task = new_task(tenant_id, TaskKind.DELETE_KNOWLEDGE, kb_id, [row.id for row in rows])
    deps.tasks.put(task)
    return start_deleting(deps, task, rows)


def delete_kb(deps: Dependencies, tenant_id: str, kb_id: str) -> Task:
    """Writes the delete task, marks the knowledge base deleting with a write conditional on its version (a
    blind write let an update that had read it before write it back active while its delete task ran), then
    sends the task. The task comes first, so a knowledge base never sits `deleting` without one: a request
    that dies after it is finished by housekeeping's re-send of the open task (whose work marks the knowledge
    base itself), and one already `deleting` has its task sent again (a send lost). A refused DELETE (409)
    that closed the same task meanwhile is seen after the mark: the next task is sent instead."""
    for _ in range(5):
        kb = require_kb(deps, tenant_id, kb_id, deleting_too=True)
        if kb.status == "deleting":
            return drive_kb_delete(deps, kb)
        task = kb_delete_task(deps, kb)
        marked = deps.kbs.update(replace(kb, status="deleting"))
        if marked is not None:
            # written, then read: of this and a refused DELETE's close, one sees the other's write
            current = deps.tasks.get(task.id)
            if current is None or current.status not in OPEN_TASK_STATUSES:
                return drive_kb_delete(deps, marked)
            deliver_again(deps, task.id)
            return current
    _close_unmarked_kb_delete(deps, kb_id)
    raise Conflict("the knowledge base kept changing; try again", code="kb_changed")


def _close_unmarked_kb_delete(deps: Dependencies, kb_id: str) -> None:
    """A DELETE refused (409) leaves no open task that housekeeping would re-send and so carry out, unless
    another DELETE marked the knowledge base meanwhile (its task, the same, goes on). Closed first, then the
    knowledge base read again: one marked since by another DELETE (which answered this very task) has its
    next task sent, as that DELETE does when it reads the task closed after its mark."""
    kb = deps.kbs.get(kb_id, consistent=True)
    task = open_kb_delete_task(deps, kb_id)
    if kb is None or kb.status == "deleting" or task is None or task.status != TaskStatus.QUEUED:
        return
    task.status = TaskStatus.FAILED
    task.errors[kb_id] = "the knowledge base kept changing; the delete was refused"
    task.updated_at = utcnow()
    if not deps.tasks.save_progress(task, only_from=frozenset({TaskStatus.QUEUED})):
        return  # a worker began it meanwhile: its work marks the knowledge base and carries the delete out
    after = deps.kbs.get(kb_id, consistent=True)
    if after is not None and after.status == "deleting":
        drive_kb_delete(deps, after)


# ---------------------------------------------------------------- cancel


def cancel(deps: Dependencies, tenant_id: str, knowledge_id: str) -> Knowledge:
    """pending|processing|finalizing → cancelled: the execution stops, queued work drops itself when it
    arrives, open spans close as cancelled, and what was written stays (spec §1.23)."""
    knowledge = owned_knowledge(deps, tenant_id, knowledge_id)
    if knowledge.parse_status == ParseStatus.CANCELLED:  # idempotent
        # a cancel interrupted after its write (its root span, closed last, still open) is finished
        root = deps.spans.get(knowledge.id, knowledge.attempt, ROOT)
        done = root is not None and root.status == SpanStatus.CANCELLED
        return knowledge if done else _after_cancel(deps, knowledge)
    if knowledge.parse_status not in CANCEL_FROM:
        raise BadRequest(
            f"a knowledge that is {knowledge.parse_status.value} cannot be cancelled", code="invalid_state"
        )
    cancelled = deps.knowledge.cancel(knowledge.id, CANCEL_MESSAGE)
    if cancelled is None:  # it moved on meanwhile (completed, failed, deleted)
        current = owned_knowledge(deps, tenant_id, knowledge_id)
        if current.parse_status == ParseStatus.CANCELLED:
            return current
        raise BadRequest(
            f"a knowledge that is {current.parse_status.value} cannot be cancelled", code="invalid_state"
        )
    return _after_cancel(deps, cancelled)


def _after_cancel(deps: Dependencies, cancelled: Knowledge) -> Knowledge:
    """What follows the row's write, each step safe to repeat (the event under the same id): a cancel
    repeated before the last step, the root span's close, comes here again."""
    try:
        deps.workflow.stop(execution_name(cancelled.id, cancelled.attempt), CANCEL_MESSAGE)
    except ServiceUnreachable:  # its tasks drop themselves on a cancelled row; a retry stops it again
        logger.warning(
            "the cancelled knowledge's execution was not stopped", extra={"knowledge_id": cancelled.id}
        )
    leave_pipeline(deps, cancelled.tenant_id, cancelled.id)
    knowledge_changed(deps, cancelled, EventType.KNOWLEDGE_CANCELLED, status=ParseStatus.CANCELLED.value)
    # what the cancelled attempt stored stays (above) and, never to be indexed, counts from now on
    recount = recount_quietly(deps, cancelled.id, attempt=cancelled.attempt, status=ParseStatus.CANCELLED)
    deps.tracker.close_root(
        cancelled.id, cancelled.attempt, SpanStatus.CANCELLED, "CANCELLED", CANCEL_MESSAGE
    )
    return cancelled if recount is None else replace(cancelled, storage_size=recount.after)


# ---------------------------------------------------------------- edit and publish


def edit(deps: Dependencies, tenant_id: str, knowledge_id: str, request: EditKnowledgeRequest) -> Knowledge:
    """Every check comes before any write, so a refused edit changes nothing. New text is written under a
    new key, then the row is switched to it on condition that it still names the text this edit read; only
    then does the old text go. An edit that lost that race (another edit's text, or a delete, came first)
    removes its own object and answers 409 `knowledge_changed` (404 when the row is being deleted)."""
    knowledge = owned_knowledge(deps, tenant_id, knowledge_id)
    if knowledge.parse_status == ParseStatus.DELETING:
        raise BadRequest("the knowledge is being deleted", code="invalid_state")
    fields = request.model_dump(exclude_none=True, exclude={"enable_status", "content", "tag_ids"})
    if request.description is not None:  # a person's description outlives summary refreshes; "" hands it back
        fields["description_by_user"] = bool(request.description.strip())
    from chalicelib.services.tagging import check_tag_ids, set_tags

    tag_ids = None if request.tag_ids is None else check_tag_ids(deps, knowledge.kb_id, request.tag_ids)
    text = None if request.content is None else _checked_manual_text(deps, knowledge, request.content)
    switch = None
    switch_task = None  # a big document's entries follow its row in a task (services/document_switch.py)
    if request.enable_status is not None and request.enable_status != knowledge.enable_status.value:
        entries = _searchable_switch(deps, knowledge)  # or 400 not_indexed
        fields["enable_status"] = request.enable_status
        if entries is not None and knowledge.chunk_count > INLINE_CHUNKS:
            switch_task = new_task(tenant_id, TaskKind.SWITCH_KNOWLEDGE, knowledge.kb_id, [knowledge.id])
        elif entries is not None:
            switch = _flipper(deps, knowledge, entries)
    growth = 0 if text is None else _stored_growth(knowledge, len(text))
    left = storage_left(deps, tenant_id) if growth > 0 else None
    if left is not None and growth > left:  # checked again in the row's write, which counts it
        raise storage_refusal(deps, tenant_id, growth, "the edited text")
    # ---- every check is behind us: from here on the edit writes
    enabled = request.enable_status == EnableStatus.ENABLED.value
    if switch is not None:  # first: a failure here leaves the row as it was, and a retry flips again
        switch(enabled)
    if switch_task is not None:  # recorded before the row, sent after it (below): its walk then begins
        # after the row's write and follows what the row says; should the send fail, housekeeping sends it
        deps.tasks.put(switch_task)
    expect: dict[str, Any] | None = None
    size: int | None = None
    if text is not None:  # the row takes the new text and its count (the tenant's usage moved by the
        # difference in the same write) only while it names what was read
        expect = {
            "file_path": knowledge.file_path,
            "file_hash": knowledge.file_hash,
            "file_size": knowledge.file_size,
            "storage_size": knowledge.storage_size,
        }
        fields.update(_save_manual_text(deps, knowledge, text))
        size = knowledge.storage_size + growth
    try:
        updated = (
            deps.knowledge.update_fields(knowledge.id, fields, expect=expect, storage_size=size)
            if fields
            else knowledge
        )
    except StorageQuotaExceeded:  # another write took the room meanwhile: nothing was written
        _undo_edit(
            deps, knowledge, fields, switch, storage_refusal(deps, tenant_id, growth, "the edited text")
        )
    finally:  # whether or not the row took the switch: the walk sets the entries as the row says
        if switch_task is not None:
            _send_switch(deps, switch_task)
    if updated is None:
        _undo_edit(deps, knowledge, fields, switch)
    if text is not None and knowledge.file_path and knowledge.file_path != fields["file_path"]:
        deps.files.delete(knowledge.file_path)  # the row names the new text now: the old one is no one's
    if tag_ids is not None:
        updated = set_tags(deps, updated, tag_ids)
    if request.content is not None and knowledge.parse_status != ParseStatus.DRAFT:
        reparsed = reparse(
            deps, tenant_id, knowledge.id, ReparseRequest()
        )  # a published text is ingested again
        if request.description is None:
            return reparsed
        # a new attempt clears the description; the one written in this same request stays
        kept = {k: fields[k] for k in ("description", "description_by_user")}
        return deps.knowledge.update_fields(knowledge.id, kept) or reparsed
    if (
        request.title is not None or request.metadata is not None
    ) and updated.parse_status == ParseStatus.COMPLETED:
        from chalicelib.services.dispatch import refresh_refusal_answered, request_summary_refresh

        with refresh_refusal_answered("the edit is saved"):
            request_summary_refresh(deps, updated)  # the summary is made from the title and metadata too
    return updated


def _undo_edit(
    deps: Dependencies,
    knowledge: Knowledge,
    fields: dict[str, Any],
    switch: Callable[[bool], None] | None,
    refusal: AppError | None = None,
) -> NoReturn:
    """The row did not take the edit: its own new text goes (nothing names it), and why is answered (a
    row changed meanwhile, unless `refusal` says why)."""
    if "file_path" in fields and fields["file_path"] != knowledge.file_path:
        deps.files.delete(fields["file_path"])
    current = deps.knowledge.get(knowledge.id)
    if current is None or current.parse_status == ParseStatus.DELETING:
        raise NotFound(f"knowledge {knowledge.id} not found", code="knowledge_not_found")
    if switch is not None:  # the index entries go back to what the row says
        switch(current.enable_status == EnableStatus.ENABLED)
    if refusal is not None:
        raise refusal
    raise Conflict(
        f"knowledge {knowledge.id} was changed by another request meanwhile; read it and try again",
        code="knowledge_changed",
    )


def _checked_manual_text(deps: Dependencies, knowledge: Knowledge, raw: str) -> bytes:
    if knowledge.type != KnowledgeType.MANUAL:
        raise BadRequest("only hand-written (manual) knowledge has editable text", code="not_manual")
    content = sanitize_manual(raw)
    if not content:
        raise BadRequest("content must not be empty", code="empty_content")
    if len(content) > deps.settings.manual_max_runes:
        raise PayloadTooLarge(
            f"content is over {deps.settings.manual_max_runes} characters", code="content_too_long"
        )
    return content.encode()


def _stored_growth(knowledge: Knowledge, new_size: int) -> int:
    """How much the row's counted bytes (`storage_size`) change when its text becomes `new_size` bytes: the
    text's own change; what the row counts beyond its text (its parse's outputs, chunk edits' growth) stays
    counted until a reparse's indexing counts the row again, as those stay stored until then. A row counted
    below its text (or not at all) is counted for the whole text."""
    beyond_text = max(0, knowledge.storage_size - knowledge.file_size)
    return new_size + beyond_text - knowledge.storage_size


def _save_manual_text(deps: Dependencies, knowledge: Knowledge, data: bytes) -> dict[str, Any]:
    """The new text under a new key (the old one stays until the row no longer names it)."""
    url = files_of(deps, knowledge).save(
        source_object_key(knowledge.tenant_id, knowledge.id, "md"), data, "text/markdown"
    )
    return {"file_path": url, "file_size": len(data), "file_hash": file_md5(data)}


def _send_switch(deps: Dependencies, task: Task) -> None:
    try:
        deliver_again(deps, task.id)
    except ServiceUnreachable:  # the row's change stands (search follows the row); the task is recorded
        # queued, and housekeeping sends an open task that saved nothing again
        logger.warning("a switch task's message was not sent", extra={"task_id": task.id})


def _searchable_switch(deps: Dependencies, knowledge: Knowledge) -> EntrySwitch | None:
    """Checks that the document can be enabled or disabled, and returns what flips its index entries; None
    when there are none to flip."""
    if knowledge.parse_status not in (ParseStatus.COMPLETED, ParseStatus.FINALIZING):
        raise BadRequest(
            "only an indexed knowledge (finalizing or completed) can be enabled or disabled",
            code="not_indexed",
        )
    return entry_switch(deps, require_kb(deps, knowledge.tenant_id, knowledge.kb_id))


def _flipper(deps: Dependencies, knowledge: Knowledge, entries: EntrySwitch) -> Callable[[bool], None]:
    """The request's own flip of a small document's entries (services/document_switch.py)."""

    def switch(enabled: bool) -> None:
        try:
            entries.flip(deps, knowledge.id, enabled)
        except IndexWriteError as error:
            # the chunk edit's answer (operations/chunks.py), the engine's words left out
            raise ServiceUnavailable(
                "the search index refused the change; the knowledge was not changed", code="index_refused"
            ) from error

    return switch


def publish(deps: Dependencies, tenant_id: str, knowledge_id: str) -> Knowledge:
    knowledge = owned_knowledge(deps, tenant_id, knowledge_id)
    if knowledge.parse_status != ParseStatus.DRAFT:
        raise BadRequest("only a draft can be published", code="invalid_state")
    published = deps.knowledge.publish(knowledge.id)
    if published is None:
        raise BadRequest("the draft changed state; try again", code="invalid_state")
    return enqueue_first_stage(deps, published)


# ---------------------------------------------------------------- batch reparse and retry


def batch_reparse(deps: Dependencies, tenant_id: str, request: BatchReparseRequest) -> Task:
    kb = require_kb(deps, tenant_id, request.kb_id)
    rows = _rows_of_kb(deps, tenant_id, request.kb_id, request.ids)
    refused = [row.id for row in rows if row.parse_status not in REPARSE_FROM]
    if refused:  # as a single reparse would answer, up front, not a task that ends partial
        raise BadRequest(
            f"{len(refused)} of these cannot be reparsed (drafts, or being deleted)",
            code="invalid_state",
            data={"ids": refused},
        )
    overrides = request.process_config.model_dump(exclude_none=True) if request.process_config else None
    if overrides is not None:  # up front, as each document's reparse checks them again
        for file_type in sorted({row.file_type for row in rows}):
            check_document_settings(deps, kb, overrides, file_type)
    task = new_task(
        tenant_id, TaskKind.REPARSE, request.kb_id, [r.id for r in rows], process_config=overrides
    )
    return start_task(deps, task)


def retry_failed(deps: Dependencies, tenant_id: str, kb_id: str) -> Task:
    """Every failed row of the knowledge base, however many (the worker pages through them)."""
    kb = require_kb(deps, tenant_id, kb_id)
    return start_task(deps, new_task(tenant_id, TaskKind.RETRY_FAILED, kb.id, []))
