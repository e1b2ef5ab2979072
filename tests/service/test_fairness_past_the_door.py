"""A document's place in its tenant's pipeline is a lease taken at the docreader; the stages after it
(chunking, embedding) keep it: a big document whose chunking and embedding outlast the lease lost its place
while still in the pipeline, another document of the tenant took it and the cap was exceeded. Each later
message renews the lease once it is within half a lease of expiring (one conditional write, none
otherwise), and a document whose lapsed place was struck and taken goes on and takes its place back, over
the cap if need be, so the tenant's next document waits (services/fairness.py's docstring)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.door import Place
from chalicelib.domain.types import Knowledge, KnowledgeBase, Stage, StageMessage
from chalicelib.services.stage_queue import enqueue

from .conftest import MAIN_STAGES, stage_handler, upload
from .test_fairness_lease import Clock
from .test_page_range_claims import CountingOcr, fan_out

LEASE = 1800


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    return Clock(monkeypatch)


@pytest.fixture(autouse=True)
def one_place(deps: Services) -> None:
    deps.settings = replace(deps.settings, tenant_pipeline_cap=1, pipeline_lease_seconds=LEASE)


@pytest.fixture
def door_writes(deps: Services, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple[Any, ...]]]:
    """Every write to the tenants' pipeline doors, in order."""
    writes: list[tuple[str, tuple[Any, ...]]] = []
    for name in (
        "renew_pipeline_place",
        "take_pipeline_place",
        "add_pipeline_waiter",
        "strike_pipeline_entries",
    ):
        real: Callable[..., Any] = getattr(deps.tenants, name)

        def spy(*args: Any, _name: str = name, _real: Callable[..., Any] = real) -> Any:
            writes.append((_name, args))
            return _real(*args)

        monkeypatch.setattr(deps.tenants, name, spy)
    return writes


def deliver_one(deps: Services, queue: MemoryTaskQueue, stage: str, knowledge: Knowledge) -> None:
    """Delivers the waiting message of `stage` that belongs to `knowledge`, and only that one."""
    with queue._lock:
        [message] = [m for m in queue._waiting[stage] if m.json()["knowledge_id"] == knowledge.id]
        queue._waiting[stage].remove(message)
    response = stage_handler(stage)(deps, {"Records": [queue._record(message)]}, None)
    assert response["batchItemFailures"] == []


def pump(deps: Services, queue: MemoryTaskQueue) -> None:
    """Delivers every due message of the main stages, one at a time, until none is due."""
    for _ in range(100):
        due = [s for s in MAIN_STAGES if any(not m.delay_seconds for m in queue.waiting(s))]
        if not due:
            return
        event = queue.receive(due[0], max_messages=1, due_only=True)
        queue.settle(event, stage_handler(due[0])(deps, event, None))
    raise AssertionError("queues still busy")


def expiry(deps: Services, knowledge: Knowledge) -> float:
    place = deps.tenants.pipeline_door(knowledge.tenant_id).place_of(knowledge.id)
    assert place is not None
    return place.expires


def test_a_chunking_message_renews_a_lease_about_to_lapse(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, clock: Clock, door_writes: list[Any]
) -> None:
    big = upload(deps, kb, "big.md", b"# Big\n\nA long one.\n")
    deliver_one(deps, queue, "docreader", big)
    clock.skip(LEASE * 0.6)  # the parse took long: 40% of the lease left
    door_writes.clear()

    deliver_one(deps, queue, "chunking", big)

    assert [name for name, _ in door_writes] == ["renew_pipeline_place"]  # one write
    assert expiry(deps, big) >= clock.time() + LEASE * 0.9
    assert [p.knowledge_id for p in deps.tenants.pipeline_door(kb.tenant_id).live(clock.time())] == [big.id]


def test_a_lease_far_from_lapsing_costs_no_write_and_the_embedding_renews_it_once_it_nears(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, clock: Clock, door_writes: list[Any]
) -> None:
    big = upload(deps, kb, "big.md", b"# Big\n\nA long one.\n")
    deliver_one(deps, queue, "docreader", big)
    before = deps.tenants.pipeline_door(kb.tenant_id).places
    clock.skip(LEASE * 0.4)  # more than half the lease left
    door_writes.clear()

    deliver_one(deps, queue, "chunking", big)

    assert door_writes == []
    assert deps.tenants.pipeline_door(kb.tenant_id).places == before
    clock.skip(LEASE * 0.3)  # 30% of the lease left

    deliver_one(deps, queue, "embedding", big)  # indexes it (one slice): renewed first, then given back

    assert [name for name, _ in door_writes][:1] == ["renew_pipeline_place"]
    [(_, held, renewed)] = [args for name, args in door_writes if name == "renew_pipeline_place"]
    assert float(renewed.split("|")[1]) >= clock.time() + LEASE * 0.9 > float(held.split("|")[1])
    assert deps.tenants.pipeline_door(kb.tenant_id).places == frozenset()  # indexed: given back


def test_a_document_whose_lapsed_place_was_taken_goes_on_and_is_counted_again(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, clock: Clock
) -> None:
    big = upload(deps, kb, "big.md", b"# Big\n\nA long one.\n")
    deliver_one(deps, queue, "docreader", big)  # its chunking message is delayed past the lease
    clock.skip(LEASE + 60)
    other = upload(deps, kb, "other.md", b"# Other\n\nThe tide.\n")
    deliver_one(deps, queue, "docreader", other)  # big's lapsed place is struck: the other takes it
    door = deps.tenants.pipeline_door(kb.tenant_id)
    assert door.place_of(big.id) is None and door.place_of(other.id) is not None

    # big's later message is past the door: neither dropped nor held back, it takes its place back
    deliver_one(deps, queue, "chunking", big)

    assert [m.json()["knowledge_id"] for m in queue.waiting("embedding")] == [big.id]
    door = deps.tenants.pipeline_door(kb.tenant_id)
    live = sorted(p.knowledge_id for p in door.live(clock.time()))
    assert live == sorted([big.id, other.id])  # counted, over the cap of 1, until it leaves

    # so the tenant's next document waits, and everything still goes through: no deadlock
    late = upload(deps, kb, "late.md", b"# Late\n\nThe moon.\n")
    deliver_one(deps, queue, "docreader", late)
    assert deps.tenants.pipeline_door(kb.tenant_id).entries_of(late.id)
    assert deps.knowledge.get(late.id).parse_status.value == "pending"  # type: ignore[union-attr]
    pump(deps, queue)  # the backstops' time never comes: only wakes move the late one
    for row in (big, other, late):
        assert deps.knowledge.get(row.id).enable_status.value == "enabled", row.file_name  # type: ignore[union-attr]
    door = deps.tenants.pipeline_door(kb.tenant_id)
    assert door.places == frozenset() and door.waiters == frozenset()


def test_a_document_past_the_door_goes_on_uncounted_when_the_row_lists_twice_the_cap(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, clock: Clock
) -> None:
    big = upload(deps, kb, "big.md", b"# Big\n\nA long one.\n")
    deliver_one(deps, queue, "docreader", big)
    clock.skip(LEASE + 60)
    tenants = deps.tenants
    door = tenants.pipeline_door(kb.tenant_id)
    tenants.strike_pipeline_entries(kb.tenant_id, door.places, frozenset())
    for name in ("a", "b"):  # two places listed (twice the cap of 1), both live
        assert tenants.take_pipeline_place(
            kb.tenant_id, f"{name}|{int(clock.time()) + LEASE}|", 9, frozenset(), ""
        )

    deliver_one(deps, queue, "chunking", big)

    assert deps.tenants.pipeline_door(kb.tenant_id).place_of(big.id) is None
    assert [m.json()["knowledge_id"] for m in queue.waiting("embedding")] == [big.id]  # not dropped


def test_a_docreader_message_whose_lapsed_place_was_struck_is_not_dropped(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, clock: Clock
) -> None:
    big = upload(deps, kb, "big.md", b"# Big\n\nA long one.\n")
    with queue._lock:  # its first message is the one a wake replaced: a woken waiter's, ticket t2
        queue._waiting["docreader"].clear()
    woken = Place(big.id, clock.time() + LEASE, "t2")
    assert deps.tenants.take_pipeline_place(kb.tenant_id, woken.member, 1, frozenset(), "")
    # its worker is killed mid-parse; the queue brings the message back only after its visibility
    # timeout (90 min), past the lease, and the lapsed place was struck for another document meanwhile
    clock.skip(LEASE + 60)
    other = upload(deps, kb, "other.md", b"# Other\n\nThe tide.\n")
    deliver_one(deps, queue, "docreader", other)
    assert deps.tenants.pipeline_door(kb.tenant_id).place_of(big.id) is None
    enqueue(deps, Stage.DOCREADER, StageMessage(kb.tenant_id, big.id, big.attempt, door_ticket="t2"))

    deliver_one(deps, queue, "docreader", big)

    # no other turn of it is listed, so it is no stale copy: it waits for a place (the other holds it)
    assert deps.tenants.pipeline_door(kb.tenant_id).entries_of(big.id)
    pump(deps, queue)
    for row in (big, other):
        assert deps.knowledge.get(row.id).enable_status.value == "enabled", row.file_name  # type: ignore[union-attr]


def test_a_long_scans_page_ranges_keep_its_place(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, clock: Clock, door_writes: list[Any]
) -> None:
    knowledge_id = fan_out(deps, kb, CountingOcr())  # the docreader took the place and fanned out
    scan = deps.knowledge.get(knowledge_id)
    assert scan is not None
    clock.skip(LEASE * 0.6)  # OCR is slow: 40% of the lease left when a range is taken
    door_writes.clear()

    event = queue.receive("docreader", 1)
    queue.settle(event, stage_handler("docreader")(deps, event, None))

    assert [name for name, _ in door_writes] == ["renew_pipeline_place"]
    assert expiry(deps, scan) >= clock.time() + LEASE * 0.9
