"""A knowledge base's reports (GET /knowledge-bases/{id}/cost and /stats) within bounded work per request.

A request reads at most INLINE_USAGE_ENTRIES usage entries (and, for the stats, INLINE_ROWS rows): a
knowledge base within those bounds, the common case, gets a fresh and exact report as it always did. Past a
bound the request stops reading (before the report writes anything: workflow fills and carries come after
the read) and answers the last report a refresh stored, with its `as_of`, `"fresh": false`, and makes sure
one refresh is under way: a lifecycle task (`kb_report`) that reads the whole history in the lifecycle
function, with the same functions a request uses (operations/kb_report_refresh.py), and stores the report
(usage table, `UsageRepo.save_report`, replacing only an older one). With no stored report yet the answer is
a 202 `report_pending` with the task's id: poll the same URL (the task is the owner's: a reader of a shared
knowledge base cannot read it; the gate below keeps repeated GETs from starting refreshes).

One refresh at a time: the refresh task's id follows from the knowledge base, the kind and its generation,
the one after both the stored report's and the last generation known to have ended without one
(`UsageRepo.ended_generation`, raised by the GET that finds such a one), so GETs at once or repeated land on
one task, and a failed refresh costs one generation: the next GET past the wait starts the next. A stored
report younger than REFRESH_AFTER_SECONDS (counted from when it was stored, not from when its read began)
starts none, nor does a refresh that ended without a report that long ago: a client polling a big knowledge
base does not keep refreshes running back to back. Before the first report, a failed refresh answers 503
`report_unavailable` saying why, until the wait is over.

A refresh reads in slices of the lifecycle function (operations/kb_report_refresh.py): a checkpoint at
each slice's end, so a redelivery goes on from it; its fills and carries are idempotent writes under the
same keys; one whose message was lost is re-sent by housekeeping like every open task.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from chalicelib.domain.clock import from_iso, now_iso
from chalicelib.domain.errors import ServiceUnavailable
from chalicelib.domain.types import OPEN_TASK_STATUSES, KnowledgeBase, Task, TaskKind
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, ServiceUnreachable, StoredReport, TaskExists
from chalicelib.tasks import MAX_TASK_GENERATIONS, deliver_again, generation_task_id

COST = "cost"
STATS = "stats"
KINDS = (COST, STATS)
#: usage entries a request reads before it answers the stored report instead: a few of DynamoDB's 1 MB
#: Query pages and one batch read per 100 documents they name (about 650 documents of ~15 entries an
#: attempt), against API Gateway's 28 s
INLINE_USAGE_ENTRIES = 10_000
#: rows the stats read before the same (a page is 500 rows, kb_rows)
INLINE_ROWS = 5_000
#: a report stored less than this ago starts no refresh, nor does a refresh that ended without one
REFRESH_AFTER_SECONDS = 300
#: the 202's code while a knowledge base has no stored report yet
REPORT_PENDING = "report_pending"
#: the task param naming the report a refresh computes, and the generation of its id
REPORT = "report"
GENERATION = "generation"

#: the namespace of a refresh task's id (uuid5 of "<kb_id>#<kind>" and its generation)
_REPORT_TASK_IDS = uuid.UUID("6a1f7e0c-2d4b-4c8e-9b35-0e7d2c41a9f3")


class OverBound(Exception):
    """The knowledge base has more to read than a request may: answer the stored report."""


def inline_or_stored(
    deps: Dependencies, kb: KnowledgeBase, kind: str, read_inline: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """The report read inline (exact as of the moment its reading began), or, once `read_inline` passes its
    bound (OverBound), the stored one (`stored_answer`)."""
    as_of = now_iso()
    try:
        report = read_inline()
    except OverBound:
        return stored_answer(deps, kb, kind)
    return {**report, "as_of": as_of, "fresh": True, "refreshing": False}


def report_task_id(kb_id: str, kind: str, generation: int) -> str:
    return generation_task_id(_REPORT_TASK_IDS, f"{kb_id}#{kind}", generation)


def stored_answer(deps: Dependencies, kb: KnowledgeBase, kind: str) -> dict[str, Any]:
    """The last stored report of the kind with its `as_of` (a refresh started if it is old enough), or, with
    none yet, the 202's answer (`report_pending`) naming the refresh task (503 `report_unavailable` while
    the last refresh ended without a report less than REFRESH_AFTER_SECONDS ago)."""
    stored = deps.usage.report(kb.id, kind)
    task, ended = _refresh(deps, kb, kind, stored)
    if stored is None and ended is not None:
        stored = deps.usage.report(kb.id, kind)  # it ended a moment after the read: its report is in
    if stored is None:
        if task is None:
            raise ServiceUnavailable(_why(kind, ended), code="report_unavailable")
        return {
            "kb_id": kb.id,
            "report": kind,
            "code": REPORT_PENDING,
            "as_of": None,
            "fresh": False,
            "refreshing": True,
            "task_id": task.id,
        }
    answer = {**stored.body, "as_of": stored.as_of, "fresh": False, "refreshing": task is not None}
    if task is not None:
        answer["task_id"] = task.id
    return answer


def _why(kind: str, ended: Task | None) -> str:
    message = f"the knowledge base's {kind} report could not be computed"
    if ended is None:
        return message + "; try again later"
    errors = "; ".join(sorted(set(ended.errors.values()))) or ended.status.value
    return (
        f"{message}: its refresh (task {ended.id}) ended {ended.status.value} ({errors}); another starts "
        f"{REFRESH_AFTER_SECONDS} s after it ended"
    )


def status_of(report: dict[str, Any]) -> int:
    """The HTTP status of a report's answer: 202 while the first one is computed."""
    return 202 if report.get("code") == REPORT_PENDING else 200


def _refresh(
    deps: Dependencies, kb: KnowledgeBase, kind: str, stored: StoredReport | None
) -> tuple[Task | None, Task | None]:
    """(the open refresh of the kind, written and sent unless one is; a refresh that ended without storing
    a report less than REFRESH_AFTER_SECONDS ago, while none starts). The walk starts after the stored
    report's generation and the last one known to have ended without a report; a generation it finds
    ended (failed, or a newer report came first) is kept as that, so the next walk starts after it.
    Nothing while the stored report is recent."""
    if stored is not None and _age_seconds(stored.stored_at or stored.as_of) < REFRESH_AFTER_SECONDS:
        return None, None
    reported = stored.generation if stored is not None else -1
    ended_last = deps.usage.ended_generation(kb.id, kind)
    # the last generation that ended without a report: the next waits as long after it as after a report
    ended = deps.tasks.get(report_task_id(kb.id, kind, ended_last)) if ended_last > reported else None
    first = max(reported, ended_last) + 1
    for generation in range(first, first + MAX_TASK_GENERATIONS):
        task_id = report_task_id(kb.id, kind, generation)
        task = deps.tasks.get(task_id)
        if task is None:
            if ended is not None and _ended_recently(ended):
                return None, ended
            made = Task(
                id=task_id,
                tenant_id=kb.tenant_id,
                kind=TaskKind.KB_REPORT,
                kb_id=kb.id,
                items=[kb.id],
                params={REPORT: kind, GENERATION: generation},
            )
            try:
                deps.tasks.put(made)
            except TaskExists:  # another request wrote it a moment ago, and sends it
                task = deps.tasks.get(task_id)
            else:
                try:
                    deliver_again(deps, made.id)  # its first delivery
                except ServiceUnreachable:  # written: housekeeping sends it again (a 5xx here would not)
                    logger.warning("report refresh not sent", extra={"task_id": made.id, "kb_id": kb.id})
                return made, None
        if task is None:
            continue
        if task.status in OPEN_TASK_STATUSES:
            return task, None
        deps.usage.save_ended_generation(kb.id, kind, generation)  # only ever raised
        ended = task
    return None, None


def _ended_recently(task: Task) -> bool:
    return (datetime.now(UTC) - task.updated_at).total_seconds() < REFRESH_AFTER_SECONDS


def _age_seconds(when: str) -> float:
    return (datetime.now(UTC) - from_iso(when)).total_seconds()


def save_refreshed(deps: Dependencies, task: Task, as_of: str, body: dict[str, Any]) -> bool:
    """The refresh's report, stored unless a newer one is (a late redelivery of an older refresh)."""
    kind, generation = str(task.params[REPORT]), int(task.params[GENERATION])
    return deps.usage.save_report(StoredReport(task.kb_id, kind, as_of, generation, body, now_iso()))
