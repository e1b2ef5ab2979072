"""The `kb_report` task's work: a big knowledge base's cost or stats report, walked in the lifecycle
function with the functions a request uses within its bound (so both agree by construction), then stored
(operations/kb_reports.py).

A walk of a big knowledge base does not fit one delivery (the lifecycle function's 300 s and 512 MB): a
delivery walks for one slice (SLICE_SECONDS) and, unless it is done, keeps where it got to (the usage
Query's cursor, the row position, the sums and each document's few numbers: `CostWalk`, `StatsWalk`) in
a checkpoint, then the task comes back in a new delivery (RetryTaskLater, no delay: the lifecycle runner
saves it and queues it again), which goes on from there.

The slices are numbered, and a KB_REPORT task's `done` stays 0 over them, so the task's save cannot tell
two deliveries of one slice apart (an SQS duplicate): the refresh's own book (the turn book item
`kb-report#<task id>`: `{"slice": k}`, `"ended": true` once the report is stored) says which slice is
next, and slice k's checkpoint is `reports/<kb_id>/<kind>/<generation>/<k>.json.gz` (none for 0). A
delivery reads k from the book and the checkpoint of k, walks, and when not done writes the checkpoint of
k+1, then claims k -> k+1 in the book (a conditional write). The delivery that wins deletes the checkpoint
of k and comes back; a loser (a duplicate, run at the same time) stops with nothing saved and nothing sent
(AnotherDeliveryCarriesOn), so the copies of a message merge into one chain at the next slice:

    delivery A  book 3, walks ── writes 4 ── claims 3 -> 4 ✓ ── deletes 3, comes back (reads 4 next)
    delivery B  book 3, walks ──── writes 4 ──── claims 3 -> 4 ✗ (book 4): stops (4 is A's chain's now)

A delivery that dies before its claim is redelivered and walks slice k again (its checkpoint of k+1
written again: a walk from the same checkpoint, as good as a loser's, which may overwrite the winner's);
one that dies after it is redelivered, reads k+1 and goes on. A delivery that finds the checkpoint of its
k > 0 gone was overtaken (the chain went on or ended) and stops too. Each slice is idempotent (its fills
and carries rewrite the same entries). Once the report is stored (or the refresh failed: an AppError
ends the task, and its generation) the book is marked ended (a later claim loses) and every checkpoint
of the generation is deleted; a loser whose claim finds the book ended, or past k+1, deletes the
checkpoint it wrote (no one will read it). The ended book expires BOOK_KEPT_SECONDS later (the turns
table's TTL): by then no copy of the task's message can come (SQS keeps one at most 14 days).
A delivery that finds this generation's report (or a later one) stored walks nothing."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable
from typing import Any

from chalicelib.domain.clock import now_iso
from chalicelib.domain.errors import AppError, StageError
from chalicelib.domain.types import Task
from chalicelib.operations.cost import (
    REFRESH_USAGE_CARRIES,
    REFRESH_WORKFLOW_FILLS,
    CostWalk,
    advance_cost,
    cost_of,
    kb_cost_report,
)
from chalicelib.operations.kb_reports import COST, GENERATION, REPORT, STATS, save_refreshed
from chalicelib.operations.stats import StatsWalk, advance_stats, kb_stats_report, stats_of
from chalicelib.ports import Dependencies
from chalicelib.tasks.reembed import AnotherDeliveryCarriesOn, RetryTaskLater

#: how long a delivery walks before it keeps a checkpoint and comes back (the lifecycle runner's slice)
SLICE_SECONDS = 30.0
#: an ended refresh's book is kept past the last delivery of its message that can come (SQS's 14 days)
BOOK_KEPT_SECONDS = 15 * 24 * 3600
#: the checkpoints' key prefix
CHECKPOINTS = "reports"


#: the refresh's book's keys: the next slice's number, and whether the report was stored (or none will be)
SLICE, ENDED = "slice", "ended"


def checkpoint_prefix(task: Task) -> str:
    """Where the refresh's checkpoints are: one object a slice."""
    return f"{CHECKPOINTS}/{task.kb_id}/{task.params[REPORT]}/{int(task.params[GENERATION])}/"


def checkpoint_key(task: Task, slice_number: int) -> str:
    """The walk as it was when slice `slice_number` began (the previous slice's end)."""
    return f"{checkpoint_prefix(task)}{slice_number}.json.gz"


def book_name(task: Task) -> str:
    """The refresh's item in the turn book: which slice is next (`SLICE`), whether it ended (`ENDED`)."""
    return f"kb-report#{task.id}"


def whole_report(deps: Dependencies, kb_id: str, kind: str) -> dict[str, Any]:
    """The report of every entry (and row) in one go: what a request computes when the knowledge base is
    small (and what a refresh's slices add up to)."""
    if kind == STATS:
        return kb_stats_report(deps, kb_id, fills=REFRESH_WORKFLOW_FILLS, carries=REFRESH_USAGE_CARRIES)
    _new_walk(kb_id, kind)  # an unknown kind is refused as a refresh refuses it
    return kb_cost_report(deps, kb_id, fills=REFRESH_WORKFLOW_FILLS, carries=REFRESH_USAGE_CARRIES)


def refresh_report(deps: Dependencies, task: Task) -> None:
    """One slice of the task's refresh: from the book's slice and its checkpoint (or the first entry), for
    SLICE_SECONDS, then the report stored (unless a newer one is) or the next checkpoint kept, the slice
    claimed and RetryTaskLater (the rest in the next delivery); AnotherDeliveryCarriesOn when another
    delivery of the task claimed it first. A knowledge base gone meanwhile has no report."""
    if deps.kbs.get(task.kb_id) is None:
        _end(deps, task)
        return
    kind = str(task.params[REPORT])
    stored = deps.usage.report(task.kb_id, kind)
    if stored is not None and stored.generation >= int(task.params[GENERATION]):
        _end(deps, task)  # stored by a delivery of this refresh (or a later one): nothing to walk
        return
    number, ended = deps.turns.change(
        book_name(task), lambda book: ((int(book.get(SLICE, 0)), bool(book.get(ENDED))), book)
    )
    if ended:
        _end(deps, task)
        return
    resumed = _resume(deps, task, number, kind)
    if resumed is None:  # the slice's checkpoint is gone: another delivery claimed it (or ended the walk)
        raise AnotherDeliveryCarriesOn(f"slice {number} of {task.id} was taken on by another delivery")
    as_of, walk = resumed
    try:
        _walk_slice(deps, task, number, as_of, walk)
    except (AppError, StageError):  # what fails the task (lifecycle.run): its generation ends here
        _end(deps, task)
        raise


def _walk_slice(deps: Dependencies, task: Task, number: int, as_of: str, walk: CostWalk | StatsWalk) -> None:
    deadline = time.monotonic() + SLICE_SECONDS
    if not _advance(deps, walk, lambda: time.monotonic() >= deadline):
        state = {"as_of": as_of, "kind": task.params[REPORT], "walk": walk.to_json()}
        written = checkpoint_key(task, number + 1)
        deps.files.save(written, gzip.compress(json.dumps(state).encode()), "application/gzip")
        claimed, now, ended = deps.turns.change(book_name(task), lambda book: _claim(book, number))
        if not claimed:
            if ended or now > number + 1:  # the chain is past what this one wrote: no one reads it
                deps.files.delete(deps.files.url_for(written))
            raise AnotherDeliveryCarriesOn(f"slice {number} of {task.id} was claimed by another delivery")
        if number:
            deps.files.delete(deps.files.url_for(checkpoint_key(task, number)))
        raise RetryTaskLater("the report's walk goes on in the next delivery", 0)
    save_refreshed(deps, task, as_of, _report(deps, walk))
    _end(deps, task)


def _claim(book: dict[str, Any], number: int) -> tuple[tuple[bool, int, bool], dict[str, Any]]:
    """Slice `number` -> the next in the book, unless another delivery moved it on (or the walk ended):
    ((claimed, the book's slice, ended), the book)."""
    current, ended = int(book.get(SLICE, 0)), bool(book.get(ENDED))
    if current != number or ended:
        return (False, current, ended), book
    return (True, number + 1, False), {SLICE: number + 1}


def _end(deps: Dependencies, task: Task) -> None:
    """The walk is over (the report stored, the refresh failed, the knowledge base gone): the book says so
    (a delivery still walking loses its claim and deletes what it wrote), then every checkpoint of the
    generation goes (one left by a delivery that died after its claim too). The book expires
    BOOK_KEPT_SECONDS later."""
    deps.turns.change(
        book_name(task),
        lambda book: (None, {SLICE: int(book.get(SLICE, 0)), ENDED: True}),
        expires_at=int(time.time()) + BOOK_KEPT_SECONDS,
    )
    while keys := deps.files.list_keys(checkpoint_prefix(task), 1000):
        for key in keys:
            deps.files.delete(deps.files.url_for(key))


def _resume(
    deps: Dependencies, task: Task, number: int, kind: str
) -> tuple[str, CostWalk | StatsWalk] | None:
    """(when the walk began, the walk) from slice `number`'s checkpoint; a new walk, beginning now, for
    slice 0; None when the checkpoint of a later slice is gone (another delivery took the walk on)."""
    if number == 0:
        as_of = now_iso()  # before the read: the report holds what was there then, and nothing written since
        return as_of, _new_walk(task.kb_id, kind, until=as_of)
    try:
        state = json.loads(gzip.decompress(deps.files.read(deps.files.url_for(checkpoint_key(task, number)))))
    except FileNotFoundError:
        return None
    walk = CostWalk.from_json(state["walk"]) if kind == COST else StatsWalk.from_json(state["walk"])
    return str(state["as_of"]), walk


def _new_walk(kb_id: str, kind: str, *, until: str = "") -> CostWalk | StatsWalk:
    """A walk from the first entry, leaving out the entries written after `until` (CostWalk.until)."""
    if kind == COST:
        return CostWalk(kb_id, until=until)
    if kind == STATS:
        walk = StatsWalk(kb_id)
        walk.cost.until = until  # (its cost's walk is made with it)
        return walk
    raise AppError(f"no such report: {kind!r}", code="unknown_report")


def _advance(deps: Dependencies, walk: CostWalk | StatsWalk, stop: Callable[[], bool]) -> bool:
    fills, carries = REFRESH_WORKFLOW_FILLS, REFRESH_USAGE_CARRIES
    if isinstance(walk, CostWalk):
        return advance_cost(deps, walk, fills=fills, carries=carries, stop=stop)
    return advance_stats(deps, walk, fills=fills, carries=carries, stop=stop)


def _report(deps: Dependencies, walk: CostWalk | StatsWalk) -> dict[str, Any]:
    return cost_of(deps, walk) if isinstance(walk, CostWalk) else stats_of(deps, walk)
