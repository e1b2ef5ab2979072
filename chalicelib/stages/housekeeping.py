"""The housekeeping schedule: self-healing sweeps every 5 minutes (spec §1.21), deciding from facts.

Sweep A fails pending/processing/finalizing rows untouched for longer than the threshold, unless a span
heartbeat is newer, the row's state machine execution is still running, or the row's own stage message was
queued after its last activity, or a fan-out on it (embedding slices, a PDF's page ranges) still owes parts,
and its queue still holds messages (for at most a day). Other documents keeping the queues busy never spare
a row whose message is gone. A failed row gives its place at the fairness door back. Sweep B fails summaries stuck in `processing` for over an hour (each delivery of a
summary subtask, a throttled model's deferred copies too, claims it again and so writes the row; the machine's
HeartbeatSeconds is the same hour), and summaries left `pending` on a settled row past the same threshold as
rows (a subtask the machine gave up on, a refresh whose message died): no message will move them any more.
They fail as the summary stage fails one, with its fallback description.

Sweep A reads the rows a page at a time, oldest first, while the invocation has time; one cut short leaves
where it stopped in the turns table and the next goes on from there, wrapping to the oldest when it reached
the end: a backlog of spared rows cannot hide a stuck row behind it. An execution check left unanswered
(throttled) spares the row until the next sweep. A delete left `deleting` is driven again once per threshold
by its own next task (its wait restarts when it is sent), unless its own task is still open: that one is
re-sent as any open task below, so a document is never driven by two at once.

A task (of any kind) still queued or running that saved no progress for the threshold had its message
lost (a send that failed, a request that died after writing it) or dead-lettered: it is sent again, up to
TASKS_PER_SWEEP a sweep, oldest first, each claimed by a write conditional on its wait still starting
before the cutoff (its wait restarts; of two sweeps only one sends). The claim leaves the task's own
updated_at alone: that is its progress (GET /tasks; a re-embed holds its knowledge base only while it
saves). A running task saves every few items and each slice, so it never looks stale while alive. One sent
MAX_TASK_RESENDS times without progress is failed with the reason; an FAQ import is sent once more to be
given up by its own worker, which records its end as any failed import's. Tasks written before the store
listed open tasks (and kept their status beside them) are given those keys by a backfill a few pages a sweep
(`_backfill_task_keys`), which stops for good once a whole pass finds none left.

What follows a sweep's decision (a row, summary or task failed) is owed before the decision is written:
its key goes into a turn book (OWED_BOOK), and leaves it once the event is announced and, for a row, its
span closed, its place given back and its uncounted outputs removed. No message brings a sweep back, and no
later sweep would see the decided row again, so a sweep that dies (its time, its memory) or meets a store
that does not answer in between would have lost those for good; a sweep at least OWED_AFTER_SECONDS later
(when the one that wrote it has surely ended) pays what is owed again, from the row or task as it is (each
step idempotent, the event under the same id). Each decision has an entry of its own, so two sweeps at once
never settle each other's; one whose payment kept failing is dropped after OWED_TRIES (logged as an error).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

from chalicelib.domain.clock import from_iso, iso_before, to_iso
from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.ids import execution_name, plan_attempt
from chalicelib.domain.status import is_in_flight
from chalicelib.domain.types import (
    Knowledge,
    ParseStatus,
    SpanStatus,
    Stage,
    SummaryStatus,
    Task,
    TaskKind,
    TaskStatus,
)
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, ServiceUnreachable
from chalicelib.services.deadline import deadline_of, out_of_time, share_of_time, stage_deadline
from chalicelib.services.events import failed_again, summary_decided_again, task_finished
from chalicelib.services.fairness import leave_pipeline
from chalicelib.services.stored_size import remove_uncounted_outputs
from chalicelib.services.summary_failure import summary_given_up
from chalicelib.tasks import own_delete_under_way, redrive_delete, send_again

#: the turn book (the turns table: one small item per key, which this function already reads and writes)
#: holding the (updated_at, id) of the last row a cut-short sweep looked at; empty when it got to the end
RESUME_BOOK = "housekeeping-resume"
Position = tuple[str, str]
#: open tasks without progress re-sent a sweep at most (the next sweep takes the rest)
TASKS_PER_SWEEP = 25
#: re-sends of a task without progress before it is failed (its dead letter, if any, stays for the operator):
#: about 13 h at the default threshold, past any queue backlog a working stack has
MAX_TASK_RESENDS = 6
#: the key of a task's own failure in its errors (the others are its items')
TASK_ERROR_KEY = "task"
#: the turn book of the task keys' backfill: where its scan stopped, what the pass found, since when it runs,
#: and `done` once a pass found nothing left
TASK_BACKFILL_BOOK = "housekeeping-task-backfill"
#: the backfill's reads a sweep: pages of that many tasks table items (one Scan request each)
TASK_BACKFILL_PAGES, TASK_BACKFILL_PAGE_ITEMS = 10, 500
#: a pass that finds none left ends the backfill only this long after it began (Lambda's longest run): a task
#: written by a function still running the code before the update is keyed too
TASK_BACKFILL_SETTLE_SECONDS = 900
#: the turn book of what a sweep's decisions still owe (module docstring): `<kind>:<id>:<nonce>` (each
#: decision's own: a sweep running at the same time never settles another's) -> {attempt, at, tries}
OWED_BOOK = "housekeeping-owed"
OWED_ROW, OWED_SUMMARY, OWED_TASK = "knowledge", "summary", "task"
#: an entry is paid by a later sweep only this long after it was written (Lambda's longest run): by then the
#: sweep that wrote it has ended, so a payment never races the decision it pays for
OWED_AFTER_SECONDS = 900
#: a payment that failed this often is dropped with an error (alarmed): one subject whose follow-up always
#: fails must not stop every later sweep at its first step
OWED_TRIES = 3


@dataclass
class SweepReport:
    recovered: list[str] = field(default_factory=list)
    spared: dict[str, str] = field(default_factory=dict)
    summaries_failed: list[str] = field(default_factory=list)
    deletes_redriven: list[str] = field(default_factory=list)
    tasks_resent: list[str] = field(default_factory=list)
    tasks_failed: list[str] = field(default_factory=list)
    #: tasks written before the open index that the backfill found and keyed
    tasks_keyed: int = 0
    #: the invocation ran out of time before every stuck row was looked at
    cut_short: bool = False


def _threshold_text(seconds: int) -> str:
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60}m{rest % 60}s"


def sweep(deps: Dependencies, now: datetime | None = None) -> SweepReport:
    """Lost deletes, lost tasks and unsettled summaries first (oldest first, read a page at a time, in at
    most half the invocation's time), then the stuck rows, oldest first from where the last cut-short sweep
    stopped. Each part goes on only while it has time, and the next sweep goes on: a big backlog of spared
    rows must starve neither the others nor the rows behind it, nor a backlog of deletes, tasks or summaries
    the stuck rows."""
    now = now or datetime.now(UTC)
    report = SweepReport()
    cutoff = iso_before(deps.settings.stale_after_seconds, now)
    # half the time at most: a backlog of deletes, tasks or summaries (each redriven one due again a threshold
    # later) must not take every sweep's time from the stuck rows
    with share_of_time(0.5):
        _pay_what_is_owed(deps, now, report)
        _redrive_lost_deletes(deps, now, cutoff, report)
        _resend_stale_tasks(deps, now, cutoff, report)
        _fail_unsettled_summaries(deps, now, cutoff, report)
        _backfill_task_keys(deps, now, report)
    _recover_stuck_rows(deps, now, cutoff, report)
    if report.recovered or report.summaries_failed:
        logger.warning(
            "housekeeping recovered stuck rows",
            extra={"recovered": report.recovered, "summaries_failed": report.summaries_failed},
        )
    return report


def _redrive_lost_deletes(deps: Dependencies, now: datetime, cutoff: str, report: SweepReport) -> None:
    for knowledge in deps.knowledge.deleting_older_than(cutoff):
        if out_of_time():  # each redrive writes a task and sends it: the next sweep goes on
            report.cut_short = True
            return
        if own_delete_under_way(deps, knowledge):
            continue  # its own task, open, is re-sent below while it makes no progress (then failed)
        # A delete whose task was lost (or ended in the DLQ): accepted work is never lost, so drive it again.
        # Its wait restarts first, on the row as read: a task still queued behind others is not sent again
        # every sweep but after another threshold, and of two sweeps reading the row only one sends it.
        if deps.knowledge.restart_delete_wait(
            knowledge.id, to_iso(now), not_written_after=to_iso(knowledge.updated_at)
        ):
            redrive_delete(deps, knowledge)
            report.deletes_redriven.append(knowledge.id)


def _resend_stale_tasks(deps: Dependencies, now: datetime, cutoff: str, report: SweepReport) -> None:
    """Open tasks that saved nothing since the cutoff, oldest first: each claimed (its wait restarts), then
    sent again, or failed once it was sent MAX_TASK_RESENDS times without progress (a poison task)."""
    for task in deps.tasks.stale_open(cutoff, TASKS_PER_SWEEP):
        if out_of_time():
            report.cut_short = True
            return
        resends = deps.tasks.claim_stale(task.id, cutoff, to_iso(now))
        if resends is None:  # it saved progress, or another sweep claimed it, since it was read
            continue
        if resends > MAX_TASK_RESENDS and task.kind == TaskKind.FAQ_IMPORT:
            send_again(deps, task, give_up=True)  # its worker ends it as its own failures (faq/importing.py)
            report.tasks_failed.append(task.id)
        elif resends > MAX_TASK_RESENDS:
            _fail_stuck_task(deps, task, now)
            report.tasks_failed.append(task.id)
        else:
            send_again(deps, task)
            report.tasks_resent.append(task.id)


def _backfill_task_keys(deps: Dependencies, now: datetime, report: SweepReport) -> None:
    """Tasks queued or running when the update that lists open tasks was deployed are not listed (they
    would be at their next save, and one whose message was lost never saves again): a Scan of the tasks
    table keys them, TASK_BACKFILL_PAGES pages a sweep from where the last stopped. A pass that gets to the
    end having found none (and began TASK_BACKFILL_SETTLE_SECONDS after the backfill did) ends it for good;
    otherwise another pass starts. One done reads nothing more."""
    book = deps.turns.change(TASK_BACKFILL_BOOK, lambda saved: (dict(saved), saved))
    if book.get("done"):
        return
    after: str | None = book.get("after")
    found = int(book.get("found", 0))
    since = str(book.get("since") or to_iso(now))
    began = str(book.get("began") or since)
    done = False
    for page in range(TASK_BACKFILL_PAGES):
        if page and out_of_time():  # the first page is always read: every sweep moves it on
            report.cut_short = True
            break
        keyed, after = deps.tasks.backfill_keys(after, TASK_BACKFILL_PAGE_ITEMS)
        found += keyed
        report.tasks_keyed += keyed
        if after is None:  # the end of a pass
            settled = (from_iso(began) - from_iso(since)).total_seconds() >= TASK_BACKFILL_SETTLE_SECONDS
            done = found == 0 and settled
            found, began = 0, to_iso(now)
            break
    if report.tasks_keyed:
        logger.info(
            "housekeeping keyed tasks written before the open index", extra={"tasks": report.tasks_keyed}
        )
    saved = {"done": True} if done else {"after": after, "found": found, "since": since, "began": began}
    deps.turns.change(TASK_BACKFILL_BOOK, lambda _: (None, saved))


def _fail_stuck_task(deps: Dependencies, task: Task, now: datetime) -> None:
    reason = f"no progress after {MAX_TASK_RESENDS} re-sends of the task; it was given up"
    task.status = TaskStatus.FAILED
    task.updated_at = now
    task.errors = {TASK_ERROR_KEY: reason, **task.errors}  # first: the one its event carries
    logger.warning("housekeeping failed a task that made no progress", extra={"task_id": task.id})
    owed = _owe(deps, now, OWED_TASK, task.id, 1)
    if deps.tasks.save_progress(task):
        task_finished(deps, task)
    _settle(deps, owed)


def _fail_unsettled_summaries(deps: Dependencies, now: datetime, cutoff: str, report: SweepReport) -> None:
    summary_cutoff = iso_before(deps.settings.summary_stale_after_seconds, now)
    for knowledge in deps.knowledge.summaries_unsettled_older_than(summary_cutoff):
        if out_of_time():  # each failure reads chunks and writes: the next sweep goes on
            report.cut_short = True
            return
        if knowledge.summary_status == SummaryStatus.PENDING and (
            is_in_flight(knowledge.parse_status) or to_iso(knowledge.updated_at) >= cutoff
        ):
            continue  # its subtask or refresh may still be queued: a pending one waits the row's cutoff
        owed = _owe(deps, now, OWED_SUMMARY, knowledge.id, knowledge.attempt)
        # on the row as read: a summary task that claimed it again since (a deferred copy, a redelivery) wins
        if summary_given_up(
            deps,
            knowledge,
            only_if=knowledge.summary_status,
            not_written_after=to_iso(knowledge.updated_at),
        ):
            report.summaries_failed.append(knowledge.id)
        _settle(deps, owed)


def _recover_stuck_rows(deps: Dependencies, now: datetime, cutoff: str, report: SweepReport) -> None:
    wait_limit = iso_before(deps.settings.queue_wait_limit_seconds, now)
    backlogs: dict[str, int] = {}  # one read per queue and sweep, however many rows wait in it
    resume_after = _resume_point(deps)
    stopped_after = resume_after
    for knowledge in deps.knowledge.in_flight_after(cutoff, resume_after):
        if out_of_time():  # the next sweep (5 minutes) goes on after the last row looked at
            report.cut_short = True
            break
        stopped_after = (to_iso(knowledge.updated_at), knowledge.id)
        _recover_if_stuck(deps, now, knowledge, cutoff, wait_limit, backlogs, report)
    else:
        stopped_after = None  # every row was looked at: the next sweep starts at the oldest again
    if stopped_after != resume_after:
        _save_resume_point(deps, stopped_after)


def _resume_point(deps: Dependencies) -> Position | None:
    saved = deps.turns.change(RESUME_BOOK, lambda book: (book.get("after"), book))
    return (str(saved[0]), str(saved[1])) if saved else None


def _save_resume_point(deps: Dependencies, position: Position | None) -> None:
    book: dict[str, Any] = {"after": list(position)} if position else {}
    deps.turns.change(RESUME_BOOK, lambda _: (None, book))


def _recover_if_stuck(
    deps: Dependencies,
    now: datetime,
    knowledge: Knowledge,
    cutoff: str,
    wait_limit: str,
    backlogs: dict[str, int],
    report: SweepReport,
) -> None:
    reason = _why_alive(deps, knowledge, cutoff, wait_limit, backlogs)
    if reason:
        report.spared[knowledge.id] = reason
        return
    message = (
        f"task stuck in {knowledge.parse_status.value} > "
        f"{_threshold_text(deps.settings.stale_after_seconds)}, recovered by housekeeping"
    )
    owed = _owe(deps, now, OWED_ROW, knowledge.id, knowledge.attempt)
    # conditional on the row as read: a stage that moved it on since (same attempt) must not be failed
    if deps.knowledge.mark_failed(
        knowledge.id,
        knowledge.attempt,
        message,
        SpanErrorCode.TASK_TIMEOUT,
        not_written_after=to_iso(knowledge.updated_at),
    ):
        report.recovered.append(knowledge.id)
        _after_row_failed(deps, deps.knowledge.get(knowledge.id), knowledge.attempt)
    _settle(deps, owed)


def _after_row_failed(deps: Dependencies, row: Knowledge | None, attempt: int) -> None:
    """What follows a row's failure at `attempt` (nothing once it moved on): announced first (what follows
    must not cost the event), its span closed, its place at the tenant's door given back (which wakes the
    next waiter), and its parse's outputs removed (failed before it was indexed: nothing counts them)."""
    if row is None or row.attempt != attempt or row.parse_status != ParseStatus.FAILED:
        return
    failed_again(deps, row, attempt)
    deps.tracker.close_root(row.id, attempt, SpanStatus.FAILED, row.error_code, row.error_message)
    leave_pipeline(deps, row.tenant_id, row.id)
    remove_uncounted_outputs(deps, row.id, attempt)


def _owe(deps: Dependencies, now: datetime, kind: str, subject_id: str, attempt: int) -> str:
    """Writes down, before a decision, that its follow-ups are owed; returns the key `_settle` takes."""
    key = f"{kind}:{subject_id}:{secrets.token_hex(6)}"
    entry = {"attempt": attempt, "at": int(now.timestamp()), "tries": 0}
    deps.turns.change(OWED_BOOK, lambda book: (None, {**book, key: entry}))
    return key


def _settle(deps: Dependencies, key: str) -> None:
    """The decision was not made (the row or task moved on), or every follow-up of it ran."""
    deps.turns.change(OWED_BOOK, lambda book: (None, {k: v for k, v in book.items() if k != key}))


def _entry(written: Any) -> dict[str, Any]:
    """An owed entry as written; one of the first version of the book (its attempt alone) is paid at once."""
    return dict(written) if isinstance(written, dict) else {"attempt": int(written), "at": 0, "tries": 0}


def _counted(book: dict[str, Any], *, key: str, tried: dict[str, Any]) -> tuple[None, dict[str, Any]]:
    """The entry with its try counted (unless it was settled meanwhile)."""
    return None, ({**book, key: tried} if key in book else book)


def _pay_what_is_owed(deps: Dependencies, now: datetime, report: SweepReport) -> None:
    """Runs again the follow-ups a sweep owed when it stopped, from the row or task as it is now: each entry
    once its sweep has surely ended (OWED_AFTER_SECONDS), and dropped, logged, once it failed OWED_TRIES
    times."""
    owed: dict[str, Any] = deps.turns.change(OWED_BOOK, lambda book: (dict(book), book))
    for key, written in sorted(owed.items()):
        entry = _entry(written)
        if out_of_time():
            report.cut_short = True
            return
        if now.timestamp() - int(entry["at"]) < OWED_AFTER_SECONDS:
            continue  # its own sweep may still be at it
        if int(entry["tries"]) >= OWED_TRIES:
            logger.error("housekeeping dropped a follow-up that kept failing", extra={"owed": key})
            _settle(deps, key)
            continue
        tried = {**entry, "tries": int(entry["tries"]) + 1}  # counted before: a payment that raises counts
        deps.turns.change(OWED_BOOK, partial(_counted, key=key, tried=tried))
        kind, subject_id = key.split(":")[:2]
        attempt = int(entry["attempt"])
        if kind == OWED_ROW:
            _after_row_failed(deps, deps.knowledge.get(subject_id), attempt)
        elif kind == OWED_SUMMARY:
            summary_decided_again(deps, deps.knowledge.get(subject_id), attempt)
        elif kind == OWED_TASK and (task := deps.tasks.get(subject_id)) and task.status == TaskStatus.FAILED:
            task_finished(deps, task)
        _settle(deps, key)


def handle(deps: Dependencies, event: Any = None, context: Any = None) -> dict[str, Any]:
    if not deps.settings.housekeeping_enabled:
        logger.info("housekeeping is switched off (WEKNORA_HOUSEKEEPING_ENABLED=false): nothing swept")
        return {"skipped": "housekeeping is disabled"}
    token = stage_deadline.set(deadline_of(context))
    try:
        report = sweep(deps)
    finally:
        stage_deadline.reset(token)
    return {
        "cut_short": report.cut_short,
        "recovered": report.recovered,
        "spared": report.spared,
        "summaries_failed": report.summaries_failed,
        "deletes_redriven": report.deletes_redriven,
    }


def _why_alive(
    deps: Dependencies, knowledge: Knowledge, cutoff: str, wait_limit: str, backlogs: dict[str, int]
) -> str:
    """Why a row untouched since `cutoff` is still alive, from facts about this very row ('' = stuck)."""
    last = deps.spans.last_activity_iso(knowledge.id)
    if last is not None and last >= cutoff:
        return "span heartbeat is recent"
    if knowledge.parse_status != ParseStatus.PENDING:
        try:
            if deps.workflow.is_running(execution_name(knowledge.id, knowledge.attempt)):
                return "state machine execution is running"
        except ServiceUnreachable:
            # Unanswered (throttled, a 5xx): the execution may well be running, and a live document failed
            # cannot be undone, so the row waits for the next sweep. One not found answers False (stuck);
            # a refused call (a missing grant) is a bug and raises.
            logger.warning(
                "could not check the execution", extra={"knowledge_id": knowledge.id}, exc_info=True
            )
            return "its state machine execution did not answer: looked at again next sweep"
    # Its stage message was queued after the last sign of work on it, so no worker has taken it yet: it is
    # waiting behind other documents, as long as that queue holds messages and not for ever. A fan-out's
    # messages are queued before the work that finished one of its parts writes its last sign, so while
    # parts are still owed one of them may be waiting whatever the order of the two.
    waiting = (
        knowledge.parse_status in (ParseStatus.PENDING, ParseStatus.PROCESSING)
        and knowledge.queued_stage
        and knowledge.queued_at >= wait_limit
        and (last is None or knowledge.queued_at > last or _fan_out_owes_parts(deps, knowledge))
    )
    if waiting:
        try:
            if knowledge.queued_stage not in backlogs:
                backlogs[knowledge.queued_stage] = deps.queue.backlog(knowledge.queued_stage)
            if backlogs[knowledge.queued_stage] > 0:
                return f"its {knowledge.queued_stage} message is waiting in a busy queue"
        except ServiceUnreachable:  # a refused read (a missing grant) is a bug: it surfaces and alarms
            logger.exception("could not inspect the queue", extra={"knowledge_id": knowledge.id})
    return ""


def _fan_out_owes_parts(deps: Dependencies, knowledge: Knowledge) -> bool:
    """This attempt's fan-out on the row's queue still owes parts, each with a message queued or running:
    embedding slices not released yet (its plan is `attempt * 1000 + generation`, domain/ids.plan_key),
    or a PDF's page ranges not parsed yet (the docreader span's figures, services/page_ranges)."""
    if knowledge.queued_stage == Stage.EMBEDDING.value:
        return knowledge.embed_slices_pending > 0 and plan_attempt(knowledge.embed_plan) == knowledge.attempt
    if knowledge.queued_stage != Stage.DOCREADER.value:
        return False
    span = deps.spans.get(knowledge.id, knowledge.attempt, Stage.DOCREADER.value)
    if span is None or span.status not in (SpanStatus.PENDING, SpanStatus.RUNNING):
        return False
    figures = span.outputs
    return bool(figures.get("ranges")) and int(figures.get("pages_parsed", 0)) < int(
        figures.get("pages_total", 0)
    )
