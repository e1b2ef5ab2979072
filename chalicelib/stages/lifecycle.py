"""lifecycle queue: the durable work behind delete, batch reparse and retry-failed (and a big knowledge
base's cost or stats report, operations/kb_reports.py).

A task message carries only the task id. The worker takes the task's items in order from where its
progress says, works for at most one slice, saves progress (only forward and only while the task is open:
a redelivered worker that is behind, or still at work on a task that ended, stops) and queues itself again
for the rest. Each item's work is idempotent, so a crash or a second
delivery repeats an item, never corrupts it. A transient error retries the message (the queue has a DLQ);
a permanent one is recorded against the item and the task goes on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from pydantic import BaseModel, Field, ValidationError

from chalicelib.commands import ProcessConfig as ProcessConfigModel
from chalicelib.commands import ReparseRequest, validate
from chalicelib.domain import metering
from chalicelib.domain.errors import AppError, BadRequest, StageError
from chalicelib.domain.status import REPARSE_FROM
from chalicelib.domain.types import OPEN_TASK_STATUSES, Knowledge, ParseStatus, Task, TaskKind, TaskStatus
from chalicelib.ports import Dependencies
from chalicelib.services.events import reparse_started_again, task_finished
from chalicelib.services.kb_rows import kb_rows, position
from chalicelib.services.usage import carry_usage, metered_shares
from chalicelib.stages.runner import come_back_soon, parse_body, process_batch
from chalicelib.tasks import mark_kb_deleting
from chalicelib.tasks.delete import delete_one
from chalicelib.tasks.reembed import AnotherDeliveryCarriesOn, RetryTaskLater, reembed_work

QUEUE = "lifecycle"
SLICE_SECONDS = 30.0
SAVE_EVERY = 10
MAX_ERRORS_KEPT = 200
#: a tag's relations read at a time by its delete
PAGE = 50
#: a batch reparse's param: each item's attempt when its first delivery began (`_record_attempts`)
ATTEMPTS = "attempts"
#: tasks whose items are reparses, saved after each: a redelivery repeats the items after the last save, and
#: a second reparse throws the running attempt away and pays for it again (one save is far cheaper)
SAVED_EACH_ITEM = frozenset({TaskKind.REPARSE, TaskKind.REPARSE_KB, TaskKind.RETRY_FAILED})


class TaskMessage(BaseModel):
    task_id: str = Field(min_length=1, max_length=100)


def handle(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    def one(record: SQSRecord) -> None:
        try:
            message = parse_body(record.body, TaskMessage)
        except ValidationError as error:
            deps.queue.dead_letter(
                QUEUE, record.body, f"not a lifecycle task: {error.error_count()} error(s)"
            )
            return
        # a re-embed's documents are each their own usage entry (tasks/reembed.py opens their shares);
        # the rest is the task's knowledge base's
        with metered_shares(deps, QUEUE, record, event, context):
            try:
                run(deps, message.task_id)
            except Exception:
                come_back_soon(deps, QUEUE, record)
                raise

    return process_batch(event, context, one)


#: how long a knowledge base's delete waits for an FAQ import to notice and end
IMPORT_WAIT_SECONDS = 30
#: how long it waits to mark its knowledge base `deleting` again when writes kept changing it
MARK_RETRY_SECONDS = 5


def run(deps: Dependencies, task_id: str) -> None:
    task = deps.tasks.get(task_id)
    if task is None:
        return
    if task.status not in OPEN_TASK_STATUSES:
        # finished by an earlier delivery, which may have died before it announced: again, under the same id
        task_finished(deps, task)
        return
    began = task.status == TaskStatus.QUEUED  # no delivery has saved anything of it yet
    task.status = TaskStatus.RUNNING
    metering.attribute(task.kb_id, task.tenant_id)
    if (
        task.kind == TaskKind.REPARSE
        and ATTEMPTS not in task.params
        and not _record_attempts(deps, task, first=began)
    ):
        return  # another delivery of this task began it (or is further along, or it ended): it carries on
    deadline = time.monotonic() + SLICE_SECONDS
    try:
        for count, (item, work) in enumerate(_work(deps, task), start=1):
            try:
                work()
                if task.kind == TaskKind.MOVE:  # its cost follows it: counted in the target from now on
                    carry_usage(deps, deps.usage.for_knowledge(item), task.kb_id)
                task.succeeded += 1
            except (AppError, StageError) as error:  # this item cannot be done: record why, go on
                task.failed += 1
                if len(task.errors) < MAX_ERRORS_KEPT:
                    task.errors[item] = error.message
            task.done += 1
            if (count % SAVE_EVERY == 0 or task.kind in SAVED_EACH_ITEM) and not _save(deps, task):
                return  # another delivery of this task is further along: it carries on
            if time.monotonic() >= deadline:
                if _save(deps, task):
                    deps.queue.send_raw(QUEUE, {"task_id": task.id})  # the rest, behind other work
                return
    except RetryTaskLater as later:  # documents still on their way, a provider down: look again in a while
        if _save(deps, task):
            deps.queue.send_raw(QUEUE, {"task_id": task.id}, delay_seconds=min(900, int(later.delay_seconds)))
        return
    except AnotherDeliveryCarriesOn:  # a duplicate of the message: the delivery that took the work on saves
        return
    if task.kind == TaskKind.DELETE_KB:
        deps.tags.delete_kb(task.kb_id)  # its knowledge is gone: every tag and relation left goes too
        from chalicelib.faq.entries import purge_kb

        purge_kb(deps, task.kb_id)  # an FAQ knowledge base's entries and their index entries
        deps.wiki.delete_kb(task.kb_id)  # its wiki: ops, page records, index (a late finalize writes none)
        deps.shares.drop(task.kb_id)  # shared with nobody any more
        for hook in deps.webhooks.list_kb(task.kb_id):  # its webhooks and their logs
            deps.webhooks.delete(task.kb_id, hook.id)
        if deps.knowledge.page_by_kb(task.kb_id, limit=1):
            # A create that read the knowledge base before it turned `deleting` inserted its row after the
            # sweep looked (or the listing had not caught up with it): the next delivery sweeps again. A
            # create that reads it later undoes itself (operations/create.py `_undo_if_kb_closed`), so
            # once this finds no row, none is left behind in the deleted knowledge base.
            if _save(deps, task):
                deps.queue.send_raw(QUEUE, {"task_id": task.id})
            return
        deps.kbs.delete(task.kb_id)
    if task.kind == TaskKind.DELETE_TAG and task.failed == 0:
        deps.tags.delete(task.kb_id, str(task.params["tag_id"]))
    task.status = (
        TaskStatus.COMPLETED
        if task.failed == 0
        else TaskStatus.FAILED
        if task.succeeded == 0
        else TaskStatus.PARTIAL
    )
    if _save(deps, task):  # a later delivery finds the task finished and returns: announced once
        task_finished(deps, task)


def _save(deps: Dependencies, task: Task, only_from: frozenset[TaskStatus] = OPEN_TASK_STATUSES) -> bool:
    """Progress, only forward and only while the task is open: False when another delivery is further
    along or the task ended (finished by another delivery, failed by housekeeping), and the caller stops."""
    task.updated_at = datetime.now(UTC)
    if only_from == OPEN_TASK_STATUSES:
        return deps.tasks.save_progress(task)
    return deps.tasks.save_progress(task, only_from=only_from)


def _record_attempts(deps: Dependencies, task: Task, *, first: bool) -> bool:
    """A batch reparse's items' attempts, saved before its first reparse: progress is saved every SAVE_EVERY
    items, so a redelivery repeats the items after the last save, and an item past its attempt was
    reparsed by then (a second reparse would throw the running attempt away and pay for it again). The
    first delivery saves them only while the task is still `queued`:

        delivery A  reads the task (queued) ── record ✓ (running) ── reparse item 1 (attempt 2)
        delivery B  reads the task (queued) ──────── record ✗ (not queued): stops, A carries on

    (both saved at the same `done`, both went on and item 1 was reparsed twice.) `first`: the task was read
    queued (one left running without attempts, from before they were recorded, records them while open)."""
    rows = deps.knowledge.get_many(task.items)
    task.params[ATTEMPTS] = {row.id: row.attempt for row in rows.values()}
    return _save(deps, task, frozenset({TaskStatus.QUEUED}) if first else OPEN_TASK_STATUSES)


def _work(deps: Dependencies, task: Task) -> Iterator[tuple[str, Any]]:
    """(item, its work) in order, from where the task's progress says."""
    if task.kind == TaskKind.DELETE_KNOWLEDGE:
        for item in task.items[task.done :]:
            yield item, lambda item=item: delete_one(deps, item)
    elif task.kind == TaskKind.REPARSE:
        config = task.params.get("process_config")
        request = ReparseRequest(
            process_config=validate(ProcessConfigModel, config) if config is not None else None
        )
        for item in task.items[task.done :]:
            yield item, lambda item=item: _reparse_once(deps, task, item, request)
    elif task.kind == TaskKind.DELETE_KB:
        # the DELETE writes the task before it marks the knowledge base: one that died between left it active
        if not mark_kb_deleting(deps, task.kb_id):
            raise RetryTaskLater("the knowledge base keeps changing", MARK_RETRY_SECONDS)
        tried: set[str] = set()  # a row whose delete failed is not tried again in this delivery
        for row in _kb_sweep(deps, task, lambda row: row.id not in tried, resume=False):
            tried.add(row.id)
            task.items.append(row.id)
            # only while still in it: a move that lands after this listing took the row out
            yield row.id, lambda row=row: delete_one(deps, row.id, in_kb=task.kb_id)
        lease = deps.faq.get_lease(task.kb_id)
        if lease is not None and lease.expires_at > time.time():
            # an FAQ import still writing would leave entries and vectors behind the purge: it sees the
            # knowledge base deleting at its next batch, ends, and gives the lease back
            raise RetryTaskLater(f"FAQ import {lease.owner} is still running", IMPORT_WAIT_SECONDS)
    elif task.kind == TaskKind.DELETE_TAG:
        yield from _untag_all(deps, task)
    elif task.kind == TaskKind.RETRY_FAILED:
        # each failed row once for the whole task: one retried that fails again is not taken again by the
        # next delivery (it was, every slice, and the rows after it never)
        seen: set[str] = set(task.items)
        for row in _kb_sweep(
            deps, task, lambda row: row.parse_status == ParseStatus.FAILED and row.id not in seen, resume=True
        ):
            seen.add(row.id)
            task.items.append(row.id)
            yield row.id, lambda row=row: _reparse(deps, task.tenant_id, row.id, ReparseRequest())
    elif task.kind == TaskKind.MOVE:
        from chalicelib.tasks.move_clone import move_work

        yield from move_work(deps, task)
    elif task.kind == TaskKind.CLONE_KB:
        from chalicelib.tasks.clone import clone_work

        yield from clone_work(deps, task)
    elif task.kind == TaskKind.REEMBED:
        yield from reembed_work(deps, task)
    elif task.kind == TaskKind.SWITCH_KNOWLEDGE:
        from chalicelib.tasks.switch import switch_work

        yield from switch_work(deps, task)
    elif task.kind == TaskKind.KB_REPORT:  # one item, the knowledge base: a slice of its report's walk a
        # delivery, from its checkpoint; RetryTaskLater (no delay) for the rest, the report stored at the end
        from chalicelib.operations.kb_report_refresh import refresh_report

        for item in task.items[task.done :]:
            yield item, lambda: refresh_report(deps, task)
    elif task.kind == TaskKind.REPARSE_KB:
        config = task.params.get("process_config")
        whole = ReparseRequest(
            process_config=validate(ProcessConfigModel, config) if config is not None else None
        )
        seen_ids: set[str] = set(task.items)
        started = _created_ms(task)
        for row in _kb_sweep(
            deps,
            task,
            # a document uploaded after the change (or in its very millisecond) already has the new
            # settings: not parsed twice
            lambda row: (
                row.parse_status in REPARSE_FROM
                and row.id not in seen_ids
                and row.created_at.timestamp() < started
            ),
            resume=True,
        ):
            seen_ids.add(row.id)
            task.items.append(row.id)
            yield row.id, lambda row=row: _reparse(deps, task.tenant_id, row.id, whole)


def _untag_all(deps: Dependencies, task: Task) -> Iterator[tuple[str, Any]]:
    """The tag's relations, page by page (each step removes the one it did, so the next page is the start)."""
    from chalicelib.services.tagging import untag

    tag_id = str(task.params["tag_id"])
    seen: set[tuple[str, str]] = set()
    while keys := [k for k in deps.tags.tagged(task.kb_id, tag_id, limit=PAGE) if k not in seen]:
        for created_at, knowledge_id in keys:
            seen.add((created_at, knowledge_id))
            task.items.append(knowledge_id)
            yield (
                knowledge_id,
                lambda c=created_at, k=knowledge_id: untag(deps, task.kb_id, tag_id, k, c),
            )


def _kb_sweep(
    deps: Dependencies, task: Task, wanted: Callable[[Knowledge], bool], *, resume: bool
) -> Iterator[Knowledge]:
    """The knowledge base's rows `wanted` takes, newest first: with `resume`, from just after the task's last
    item (a delivery goes on where the one before stopped), then from the top again until a sweep finds none
    (a row that became wanted meanwhile). A page is read when the walk gets to it, so a delivery reads what it
    walks (it read the whole knowledge base for every 50 rows it handed out)."""
    after = _last_position(deps, task) if resume else None
    while True:
        found = False
        for row in kb_rows(deps, task.kb_id, after=after):
            if wanted(row):
                found = True
                yield row
        if after is None and not found:
            return
        after = None


def _last_position(deps: Dependencies, task: Task) -> tuple[str, str] | None:
    """Where the task's last item is in the newest-first order; None (the top) without one or when it is
    gone."""
    last = deps.knowledge.get(task.items[-1]) if task.items else None
    return position(last) if last is not None else None


def _reparse(deps: Dependencies, tenant_id: str, knowledge_id: str, request: ReparseRequest) -> None:
    from chalicelib.tasks.reparse import reparse

    reparse(deps, tenant_id, knowledge_id, request)


def _reparse_once(deps: Dependencies, task: Task, knowledge_id: str, request: ReparseRequest) -> None:
    """A batch reparse's item, unless it is past the attempt it had when the task began (`_record_attempts`).
    Another delivery of the task may reset it between this check and the reset, which then is refused (the
    reset holds only at the attempt it read): that delivery reparsed it, and this one goes on as if it had
    found it so."""
    attempt = task.params.get(ATTEMPTS, {}).get(knowledge_id)
    if attempt is not None and _reparsed_since(deps, knowledge_id, attempt):
        return
    try:
        _reparse(deps, task.tenant_id, knowledge_id, request)
    except BadRequest:
        if attempt is None or not _reparsed_since(deps, knowledge_id, attempt):
            raise


def _reparsed_since(deps: Dependencies, knowledge_id: str, attempt: int) -> bool:
    """The row is past `attempt`: reparsed by another delivery (or one whose progress was not saved), which
    may have died before it announced it: announced again, under the same id."""
    row = deps.knowledge.get(knowledge_id)
    if row is None or row.attempt <= attempt:
        return False
    reparse_started_again(deps, row, attempt + 1)
    return True


def _created_ms(task: Task) -> float:
    """When the task was made; rows keep their times to the millisecond: its own millisecond counts as after."""
    return math.floor(task.created_at.timestamp() * 1000) / 1000
