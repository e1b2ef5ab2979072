"""A knowledge base's reports (GET /knowledge-bases/{id}/cost and /stats) within bounded work per request.

A request reads at most INLINE_USAGE_ENTRIES usage entries (and, for the stats, INLINE_ROWS rows): a
knowledge base within those bounds, the common case, gets a fresh and exact report as it always did. Past a
bound the request stops reading (before the report writes anything: workflow fills and carries come after
the read) and answers the last report a refresh stored, with its `as_of`, `"fresh": false`, and makes sure
one refresh is under way: a lifecycle task (`kb_report`) that reads the whole history in the lifecycle
function, with the same functions over the whole iterator (operations/kb_report_refresh.py), and stores the
report (usage table, `UsageRepo.save_report`, replacing only an older one). With no stored report yet the
answer is a 202 `report_pending` with the task's id (poll the same URL, or GET /tasks/{id}).

One refresh at a time: the refresh task's id follows from the knowledge base, the kind and its generation,
the one after the stored report's (`report_task_id`), so GETs at once or repeated land on one task. A stored
report younger than REFRESH_AFTER_SECONDS starts none (a client polling a big knowledge base does not keep
a refresh running back to back). A refresh redelivered recomputes (its fills and carries are idempotent
writes under the same keys); one whose message was lost is re-sent by housekeeping like every open task.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

from chalicelib.domain.clock import from_iso
from chalicelib.domain.errors import ServiceUnavailable
from chalicelib.domain.types import OPEN_TASK_STATUSES, KnowledgeBase, Task, TaskKind
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, ServiceUnreachable, StoredReport, TaskExists
from chalicelib.tasks import MAX_TASK_GENERATIONS, deliver_again, generation_task_id

T = TypeVar("T")

COST = "cost"
STATS = "stats"
KINDS = (COST, STATS)
#: usage entries a request reads before it answers the stored report instead: a few of DynamoDB's 1 MB
#: Query pages and one batch read per 100 documents they name (about 650 documents of ~15 entries an
#: attempt), against API Gateway's 28 s
INLINE_USAGE_ENTRIES = 10_000
#: rows the stats read before the same (a page is 500 rows, kb_rows)
INLINE_ROWS = 5_000
#: a stored report younger than this starts no refresh
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


def bounded(items: Iterable[T], limit: int) -> Iterator[T]:
    """The items, raising OverBound at the first one past `limit`."""
    for count, item in enumerate(items, start=1):
        if count > limit:
            raise OverBound
        yield item


def fresh(report: dict[str, Any], as_of: str) -> dict[str, Any]:
    """A report read inline: exact as of the moment its reading began."""
    return {**report, "as_of": as_of, "fresh": True, "refreshing": False}


def report_task_id(kb_id: str, kind: str, generation: int) -> str:
    return generation_task_id(_REPORT_TASK_IDS, f"{kb_id}#{kind}", generation)


def stored_answer(deps: Dependencies, kb: KnowledgeBase, kind: str) -> dict[str, Any]:
    """The last stored report of the kind with its `as_of` (a refresh started if it is old enough), or, with
    none yet, the 202's answer (`report_pending`) naming the refresh task."""
    stored = deps.usage.report(kb.id, kind)
    task = _refresh(deps, kb, kind, stored)
    if stored is None:
        if task is None:  # every generation the walk looks at ended without a report: a refresh keeps failing
            raise ServiceUnavailable(
                f"the knowledge base's {kind} report could not be computed; try again later",
                code="report_unavailable",
            )
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


def status_of(report: dict[str, Any]) -> int:
    """The HTTP status of a report's answer: 202 while the first one is computed."""
    return 202 if report.get("code") == REPORT_PENDING else 200


def _refresh(deps: Dependencies, kb: KnowledgeBase, kind: str, stored: StoredReport | None) -> Task | None:
    """The open refresh of the kind, written and sent unless one is: the generation after the stored
    report's, or the first after it that has not ended (one that ended stored no newer report: it failed,
    or a newer report came first). None when the stored report is recent enough."""
    if stored is not None and _age_seconds(stored.as_of) < REFRESH_AFTER_SECONDS:
        return None
    first = stored.generation + 1 if stored is not None else 0
    for generation in range(first, first + MAX_TASK_GENERATIONS):
        task_id = report_task_id(kb.id, kind, generation)
        task = deps.tasks.get(task_id)
        if task is None:
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
                return made
        if task is not None and task.status in OPEN_TASK_STATUSES:
            return task
    return None


def _age_seconds(as_of: str) -> float:
    return (datetime.now(UTC) - from_iso(as_of)).total_seconds()


def save_refreshed(deps: Dependencies, task: Task, as_of: str, body: dict[str, Any]) -> bool:
    """The refresh's report, stored unless a newer one is (a late redelivery of an older refresh)."""
    report = StoredReport(task.kb_id, str(task.params[REPORT]), as_of, int(task.params[GENERATION]), body)
    return deps.usage.save_report(report)
