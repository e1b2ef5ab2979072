"""Housekeeping audit: a row the sweep fails is announced right after the write that decided it, whatever
follows (the give-back of its pipeline place may fail)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, ParseStatus
from chalicelib.ports import ServiceUnreachable
from chalicelib.stages import housekeeping

from . import conftest

LATER = timedelta(hours=3)  # past the 2h10m threshold


def test_a_row_failed_by_the_sweep_is_announced_even_when_its_place_cannot_be_given_back(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failure is announced right after the write that decided it: a tenants table that does not answer
    the give-back (the place frees itself later) must not cost the subscribers the event, which no later
    sweep would send (the row is no longer in flight)."""
    from chalicelib.adapters.memory.events import MemoryEventPublisher

    stuck = conftest.upload(deps, kb)
    queue.purge("docreader")

    def unanswered(tenant_id: str) -> object:
        raise ServiceUnreachable("the tenants table did not answer")

    monkeypatch.setattr(deps.tenants, "pipeline_door", unanswered)
    with pytest.raises(ServiceUnreachable):
        housekeeping.sweep(deps, datetime.now(UTC) + LATER)
    row = deps.knowledge.get(stuck.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED
    assert isinstance(deps.events, MemoryEventPublisher)
    assert deps.events.types_of(stuck.id)[-1] == "Knowledge Failed"
