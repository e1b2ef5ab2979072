"""The `kb_report` task's work: a big knowledge base's cost or stats report, walked in the lifecycle
function with the functions a request uses within its bound (so both agree by construction), then stored
(operations/kb_reports.py).

A walk of a big knowledge base does not fit one delivery (the lifecycle function's 300 s and 512 MB): a
delivery walks for one slice (SLICE_SECONDS) and, unless it is done, keeps where it got to (the usage
Query's cursor, the row position, the sums and each document's few numbers: `CostWalk`, `StatsWalk`) in
an object under `reports/<kb_id>/<kind>/<generation>.json.gz`, then the task comes back in a new delivery
(RetryTaskLater, no delay: the lifecycle runner saves it and queues it again), which goes on from there.
A delivery that dies mid-slice is redelivered and goes on from the last checkpoint: each slice is
idempotent (its fills and carries rewrite the same entries). The checkpoint is deleted once the report is
stored; a delivery that finds this generation's report (or a later one) stored walks nothing."""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import Callable
from typing import Any

from chalicelib.domain.clock import now_iso
from chalicelib.domain.errors import AppError
from chalicelib.domain.types import Task
from chalicelib.operations.cost import (
    REFRESH_USAGE_CARRIES,
    REFRESH_WORKFLOW_FILLS,
    CostWalk,
    advance_cost,
    cost_of,
)
from chalicelib.operations.kb_reports import COST, GENERATION, REPORT, STATS, save_refreshed
from chalicelib.operations.stats import StatsWalk, advance_stats, stats_of
from chalicelib.ports import Dependencies
from chalicelib.tasks.reembed import RetryTaskLater

#: how long a delivery walks before it keeps a checkpoint and comes back (the lifecycle runner's slice)
SLICE_SECONDS = 30.0
#: the checkpoints' key prefix
CHECKPOINTS = "reports"


def checkpoint_key(task: Task) -> str:
    return f"{CHECKPOINTS}/{task.kb_id}/{task.params[REPORT]}/{int(task.params[GENERATION])}.json.gz"


def whole_report(deps: Dependencies, kb_id: str, kind: str) -> dict[str, Any]:
    """The report of every entry (and row) in one go: what a request computes when the knowledge base is
    small (and what a refresh's slices add up to)."""
    walk = _new_walk(kb_id, kind)
    _advance(deps, walk, lambda: False)
    return _report(deps, walk)


def refresh_report(deps: Dependencies, task: Task) -> None:
    """One slice of the task's refresh: from its checkpoint (or the first entry), for SLICE_SECONDS, then
    the report stored (unless a newer one is) or the checkpoint kept and RetryTaskLater (the rest in the
    next delivery). A knowledge base gone meanwhile has no report."""
    url = deps.files.url_for(checkpoint_key(task))
    if deps.kbs.get(task.kb_id) is None:
        deps.files.delete(url)
        return
    kind = str(task.params[REPORT])
    stored = deps.usage.report(task.kb_id, kind)
    if stored is not None and stored.generation >= int(task.params[GENERATION]):
        deps.files.delete(url)  # stored by a delivery of this refresh (or a later one): nothing to walk
        return
    as_of, walk = _resume(deps, url, task.kb_id, kind)
    deadline = time.monotonic() + SLICE_SECONDS
    if not _advance(deps, walk, lambda: time.monotonic() >= deadline):
        state = {"as_of": as_of, "kind": kind, "walk": walk.to_json()}
        deps.files.save(checkpoint_key(task), gzip.compress(json.dumps(state).encode()), "application/gzip")
        raise RetryTaskLater("the report's walk goes on in the next delivery", 0)
    save_refreshed(deps, task, as_of, _report(deps, walk))
    deps.files.delete(url)


def _resume(deps: Dependencies, url: str, kb_id: str, kind: str) -> tuple[str, CostWalk | StatsWalk]:
    """(when the walk began, the walk) from the checkpoint; a new walk, beginning now, without one."""
    try:
        state = json.loads(gzip.decompress(deps.files.read(url)))
    except FileNotFoundError:
        return now_iso(), _new_walk(kb_id, kind)  # before the read: the report holds what was there then
    walk = CostWalk.from_json(state["walk"]) if kind == COST else StatsWalk.from_json(state["walk"])
    return str(state["as_of"]), walk


def _new_walk(kb_id: str, kind: str) -> CostWalk | StatsWalk:
    if kind == COST:
        return CostWalk(kb_id)
    if kind == STATS:
        return StatsWalk(kb_id)
    raise AppError(f"no such report: {kind!r}", code="unknown_report")


def _advance(deps: Dependencies, walk: CostWalk | StatsWalk, stop: Callable[[], bool]) -> bool:
    fills, carries = REFRESH_WORKFLOW_FILLS, REFRESH_USAGE_CARRIES
    if isinstance(walk, CostWalk):
        return advance_cost(deps, walk, fills=fills, carries=carries, stop=stop)
    return advance_stats(deps, walk, fills=fills, carries=carries, stop=stop)


def _report(deps: Dependencies, walk: CostWalk | StatsWalk) -> dict[str, Any]:
    return cost_of(deps, walk) if isinstance(walk, CostWalk) else stats_of(deps, walk)
