"""Fairness between tenants (spec row 43): one tenant's backlog must not hold everyone's documents first in,
first out. Two rules at the pipeline's door (the docreader), both kept in DynamoDB:

- whose turn it is (`domain/turns.py`): a document is let in unless another waiting tenant has been served
  less, so a tenant's one document goes ahead of another's backlog of hundreds, while a tenant alone is
  never held back;
- how many at once: every tenant has at most `tenant_pipeline_cap` documents between the docreader and the
  index. The places are leases in the tenant's row (one conditional write takes one), given back when the
  document is indexed, fails, is cancelled or deleted; a lease nobody gave back frees itself.

A document that may not come in yet is put back at the end of the docreader queue (`AwaitingTurn`: no try
spent, no throttle deferral counted).
"""

from __future__ import annotations

import time

from chalicelib.domain import turns
from chalicelib.domain.errors import AwaitingTurn
from chalicelib.ports import Dependencies

DOOR = "docreader"


def queued_at_door(deps: Dependencies, tenant_id: str) -> None:
    """A document of the tenant was put on the docreader queue: the tenant waits at the door."""
    ttl = deps.settings.turn_ttl_seconds
    deps.turns.change(DOOR, lambda book: (None, turns.queued(book, tenant_id, time.time(), ttl)))


def enter_pipeline(deps: Dependencies, tenant_id: str, knowledge_id: str) -> None:
    """Lets the document in, or raises AwaitingTurn."""
    cap = deps.settings.tenant_pipeline_cap
    wait = deps.settings.turn_wait_seconds
    if cap > 0 and not deps.tenants.acquire_pipeline_slot(
        tenant_id, knowledge_id, cap, time.time(), deps.settings.pipeline_lease_seconds
    ):
        raise AwaitingTurn(
            f"the tenant has {cap} documents in the pipeline: this one waits", delay_seconds=wait
        )
    ttl = deps.settings.turn_ttl_seconds
    if not deps.turns.change(DOOR, lambda book: turns.knock(book, tenant_id, time.time(), ttl)):
        leave_pipeline(deps, tenant_id, knowledge_id)
        raise AwaitingTurn(
            "another tenant's document goes first: this one waits its turn", delay_seconds=wait
        )


def leave_pipeline(deps: Dependencies, tenant_id: str, knowledge_id: str) -> None:
    if deps.settings.tenant_pipeline_cap > 0:
        deps.tenants.release_pipeline_slot(tenant_id, knowledge_id)
