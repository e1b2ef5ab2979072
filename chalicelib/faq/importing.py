"""FAQ bulk import: the request (lease, task, queue) and the queued worker that carries it out.

Request: entries inline (at most 200 and 50 KB) or an object uploaded through a presigned URL; the source
is stored as an object (payloads between steps are pointers), a task is recorded, and one message goes to
the `faq-import` queue (with a DLQ). A real import first takes the knowledge base's lease (one
conditional write, owner = the task id, expiring after LEASE_SECONDS); a second import while it is held
gets a 409 carrying the running task's id. A dry run validates and reports the plan (what a replace
would delete, the failed rows' CSV as an import writes it), and takes no lease.

Worker, per delivery:
1. the plan: made once (validation.py) from the source and the knowledge base as it is, stored as an
   object; a later delivery reads it back (so a resumed `replace` goes on as append: nothing is
   re-validated or re-diffed against entries the import itself wrote);
2. a replace's deletions (index entries first, then rows), once, but an entry a new row replaces goes
   only after that row is written (replacing.py); a replace with no valid row deletes nothing and fails;
3. the rows in batches of 50 from the saved offset: rows of the batch written before but not indexed (a
   crash between the two writes) are purged first, then each row's questions are reserved as the entries
   API reserves them (import_claims.py: a question taken since the plan is settled by the plan's rules,
   and the plan stored again; a merge into an entry edited through the API since the plan is merged again
   into it as it is, and written only if it is still as read), each new row's bytes counted within the
   quota (one conditional add: the room the plan saw may have gone to another writer since; a row that no
   longer fits fails, `quota`) and the row written `indexed=False`, its new questions embedded and
   indexed, the row marked indexed and its reservations confirmed; new entries have ids derived from the
   task and the row, so a redelivered batch rewrites the same entries and index entries, never new ones,
   and holds their reservations again; a replace's deletions give theirs back;
4. progress (counters, offset) saved after each batch, only forward;
5. at the end: tags (a replace drops tags no entry uses), the failed rows as a UTF-8 CSV with a BOM (its
   link is a download grant minted when a client asks: failed_rows.py), the knowledge base's last import
   result, the task saved finished; only then the source and plan objects deleted and the lease released
   by its owner (a delivery that finds the task finished does just that again), so a failed final save is
   redone from the plan.

An upload is bounded (rows.py: MAX_FILE_BYTES by its form, which S3 enforces, at the start and by its length
when read, a bigger one deleted; rows and text as read), and so is their number (uploads.py: a tenant's
pending grants, 429 past the cap; an import, a failed one too, deletes its upload, a dry run keeps it for
the import unless it could not read it); a queue silent at the start: 503, the task failed.

Over 600 lines, unsplit: every way an import ends (done, refused, its last try, a lost lease, housekeeping's
give-up) goes through the one `_finish`/`_settle` pair and lease here, which a split would spread apart.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from functools import partial
from typing import Any

from chalicelib.domain import metering
from chalicelib.domain.errors import (
    BadRequest,
    Conflict,
    NotFound,
    PayloadTooLarge,
    ServiceUnavailable,
    StageError,
)
from chalicelib.domain.faq import FaqEntry
from chalicelib.domain.types import OPEN_TASK_STATUSES, KnowledgeBase, Task, TaskKind, TaskStatus
from chalicelib.faq import replacing, uploads
from chalicelib.faq.commands import (
    INLINE_MAX_BYTES,
    INLINE_MAX_ENTRIES,
    FaqImportRequest,
)
from chalicelib.faq.entries import FaqIndex, all_entries, give_back_storage, require_faq_kb
from chalicelib.faq.failed_rows import failed_rows_link
from chalicelib.faq.import_claims import (
    NewBytes,
    Write,
    changed_since_plan,
    confirm_written,
    counting,
    hold_questions,
    merge_again,
    save_indexed,
    save_merge,
)
from chalicelib.faq.keyed import pages, tag_links
from chalicelib.faq.reservations import release_entries
from chalicelib.faq.row_report import record_failed_rows
from chalicelib.faq.rows import FILE_TOO_LARGE, MAX_FILE_BYTES, SourceError, SourceTooLarge, read_source
from chalicelib.faq.validation import (
    NO_VALID_ROW,
    Plan,
    PlannedRow,
    counts,
    plan_append,
    plan_replace,
    replace_refusal,
)
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, ObjectTooLarge, ServiceUnreachable
from chalicelib.services.events import task_finished
from chalicelib.services.quotas import storage_left
from chalicelib.services.usable import require_usable_for_api, require_usable_for_stage
from chalicelib.tasks import new_task

QUEUE = "faq-import"
BATCH = 50
#: WeKnora's guard lives 3 h; the worker renews the lease after every batch
LEASE_SECONDS = 3 * 3600
#: one delivery works this long, then queues itself again for the rest (behind other work)
SLICE_SECONDS = 60.0
#: what the knowledge base's last result keeps of the task's progress
_COUNTS = ("total", "success", "failed", "partial", "skipped", "merged", "added", "deleted")
RESULT_KEYS = (*_COUNTS, "kept_for_failed_rows", "sheets_skipped", "error", "error_code")


def import_prefix(tenant_id: str, kb_id: str) -> str:
    """Where an FAQ import keeps its inline source, plan and failed rows (the bucket expires `faq-imports/`;
    uploads are under the tenant's own prefix: uploads.py)."""
    return f"faq-imports/{tenant_id}/{kb_id}/"


# ---------------------------------------------------------------- the request


def start_import(deps: Dependencies, tenant_id: str, kb_id: str, request: FaqImportRequest) -> Task:
    kb = require_faq_kb(deps, tenant_id, kb_id)
    require_usable_for_api(deps, kb)  # a withdrawn model or engine: 409 now, not a failure after every try
    task = new_task(tenant_id, TaskKind.FAQ_IMPORT, kb.id, [], mode=request.mode, dry_run=request.dry_run)
    if request.entries is not None:
        data = json.dumps(request.entries, ensure_ascii=False).encode("utf-8")
        if len(request.entries) > INLINE_MAX_ENTRIES or len(data) > INLINE_MAX_BYTES:
            raise PayloadTooLarge(
                f"inline imports hold at most {INLINE_MAX_ENTRIES} entries and {INLINE_MAX_BYTES // 1024} KB; "
                "upload the file through faq/import/upload-url",
                code="use_presigned_upload",
            )
        source = deps.inbox.save(f"{import_prefix(tenant_id, kb.id)}{task.id}.json", data, "application/json")
        file_name = "entries.json"
    else:
        key = request.object_key or ""
        if not uploads.is_upload_of(key, kb.tenant_id, kb.id):
            raise BadRequest("object_key is not an upload of this knowledge base", code="invalid_object_key")
        source = deps.inbox.url_for(key)
        try:
            size = deps.inbox.size(source)
        except FileNotFoundError as error:
            raise NotFound("nothing was uploaded under object_key", code="upload_not_found") from error
        if size > MAX_FILE_BYTES:  # (a store that does not enforce the form's bound): never importable
            deps.inbox.delete(source)
            raise PayloadTooLarge(str(SourceTooLarge()), code=FILE_TOO_LARGE)
        file_name = key.rsplit("/", 1)[-1]
    task.params.update(source=source, file_name=file_name)
    task.progress = {"status": "queued", "mode": request.mode, "dry_run": request.dry_run}
    if not request.dry_run:
        held = deps.faq.acquire_lease(kb.id, task.id, time.time(), LEASE_SECONDS)
        if held is not None:
            if request.entries is not None:
                deps.inbox.delete(source)
            raise Conflict(
                f"an import into knowledge base {kb.id} is running (task {held.owner})",
                code="faq_import_running",
                data={"task_id": held.owner},
            )
    try:
        deps.tasks.put(task)
    except Exception:  # cleanup, then raised: nothing was accepted
        _abandon(deps, task, inline=request.entries is not None)
        raise
    try:
        deps.queue.send_raw(QUEUE, {"task_id": task.id})
    except Exception as error:  # the task must not stay `queued` with nothing to run it
        task.status = TaskStatus.FAILED
        task.progress.update(status="failed", error="the import could not be queued")
        task.errors["import"] = "the import could not be queued"
        _abandon(deps, task, inline=request.entries is not None)
        _save(deps, task)
        if isinstance(error, ServiceUnreachable):  # SQS did not answer: the same request may work soon
            raise ServiceUnavailable(
                "the import queue is not answering; try again", code="queue_unavailable"
            ) from error
        raise
    return task


def _abandon(deps: Dependencies, task: Task, *, inline: bool) -> None:
    """A start that failed: the knowledge base is free again, and an inline source goes (an uploaded file
    stays, for the retry)."""
    if not task.params.get("dry_run"):
        deps.faq.release_lease(task.kb_id, task.id)
    if inline:
        deps.inbox.delete(str(task.params["source"]))


def last_result(deps: Dependencies, tenant_id: str, kb_id: str, base_url: str) -> dict[str, Any]:
    kb = require_faq_kb(deps, tenant_id, kb_id)
    result = deps.faq.get_last_import(kb.id)
    if result is None:
        raise NotFound("no import has finished in this knowledge base", code="faq_import_not_found")
    stored = str(result.pop("failed_rows_url", ""))
    result.pop("failed_rows_download", None)  # a results record from before grants held a presigned URL
    link = failed_rows_link(deps, kb.tenant_id, kb.id, str(result["task_id"]), stored, base_url)
    if link is not None:
        result["failed_rows_download"] = link["url"]
        result["failed_rows_expires_at"] = link["expires_at"]
    return result


# ---------------------------------------------------------------- the worker


GIVEN_UP = "the import made no progress through repeated re-sends; it was given up"


class LeaseLost(Exception):
    """Another import holds the knowledge base (this one's lease expired and was taken)."""


def _finished(task: Task) -> bool:
    return task.status not in OPEN_TASK_STATUSES


def run(deps: Dependencies, task_id: str, *, last_try: bool = False, give_up: bool = False) -> None:
    task = deps.tasks.get(task_id)
    if task is None or task.kind != TaskKind.FAQ_IMPORT:
        return
    metering.attribute(task.kb_id, task.tenant_id)  # the worker meters the import as its knowledge base's
    if _finished(task):  # by an earlier delivery, which may have stopped before tidying up after itself
        _settle(deps, task)
        return
    kb = deps.kbs.get(task.kb_id)
    if kb is None or kb.status == "deleting":
        _finish(deps, task, None, TaskStatus.FAILED, error="the knowledge base no longer exists")
        return
    if give_up:  # housekeeping's send once its re-sends made no progress: failed as on its last try
        _give_up(deps, task, kb)
        return
    dry_run = bool(task.params.get("dry_run"))
    try:  # planning too: a store that does not answer on the last try must not keep the lease for hours
        require_usable_for_stage(deps, kb)  # withdrawn since the start: failed at once, with the reason
        if not dry_run:
            _renew(deps, task)
        plan = _plan(deps, task, kb)
        refusal = replace_refusal(plan)  # a dry run reports what the import would do: the same refusal
        if dry_run:
            _report_dry_run(deps, task, kb, plan, refusal)
            return
        if refusal:
            _tally(task, plan)
            _finish(deps, task, kb, TaskStatus.FAILED, plan=plan, error=refusal, error_code=NO_VALID_ROW)
            return
        _execute(deps, task, kb, plan)
    except SourceError as error:
        task.params["source_unreadable"] = True  # a dry run's upload goes too: no import can read it
        _finish(deps, task, kb, TaskStatus.FAILED, error=str(error), error_code=error.code)
    except LeaseLost as error:
        _fail_without_lease(deps, task, str(error))
    except StageError as error:
        if error.permanent or last_try:
            _fail_for_good(deps, task, kb, error.message)
            return
        raise  # transient or throttled: the message comes back (stages/faq_import.py)
    except Exception:
        if last_try:  # the message goes to the DLQ: the task says so, and the knowledge base is free again
            logger.exception("FAQ import failed for good", extra={"task_id": task.id})
            _fail_for_good(deps, task, kb, "the import failed after its last try")
            return
        raise


def _fail_for_good(deps: Dependencies, task: Task, kb: KnowledgeBase, error: str) -> None:
    """A failure no retry will cure. One that came after the import's end was decided (saving it, its event,
    the purge that follows) leaves that end as it was, saved again: the rows were imported."""
    if not _finished(task):
        _finish(deps, task, kb, TaskStatus.FAILED, error=error)
        return
    if _save(deps, task):
        task_finished(deps, task)
    _settle(deps, task)


def _give_up(deps: Dependencies, task: Task, kb: KnowledgeBase) -> None:
    """Failed for good, unless another import took the lease meanwhile: then as a lost lease (touching nothing)."""
    if not task.params.get("dry_run"):
        try:
            _renew(deps, task)
        except LeaseLost:
            _fail_without_lease(deps, task, GIVEN_UP)
            return
    _fail_for_good(deps, task, kb, GIVEN_UP)


def _renew(deps: Dependencies, task: Task) -> None:
    held = deps.faq.acquire_lease(task.kb_id, task.id, time.time(), LEASE_SECONDS)
    if held is not None:
        raise LeaseLost(f"the knowledge base's import lease is held by task {held.owner}")


def _save(deps: Dependencies, task: Task) -> bool:
    task.updated_at = datetime.now(UTC)
    return deps.tasks.save_progress(task)


def _plan(deps: Dependencies, task: Task, kb: KnowledgeBase) -> Plan:
    plan_url = str(task.params.get("plan_url", ""))
    if plan_url and deps.inbox.exists(plan_url):
        if task.done > 0 or task.params.get("deleted_done"):
            task.progress["resumed"] = True
            task.progress["effective_mode"] = "append"  # the plan is not diffed again
        return Plan.from_json(json.loads(deps.inbox.read(plan_url)))
    source = str(task.params["source"])
    try:  # bounded: an object replaced since the start is refused by its length, before its bytes are read
        data = deps.inbox.read(source, limit=MAX_FILE_BYTES)
    except FileNotFoundError as error:
        raise SourceError("the import's source object is gone") from error
    except ObjectTooLarge as error:
        deps.inbox.delete(source)  # a dry run keeps its upload for the import; this one can never be
        raise SourceTooLarge() from error
    read = read_source(data, str(task.params.get("file_name", "entries.json")))
    rows = read.rows
    if read.skipped_sheets:  # saved with the plan's progress (or the dry run's report)
        task.progress.update(sheets_skipped=len(read.skipped_sheets), skipped_sheet_names=read.skipped_sheets)
    existing = list(all_entries(deps, kb.id))
    if not task.params.get("dry_run"):  # an earlier import's leftovers, if its own end could not purge them
        existing = _purge_unindexed(deps, kb, existing, running=task.id)

    def new_id(row: int) -> str:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"faq-import:{task.id}:{row}"))

    planner = plan_replace if task.params.get("mode") == "replace" else plan_append
    plan = planner(rows, existing, new_id, storage_left(deps, kb.tenant_id))
    if task.params.get("dry_run"):
        return plan
    task.status = TaskStatus.RUNNING
    task.params["plan_url"] = _store_plan(deps, task, plan)
    task.progress.update(
        status="running",
        total=len(plan.rows),
        to_delete=len(plan.delete),
        kept_for_failed_rows=len(plan.kept),
        processed=0,
    )
    task.progress.update(counts([]))
    _save(deps, task)
    return plan


def _store_plan(deps: Dependencies, task: Task, plan: Plan) -> str:
    """Saved once planned, and again when a batch changed rows of it (import_claims.py)."""
    return deps.inbox.save(
        f"{import_prefix(task.tenant_id, task.kb_id)}{task.id}.plan.json",
        json.dumps(plan.to_json(), ensure_ascii=False).encode("utf-8"),
        "application/json",
    )


def _tally(task: Task, plan: Plan) -> None:
    """Every row of the plan counted (a dry run, or a replace refused before it wrote anything)."""
    tally = counts(plan.rows)
    task.done = len(plan.rows)
    task.succeeded, task.failed = tally["success"], tally["failed"]
    task.progress.update(total=len(plan.rows), processed=len(plan.rows), **tally)


def _report_dry_run(deps: Dependencies, task: Task, kb: KnowledgeBase, plan: Plan, refusal: str) -> None:
    """The plan as the import would carry it out: counts, what a replace would delete (none when it would
    be refused, with the same error) and keep, and the failed rows (their CSV written as an import's).
    Saved first; the inline source goes after (_settle), so a failed save is simply redone."""
    _tally(task, plan)
    task.progress.update(deleted=len(plan.delete), kept_for_failed_rows=len(plan.kept))
    record_failed_rows(deps, task, import_prefix(task.tenant_id, kb.id), plan.rows)
    task.status = TaskStatus.FAILED if refusal else TaskStatus.COMPLETED
    if refusal:
        task.progress.update(error=refusal, error_code=NO_VALID_ROW)
        task.errors["import"] = refusal
    task.progress["status"] = task.status.value
    if _save(deps, task):
        task_finished(deps, task)
    _settle(deps, task)


def _execute(deps: Dependencies, task: Task, kb: KnowledgeBase, plan: Plan) -> None:
    index = FaqIndex(deps, kb)
    if plan.delete and not task.params.get("deleted_done"):
        replacing.delete_unreplaced(deps, kb, index, plan, BATCH)
        task.params["deleted_done"] = True
        task.progress["deleted"] = replacing.deleted(plan, task.done)
        if not _save(deps, task):
            return
    deadline = time.monotonic() + SLICE_SECONDS
    while task.done < len(plan.rows):
        batch = plan.rows[task.done : task.done + BATCH]
        changed = _run_batch(deps, task, kb, index, plan, batch)
        if replacing.settle(deps, kb, index, plan, batch, batch_done=True)[1] or changed:
            _store_plan(deps, task, plan)  # before the progress: a redelivered batch works from it
        task.done += len(batch)
        tally = counts(plan.rows[: task.done])
        task.succeeded, task.failed = tally["success"], tally["failed"]
        task.progress.update(
            processed=task.done,
            deleted=replacing.deleted(plan, task.done),
            kept_for_failed_rows=len(plan.kept),
            texts_embedded=int(task.progress.get("texts_embedded", 0)) + index.texts_embedded,
            **tally,
        )
        index.texts_embedded = 0
        if not _save(deps, task):
            return  # another delivery of this task is further along: it carries on
        _renew(deps, task)
        if task.done < len(plan.rows) and time.monotonic() >= deadline:
            deps.queue.send_raw(QUEUE, {"task_id": task.id})  # the rest, behind other work
            return
    status = (
        TaskStatus.COMPLETED
        if task.failed == 0
        else TaskStatus.FAILED
        if task.succeeded == 0
        else TaskStatus.PARTIAL
    )
    _finish(deps, task, kb, status, plan=plan)


def _entry(task: Task, kb: KnowledgeBase, row: PlannedRow, base: FaqEntry | None) -> FaqEntry:
    content = row.content
    entry = FaqEntry(
        id=row.entry_id,
        kb_id=kb.id,
        tenant_id=kb.tenant_id,
        standard_question=content["standard_question"],
        answers=list(content["answers"]),
        similar_questions=list(content["similar_questions"]),
        negative_questions=list(content["negative_questions"]),
        tags=list(content["tags"]),
        answer_all=bool(content["answer_all"]),
        is_enabled=bool(content["is_enabled"]),
        content_hash=content["content_hash"],
        indexed=False,
        import_task=task.id if base is None else base.import_task,
    )
    if base is not None:
        entry.created_at = base.created_at
    return entry


def _run_batch(
    deps: Dependencies,
    task: Task,
    kb: KnowledgeBase,
    index: FaqIndex,
    plan: Plan,
    batch: Sequence[PlannedRow],
) -> bool:
    """Writes the batch's entries once their questions are reserved (import_claims.py; those of the entries
    the rows replace are taken over: replacing.Takeover); True when that changed rows of the plan."""
    mode, takeover = plan.mode, replacing.Takeover(deps, kb, plan)
    adds = [r for r in batch if r.action == "add"]
    merges = [r for r in batch if r.action == "merge"]
    current = deps.faq.get_entries(kb.id, [r.entry_id for r in [*adds, *merges]])
    # Written by an earlier delivery but never indexed (it died between the two writes): purge and redo.
    stale = [r.entry_id for r in adds if r.entry_id in current and not current[r.entry_id].indexed]
    if stale:  # (the counts their old entries moved onto them go back onto those first)
        replacing.count_again(deps, kb, [r.replaces for r in adds if r.entry_id in stale and r.replaces])
        index.remove_entries(stale)
        give_back_storage(deps, kb.tenant_id, deps.faq.delete_entries(kb.id, stale))
        task.progress["purged"] = int(task.progress.get("purged", 0)) + len(stale)
    todo_adds = [r for r in adds if r.entry_id not in current or r.entry_id in stale]
    done = [current[r.entry_id] for r in adds if r.entry_id in current and r.entry_id not in stale]
    confirm_written(deps, kb.id, done, takeover.ids)  # written and indexed by an earlier delivery
    writes = [Write(r, None, _entry(task, kb, r, None)) for r in todo_adds]
    replanned = False
    for row in merges:
        before = current.get(row.entry_id)
        if before is None:
            continue  # deleted meanwhile through the API: nothing to merge into
        if changed_since_plan(row, before):  # edited through the API since the plan read it
            replanned = True
            if not merge_again(row, before, mode):
                continue
        writes.append(Write(row, before, _entry(task, kb, row, before)))
    replacing.unmove(
        deps, kb, {r.replaces: r.entry_id for r in todo_adds if r.replaces and r.entry_id not in current}
    )
    new = NewBytes([], replacing.olds(deps, kb, todo_adds, takeover.ids))  # their counts move row by row
    with counting(deps, kb, new):
        build = partial(_entry, task, kb)
        writes, claimed, changed = hold_questions(deps, kb, mode, writes, build, takeover, new)
        new_entries = [w.after for w in writes if w.before is None]  # counted, within the quota
        links = tag_links(w.after for w in writes)
        # before the rows: a link without its use is dropped when read (keyed.py), never the reverse
        if links:
            deps.faq.link_tags(kb.id, links)
        if new_entries:
            deps.faq.put_entries(new_entries)  # indexed=False until their index entries are written
    index.write_all(new_entries)
    for entry in new_entries:
        save_indexed(deps, index, entry, claimed)
    for write in writes:
        if write.before is not None and not save_merge(deps, index, write, claimed):
            changed = True
    for entry_id, keys in claimed.items():
        deps.faq.confirm_questions(kb.id, entry_id, keys)
    return changed or replanned


def _finish(
    deps: Dependencies,
    task: Task,
    kb: KnowledgeBase | None,
    status: TaskStatus,
    *,
    plan: Plan | None = None,
    error: str = "",
    error_code: str = "",
) -> None:
    """Records the end (tags, failed rows, last result) and saves the task; the source and plan objects
    and the lease stay until that save is done (_settle), so a save that fails is redone by the next
    delivery from the plan, and a delivery after it finds the task finished and only tidies up. A plan
    with an error was refused before it wrote anything: its tags are left as they are."""
    if error:
        task.progress["error"] = error
        task.errors["import"] = error
    if error_code:
        task.progress["error_code"] = error_code
    if kb is not None and plan is not None:
        if not error:
            _tidy_tags(deps, kb, plan)
        record_failed_rows(deps, task, import_prefix(task.tenant_id, kb.id), plan.rows)
    if kb is not None and not task.params.get("dry_run"):
        replacing.stopped(deps, kb, task, plan)  # rows left undone: the entries they replace stay
        deps.faq.put_last_import(
            kb.id,
            {
                "task_id": task.id,
                "status": status.value,
                "failed_rows_url": task.params.get("failed_rows_url", ""),
                "mode": task.params.get("mode"),
                "finished_at": datetime.now(UTC).isoformat(),
                **{k: task.progress[k] for k in RESULT_KEYS if k in task.progress},
            },
        )
    task.status = status  # only now: until the save, the task is not finished (_fail_for_good)
    task.progress["status"] = status.value
    if _save(deps, task):
        task_finished(deps, task)
    _settle(deps, task)
    if kb is not None and status is not TaskStatus.COMPLETED and not task.params.get("dry_run"):
        # last, once the task is settled: a store that fails here leaves them to the next import
        _purge_unindexed(deps, kb, list(all_entries(deps, kb.id)))


def _settle(deps: Dependencies, task: Task) -> None:
    """After a finished task is saved, and again on any later delivery of it (idempotent): the source and
    plan objects go and the lease is released by its owner (a no-op once another import holds it)."""
    _cleanup_objects(deps, task)
    if not task.params.get("dry_run"):
        deps.faq.release_lease(task.kb_id, task.id)


def _purge_unindexed(
    deps: Dependencies, kb: KnowledgeBase, entries: Sequence[FaqEntry], running: str = ""
) -> list[FaqEntry]:
    """Entries a finished import added but never indexed (its embedding failed for good between the two
    writes): no search finds them, yet they hold their questions against the entries API and would be
    skipped by the next import. They go, with whatever part of their vectors was written, when their import
    ends, or else when the next one plans; `running`'s own are its to redo (_run_batch). Returns the rest."""
    # an import's only: an entry the API or a clone is writing now is unindexed for a moment, with no task
    stale = [e.id for e in entries if not e.indexed and e.import_task not in ("", running)]
    if stale:
        # vectors first: a crash leaves rows to purge, never ghost hits
        FaqIndex(deps, kb).remove_entries(stale)
        removed = deps.faq.delete_entries(kb.id, stale)
        release_entries(deps, kb.id, [e for e in entries if e.id in stale])
        give_back_storage(deps, kb.tenant_id, removed)
        logger.info("unindexed FAQ entries purged", extra={"kb_id": kb.id, "entries": len(stale)})
    gone = set(stale)
    return [e for e in entries if e.id not in gone]


def _fail_without_lease(deps: Dependencies, task: Task, error: str) -> None:
    """The lease went to another import: record the failure, touch nothing of the knowledge base."""
    task.status = TaskStatus.FAILED
    task.progress.update(status="failed", error=error)
    task.errors["import"] = error
    if _save(deps, task):
        task_finished(deps, task)
        # its own objects, not an uploaded file: the import that took the lease may be reading it
        _cleanup_objects(deps, task, upload_too=False)


def _tidy_tags(deps: Dependencies, kb: KnowledgeBase, plan: Plan) -> None:
    used: set[str] = set()
    for page in pages(deps, kb.id):
        used.update(t for entry in page for t in entry.tags)
        links = tag_links(page)
        if links:  # (a delivery that died between its links and its rows left none missing: links come first)
            deps.faq.link_tags(kb.id, links)
    if used:
        deps.faq.add_tags(kb.id, sorted(used))
    if plan.mode == "replace":
        unused = [t for t in deps.faq.tags(kb.id) if t not in used]
        if unused:
            deps.faq.remove_tags(kb.id, unused)


def _cleanup_objects(deps: Dependencies, task: Task, *, upload_too: bool = True) -> None:
    """The stored source (and the plan) go at the end; a dry run keeps an uploaded file it could read, so the
    real import can follow without a second upload (the bucket's `faq-imports/` rule expires what is left).
    An upload kept holds one of the tenant's pending places (uploads.py)."""
    source = str(task.params.get("source", ""))
    uploaded = "/uploads/" in source
    kept = uploaded and (
        not upload_too or (task.params.get("dry_run") and not task.params.get("source_unreadable"))
    )
    if source and not kept:
        deps.inbox.delete(source)
    plan_url = str(task.params.get("plan_url", ""))
    if plan_url:
        deps.inbox.delete(plan_url)
