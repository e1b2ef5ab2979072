"""Starting a document over at a new attempt when the one it was on can no longer finish by itself: its
stage message died in a DLQ (operator redrive), or the local stack restarted and lost every running
execution (housekeeping on start; its snapshot puts queued messages back, so an FAQ import, a lifecycle
task, wiki and webhook jobs go on by themselves, and a document's old-attempt stage messages are dropped as
stale).

The reset is one conditional write on (attempt, status), so two recoveries of the same dead attempt start
one new attempt, never two; one whose clearing of the dead attempt's data fails is failed as a restart that
could not be queued (`enqueue_failed`), which a redrive of the same letter restarts. The dead attempt's
parse outputs go when it was never indexed (nothing counts them), as a reparse's do. A new attempt begins
at the first stage: parsed Markdown, chunks and chunk ids are per attempt, so no later stage could start
without them (the embedding cache keeps re-embedding cheap).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from chalicelib.domain.clock import to_iso
from chalicelib.domain.types import IN_FLIGHT_STATUSES, Knowledge, ParseStatus
from chalicelib.observability import logger
from chalicelib.ports import Dependencies
from chalicelib.services.dispatch import enqueue_first_stage
from chalicelib.services.stored_size import remove_ended_attempt
from chalicelib.tasks import own_delete_under_way, redrive_delete
from chalicelib.tasks.reparse import clear_earlier_attempts


def restart(
    deps: Dependencies, knowledge: Knowledge, from_statuses: frozenset[ParseStatus]
) -> Knowledge | None:
    """`knowledge` at a new attempt with its first stage queued; None when the row is no longer at
    `knowledge.attempt` in one of `from_statuses` (someone else restarted it, or it moved on)."""
    # an attempt never indexed is restarted only while it still is not (its outputs then count for no one,
    # and no later write can count them: indexing needs the attempt), so they go, as a reparse's do; an
    # indexed one's stay, counted, until a later attempt is indexed
    unindexed = knowledge.processed_at is None
    fresh = deps.knowledge.restart_attempt(knowledge.id, knowledge.attempt, from_statuses, unindexed)
    if fresh is None:
        return None
    # what the dead attempt left; a failure fails the new attempt as not queued and is raised, so the letter
    # that asked for it (kept) still restarts it
    clear_earlier_attempts(deps, fresh, "redrive or reparse to retry")
    logger.info(
        "restarted a knowledge at a new attempt",
        extra={"knowledge_id": fresh.id, "from_attempt": knowledge.attempt, "attempt": fresh.attempt},
    )
    queued = enqueue_first_stage(deps, fresh)
    if unindexed:  # last: the new attempt is queued whatever the store answers here
        remove_ended_attempt(deps, fresh, knowledge.attempt)
    return queued


@dataclass
class StartupRecovery:
    restarted: list[str] = field(default_factory=list)
    deletes_redriven: list[str] = field(default_factory=list)


def recover_after_restart(deps: Dependencies, now: datetime | None = None) -> StartupRecovery:
    """After the local stack restarted from its snapshot, every row that was in flight has lost its
    execution (and any stage message queued after the last save): each starts over at a new attempt, and
    every delete under way is driven again unless its own task is still on its way (the snapshot put its
    message back). Only the local runtime calls this, once, before its pollers start."""
    # Nothing runs yet: every in-flight row is interrupted, however recently it was touched.
    cutoff = to_iso((now or datetime.now(UTC)) + timedelta(minutes=1))
    report = StartupRecovery()
    for knowledge in deps.knowledge.in_flight_older_than(cutoff):
        if restart(deps, knowledge, frozenset(IN_FLIGHT_STATUSES)) is not None:
            report.restarted.append(knowledge.id)
    for knowledge in deps.knowledge.deleting_older_than(cutoff):
        if own_delete_under_way(deps, knowledge):
            continue
        redrive_delete(deps, knowledge)
        report.deletes_redriven.append(knowledge.id)
    return report
