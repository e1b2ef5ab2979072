"""Issue 27: a document waiting for one of its tenant's places in the pipeline is woken when a place is given
back, instead of looking again every `turn_wait_seconds`. Its message comes back only after the long
backstop delay; the place given back sends a message with a new ticket at once, and whichever of the two
lands first takes the place while the other is dropped. Delayed messages are held back here (`due_only`),
as if their time had not come: a test that ends with documents stuck would mean only the backstop moved
them."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain import door as doors
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus

from .conftest import MAIN_STAGES, stage_handler, upload

CAP = 2


@pytest.fixture(autouse=True)
def capped(deps: Services) -> None:
    deps.settings = replace(deps.settings, tenant_pipeline_cap=CAP, turn_backstop_seconds=600)


def pump(deps: Services, queue: MemoryTaskQueue, runs: Counter[str], *, max_batches: int = 500) -> None:
    """Delivers every due message of the main stages, one at a time, until none is due."""
    for _ in range(max_batches):
        due = [s for s in MAIN_STAGES if any(not m.delay_seconds for m in queue.waiting(s))]
        if not due:
            return
        event = queue.receive(due[0], max_messages=1, due_only=True)
        runs[due[0]] += len(event["Records"])
        queue.settle(event, stage_handler(due[0])(deps, event, None))
    raise AssertionError("queues still busy")


def indexed(deps: Services, rows: list[Knowledge]) -> int:
    """How many are embedded and indexed (enabled: searchable)."""
    return sum(1 for r in rows if deps.knowledge.get(r.id).enable_status.value == "enabled")  # type: ignore[union-attr]


def first_in_second_waiting(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> tuple[Knowledge, Knowledge]:
    """One place for the tenant and two documents: the docreader lets the first in, the second waits."""
    deps.settings = replace(deps.settings, tenant_pipeline_cap=1)
    first = upload(deps, kb, "first.md", b"# First\n\nThe harbour.\n")
    second = upload(deps, kb, "second.md", b"# Second\n\nThe lighthouse.\n")
    event = queue.receive("docreader", max_messages=2, due_only=True)
    queue.settle(event, stage_handler("docreader")(deps, event, None))
    return first, second


def test_a_backlog_over_the_cap_goes_through_on_wakes_not_on_repeated_looks(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    rows = [upload(deps, kb, f"n{n}.md", f"# Note {n}\n\nTide entry {n}.\n".encode()) for n in range(8)]
    runs: Counter[str] = Counter()
    pump(deps, queue, runs)
    assert indexed(deps, rows) == 8, "every document went through without waiting for a backstop"
    # each document is looked at once, plus once more if it found every place taken: never again and again
    assert runs["docreader"] <= 8 + (8 - CAP), runs
    door = deps.tenants.pipeline_door(kb.tenant_id)
    assert door.places == frozenset() and door.waiters == frozenset()  # every place given back, no one waits
    # the backstops are still on the queue; when their time comes they find their tickets gone: dropped
    backstops = queue.waiting("docreader")
    assert len(backstops) == 8 - CAP and all(m.delay_seconds == 600 for m in backstops)
    before = len(queue.sent)
    for _ in backstops:
        event = queue.receive("docreader", max_messages=1)
        queue.settle(event, stage_handler("docreader")(deps, event, None))
    assert len(queue.sent) == before and not queue.waiting("chunking")  # nothing parsed twice
    assert deps.tenants.pipeline_door(kb.tenant_id).places == frozenset()  # and no place taken by them


def test_a_waiter_is_woken_when_a_place_is_given_back(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    runs: Counter[str] = Counter()
    first, second = first_in_second_waiting(deps, kb, queue)  # first in, second turned away
    door = deps.tenants.pipeline_door(kb.tenant_id)
    assert [p.knowledge_id for p in door.live(0)] == [first.id]
    assert [w.knowledge_id for w in map(doors.Waiter.parse, door.waiters)] == [second.id]
    assert [m.delay_seconds for m in queue.waiting("docreader")] == [600]  # only the backstop: no busy look
    pump(deps, queue, runs)  # the first is chunked and indexed; giving its place back wakes the second
    assert runs["docreader"] == 1
    assert indexed(deps, [first, second]) == 2


def test_a_missed_wake_costs_the_backstop_not_the_document(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    first, second = first_in_second_waiting(deps, kb, queue)
    for stage in ("chunking", "embedding"):
        event = queue.receive(stage, due_only=True)
        queue.settle(event, stage_handler(stage)(deps, event, None))
    woken = [m for m in queue.waiting("docreader") if not m.delay_seconds]
    assert len(woken) == 1
    queue.purge("docreader")  # the wake is lost ...
    for message in [m for m in queue.sent if m.queue == "docreader" and m.delay_seconds == 600]:
        event = {"Records": [queue._record(message)]}  # ... and the backstop comes when its time is up
        queue.settle(event, stage_handler("docreader")(deps, event, None))
    assert deps.knowledge.get(second.id).parse_status == ParseStatus.PROCESSING  # type: ignore[union-attr]
    assert queue.waiting("chunking")
    assert indexed(deps, [first]) == 1


def test_the_backstop_after_a_wake_is_dropped_and_a_redelivered_wake_goes_on(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    _, second = first_in_second_waiting(deps, kb, queue)
    for stage in ("chunking", "embedding"):
        event = queue.receive(stage, due_only=True)
        queue.settle(event, stage_handler(stage)(deps, event, None))
    wake = next(m for m in queue.waiting("docreader") if not m.delay_seconds)
    backstop = next(m for m in queue.waiting("docreader") if m.delay_seconds)
    # the wake delivered twice (at least once: the first run may have died half way), then the backstop
    for message in (wake, wake, backstop):
        event = {"Records": [queue._record(message)]}
        queue.settle(event, stage_handler("docreader")(deps, event, None))
    assert [m.json()["knowledge_id"] for m in queue.waiting("chunking")] == [second.id, second.id]  # not 3
    door = deps.tenants.pipeline_door(kb.tenant_id)
    assert [p.knowledge_id for p in door.live(0)] == [second.id] and door.waiters == frozenset()


def test_a_waiter_s_row_says_it_waits_from_now_not_that_it_retries_after_the_backstop(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """The backstop's delay is not a retry time: `follow` and the queue statistics read `queued_at` as when
    the message can be received, and a waiter showed 'docreader retry in 10m' for a wake due any moment."""
    from datetime import UTC, datetime

    from chalicelib.domain.clock import from_iso

    _, second = first_in_second_waiting(deps, kb, queue)  # first in, second turned away
    row = deps.knowledge.get(second.id)
    assert row is not None and row.queued_stage == "docreader"
    assert (from_iso(row.queued_at) - datetime.now(UTC)).total_seconds() <= 1
    assert [m.delay_seconds for m in queue.waiting("docreader")] == [600]  # the backstop is still there


def test_a_row_failed_by_housekeeping_gives_its_place_back_and_wakes_the_waiter(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """The first document's chunking message is lost while it holds the only place: housekeeping fails it
    long before its lease would free the place, and the waiter goes in at once."""
    from datetime import UTC, datetime, timedelta

    from chalicelib.stages import housekeeping

    first, second = first_in_second_waiting(deps, kb, queue)  # first in, second waits
    queue.purge("chunking")  # the first's next message is lost
    report = housekeeping.sweep(deps, datetime.now(UTC) + timedelta(hours=3))
    assert report.recovered == [first.id]
    door = deps.tenants.pipeline_door(kb.tenant_id)
    assert list(door.live(0)) == []
    woken = [m.json()["knowledge_id"] for m in queue.waiting("docreader") if not m.delay_seconds]
    assert woken == [second.id]
    pump(deps, queue, Counter())
    assert indexed(deps, [second]) == 1


def test_a_redelivered_message_is_not_served_twice_at_the_turn_book(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """SQS delivers a docreader message again (a duplicate, a retried try): the document holds its place
    already, so the tenant's turn book counts it served once, or its later documents would wait behind
    other tenants' for documents it never got."""
    from chalicelib.services.fairness import DOOR

    created = upload(deps, kb)
    body = queue.waiting("docreader")[0].body
    handler = stage_handler("docreader")
    event = queue.receive("docreader")
    queue.settle(event, handler(deps, event, None))
    for receive_count in (1, 2):
        handler(deps, queue.event("docreader", [body], receive_count=receive_count), None)
    book = deps.turns.change(DOOR, lambda b: (b, b))
    assert book[created.tenant_id]["served"] == 1


def test_an_upload_goes_in_when_the_door_book_is_too_busy_to_note_it(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """A burst of uploads keeps the one turn book changing: noting the tenant as waiting is a head start
    only (its knock notes it too), so the upload is queued, not failed with enqueue_failed."""
    from chalicelib.ports import TurnBookBusy

    real = deps.turns

    class BusyAtUpload:
        def change(self, stage: str, change: object) -> object:
            raise TurnBookBusy(f"the turn book of {stage} kept changing under 20 tries")

    deps.turns = BusyAtUpload()  # type: ignore[assignment]
    created = upload(deps, kb)
    stored = deps.knowledge.get(created.id)
    assert stored is not None and stored.parse_status == ParseStatus.PENDING and not stored.error_code
    assert [m for m in queue.waiting("docreader")]
    deps.turns = real
    pump(deps, queue, Counter())
    assert indexed(deps, [created]) == 1
