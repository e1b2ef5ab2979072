"""A cancel or delete landing while a stage past the door keeps its place (audit q2): the place the cancel gave
back must stay given back, the stage stops quietly, and the first waiter's backstop gives back a place a
document no longer in the pipeline still holds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain import door as doors
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus
from chalicelib.operations.knowledge_changes import cancel, delete_knowledge
from chalicelib.stages import chunking, embedding

from .conftest import deliver, upload
from .test_fairness_past_the_door import deliver_one, pump
from .test_move_clone import run_lifecycle

SECOND = b"# Two\n\nAnother document of the tenant, alone in the pipeline.\n"


@pytest.fixture(autouse=True)
def one_place(deps: Services) -> None:
    deps.settings = replace(deps.settings, tenant_pipeline_cap=1)


def landing_before_keep_place(
    monkeypatch: pytest.MonkeyPatch, module: Any, change: Callable[[Knowledge], None]
) -> None:
    """`change` lands after the stage read its row live and before it keeps the document's place."""
    real_keep = module.keep_place

    def changed_then_keep(deps: Services, knowledge: Knowledge) -> None:
        change(knowledge)
        real_keep(deps, knowledge)

    monkeypatch.setattr(module, "keep_place", changed_then_keep)


def next_document_goes(deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, first: Knowledge) -> None:
    second = upload(deps, kb, "two.md", SECOND)
    pump(deps, queue)
    assert deps.tenants.pipeline_door(kb.tenant_id).place_of(first.id) is None
    after = deps.knowledge.get(second.id)
    assert after is not None and after.processed_at is not None  # indexed: it got the place


@pytest.mark.parametrize("module", [chunking, embedding], ids=["chunking", "embedding"])
def test_a_cancel_landing_before_keep_place_leaves_the_place_given_back(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch, module: Any
) -> None:
    first = upload(deps, kb, "one.md")
    deliver_one(deps, queue, "docreader", first)
    if module is embedding:
        deliver_one(deps, queue, "chunking", first)
    landing_before_keep_place(monkeypatch, module, lambda k: cancel(deps, kb.tenant_id, k.id) and None)
    deliver_one(deps, queue, module.__name__.rsplit(".", 1)[-1], first)
    monkeypatch.undo()
    row = deps.knowledge.get(first.id)
    assert row is not None and row.parse_status == ParseStatus.CANCELLED
    next_document_goes(deps, kb, queue, first)


def test_a_delete_landing_before_keep_place_stops_chunking_quietly_and_gives_the_place_back(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = upload(deps, kb, "one.md")
    deliver_one(deps, queue, "docreader", first)

    def deleted(knowledge: Knowledge) -> None:
        delete_knowledge(deps, kb.tenant_id, knowledge.id)
        run_lifecycle(deps)  # the row and its parsed Markdown go
        assert deps.knowledge.get(knowledge.id) is None

    landing_before_keep_place(monkeypatch, chunking, deleted)
    response = deliver(deps, "chunking")
    monkeypatch.undo()
    assert response["batchItemFailures"] == []  # not retried: the row moved on
    assert not queue.waiting("chunking") and not queue.waiting("embedding")
    next_document_goes(deps, kb, queue, first)


def backstops_due(queue: MemoryTaskQueue) -> None:
    """The waiting documents' backstop messages come back (`turn_backstop_seconds` later)."""
    with queue._lock:
        for waiting in queue._waiting["docreader"]:
            waiting.delay_seconds = 0


def test_the_first_waiters_backstop_gives_back_a_place_held_by_a_document_no_longer_in_the_pipeline(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    first = upload(deps, kb, "one.md")
    deliver_one(deps, queue, "docreader", first)
    cancel(deps, kb.tenant_id, first.id)
    # a give-back lost (a crash between a cancel's status write and its give-back, an older worker's race)
    lease = doors.Place(first.id, 4_000_000_000.0).member
    assert deps.tenants.take_pipeline_place(kb.tenant_id, lease, 1, frozenset(), "")
    second = upload(deps, kb, "two.md", SECOND)
    pump(deps, queue)
    waiting = deps.knowledge.get(second.id)
    assert waiting is not None and waiting.parse_status == ParseStatus.PENDING  # kept out by the stray place

    backstops_due(queue)
    pump(deps, queue)

    assert deps.tenants.pipeline_door(kb.tenant_id).place_of(first.id) is None
    after = deps.knowledge.get(second.id)
    assert after is not None and after.processed_at is not None


def test_a_backstop_leaves_the_places_of_documents_in_the_pipeline(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    first = upload(deps, kb, "one.md")
    deliver_one(deps, queue, "docreader", first)
    second = upload(deps, kb, "two.md", SECOND)
    deliver_one(deps, queue, "docreader", second)  # waits for the place the first holds
    backstops_due(queue)
    deliver_one(deps, queue, "docreader", second)  # its backstop: waits again

    door = deps.tenants.pipeline_door(kb.tenant_id)
    assert door.place_of(first.id) is not None and door.place_of(second.id) is None
    assert [m.json()["knowledge_id"] for m in queue.waiting("docreader")] == [second.id]
