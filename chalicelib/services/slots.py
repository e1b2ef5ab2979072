"""A counted subtask's slot: released once by whoever answers its task token, and the row promoted to
`completed` by whoever releases the last one, before the answer is sent.

The state machine used to do both (a ReleaseSlot state per subtask and a Promote state per document:
transitions Step Functions bills); it now releases a slot only for a subtask that failed or timed out
(RunSubtask's Catch), followed by the same guarded promotion. Both sides make the same conditional writes,
keyed by the subtask id, so the count stays exact whoever gets there first:

    worker A   work durable ─ release (2→1) ─────────────────────────────── SendTaskSuccess
    worker B   work durable ─ release (1→0) ─ promote (finalizing, 0, N) ─ SendTaskSuccess
    B again    (redelivered) release: already counted ─ promote: no-op ─ completed: announced again
               (the same event id: B may have died before it announced) ─── answer (token closed)
    timeout    machine release: already counted, or (1→0) ─ promote
    cancel     row cancelled ─ release and promote: conditions fail, nothing changes
"""

from __future__ import annotations

from chalicelib.domain.events import EventType
from chalicelib.domain.types import ParseStatus
from chalicelib.ports import Dependencies
from chalicelib.services.events import completed_again, knowledge_changed_by_id


def settle_slot(deps: Dependencies, knowledge_id: str, attempt: int, subtask_id: str) -> None:
    remaining = deps.knowledge.release_slot(knowledge_id, attempt, subtask_id)
    # None: released before (a redelivery whose first run may have died before it promoted) or the row
    # moved on; the promotion's own condition decides.
    if remaining is not None and remaining > 0:
        return
    if deps.knowledge.promote(knowledge_id, attempt):
        knowledge_changed_by_id(
            deps,
            knowledge_id,
            EventType.KNOWLEDGE_COMPLETED,
            status=ParseStatus.COMPLETED.value,
            attempt=attempt,
        )
        return
    completed_again(deps, deps.knowledge.get(knowledge_id), attempt)  # promoted before, maybe by this subtask
