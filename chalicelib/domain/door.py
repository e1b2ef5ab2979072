"""A tenant's places in the ingest pipeline and the documents waiting for one (spec row 43, issue 27), pure.

A tenant has at most `cap` documents between the docreader and the index. A place is a lease,
"knowledge_id|expiry|ticket": one never given back (a crashed worker) frees itself. A document that finds
every place taken is written down as a waiter, "knowledge_id|attempt|since|ticket|woken_at", and its
message goes back on the queue with a long delay (the backstop); a place given back wakes the oldest
waiters at once, each with a message of a new ticket (a second waiter entry for the same document).

Every message of a waiting document carries a ticket, and only a ticket the row lists lets it in: the
first to come takes the place and strikes the document's waiter entries in the same conditional write, so
the others (a backstop whose wake came first, a duplicate delivery) find their ticket gone and are
dropped; a redelivery of the message that came in finds its own ticket on the place and goes on. A missed
wake costs the backstop's delay, never the document.

A holder's place is renewed whenever one of its messages comes back (a transcription's resume), so a long
job keeps it. A message whose own place lapsed anyway (a worker killed: the queue redelivers only after
its visibility timeout) is not stale while the door lists no other turn of the document: it takes a place
again, or waits for one, like a newcomer keeping its ticket. So a lapsed place is struck only when the
door needs it for another document, not at once: until then it tells its message apart from a stale one.

Past the door (chunking, embedding), a message renews its document's lease when it is within half a lease
of expiring, and takes a struck place back even over the cap (`places_past_the_door`): the document is in
the pipeline, so the row counts it, and the tenant's next document waits until the count is under the cap.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

#: a woken document's message is on its way this long; after that, a place given back wakes it again
WAKE_IN_FLIGHT_SECONDS = 60.0


#: the ticket of a place a fanned-out embedding's further chain of slices holds ("chain-2", …)
CHAIN = "chain-"


@dataclass(frozen=True)
class Place:
    knowledge_id: str
    expires: float
    ticket: str = ""

    @property
    def is_chain(self) -> bool:
        return self.ticket.startswith(CHAIN)

    @property
    def member(self) -> str:
        return f"{self.knowledge_id}|{int(self.expires)}|{self.ticket}"

    @staticmethod
    def parse(member: str) -> Place:
        knowledge_id, _, rest = member.partition("|")
        expires, _, ticket = rest.partition("|")  # "id|expiry" (before tickets): no ticket
        return Place(knowledge_id, float(expires or 0), ticket)


@dataclass(frozen=True)
class Waiter:
    knowledge_id: str
    attempt: int
    since: float
    ticket: str
    #: when this entry's wake message was sent (0: the entry of the backstop's message)
    woken_at: float = 0.0

    @property
    def member(self) -> str:
        return f"{self.knowledge_id}|{self.attempt}|{self.since:.3f}|{self.ticket}|{self.woken_at:.3f}"

    @staticmethod
    def parse(member: str) -> Waiter:
        knowledge_id, attempt, since, ticket, woken_at = member.split("|")
        return Waiter(knowledge_id, int(attempt), float(since), ticket, float(woken_at))


@dataclass(frozen=True)
class Door:
    """What the tenant's row holds: its places and its waiters (as stored members)."""

    places: frozenset[str] = frozenset()
    waiters: frozenset[str] = frozenset()

    def place_of(self, knowledge_id: str) -> Place | None:
        # the latest lease of the document's own place (not a further chain's): a renewal writes the new
        # member before it strikes the old one
        own = [p for p in map(Place.parse, self.places) if p.knowledge_id == knowledge_id and not p.is_chain]
        return max(own, key=lambda p: p.expires, default=None)

    def expired(self, now: float) -> frozenset[str]:
        return frozenset(m for m in self.places if Place.parse(m).expires < now)

    def live(self, now: float) -> list[Place]:
        return [p for p in map(Place.parse, self.places) if p.expires >= now]

    def entries_of(self, knowledge_id: str) -> list[Waiter]:
        return [w for w in map(Waiter.parse, self.waiters) if w.knowledge_id == knowledge_id]

    def listed(self, knowledge_id: str, ticket: str) -> Waiter | None:
        return next((w for w in self.entries_of(knowledge_id) if w.ticket == ticket), None)

    def without(self, knowledge_id: str) -> Door:
        return Door(
            frozenset(m for m in self.places if Place.parse(m).knowledge_id != knowledge_id),
            frozenset(m for m in self.waiters if Waiter.parse(m).knowledge_id != knowledge_id),
        )


class Verdict(Enum):
    #: the document holds a place already (a redelivery, a reparse, a transcription resumed)
    HOLDS = "holds"
    #: the message's ticket is not (or no longer) the document's: another message carries its turn
    STALE = "stale"
    #: a place may be taken (if one is free when the write lands)
    TRY = "try"
    #: its own place lapsed (a long job, a killed worker) and no other message carries its turn: it takes a
    #: place again, or waits for one, keeping its ticket
    RETAKE = "retake"


def verdict(door: Door, knowledge_id: str, ticket: str, now: float) -> Verdict:
    place = door.place_of(knowledge_id)
    if place is not None and place.expires >= now:
        # a message without a ticket is a first delivery or a reparse: the holder goes on, as before tickets
        return Verdict.HOLDS if not ticket or place.ticket == ticket else Verdict.STALE
    if not ticket or door.listed(knowledge_id, ticket) is not None:
        return Verdict.TRY
    if (place is None or place.ticket == ticket) and not door.entries_of(knowledge_id):
        # its own place lapsed (still listed, or struck for another document since: a killed worker's
        # message comes back only after the queue's visibility timeout) and no other turn of the document
        # is listed: dropping it would drop the document. A copy of a document that left meanwhile takes a
        # place it gives back at once (the docreader finds the row not processable)
        return Verdict.RETAKE
    return Verdict.STALE


def renewal_due(place: Place, now: float, lease_seconds: float) -> bool:
    """A later stage renews its document's lease only within half a lease of its expiry (or after it):
    most of its messages read the door and write nothing."""
    return place.expires - now < lease_seconds / 2


def places_past_the_door(cap: int) -> int:
    """How many places a tenant's row may list when a document past the door takes its struck place back
    over the cap: bounded, so places taken back in a burst cannot grow the row without end."""
    return 2 * cap


def is_full(door: Door, cap: int, now: float) -> bool:
    return len(door.live(now)) >= cap


def waiting_since(door: Door, knowledge_id: str, now: float) -> float:
    """A document keeps its place in line when it is turned away again."""
    return min((w.since for w in door.entries_of(knowledge_id)), default=now)


def to_wake(door: Door, cap: int, now: float) -> list[Waiter]:
    """The oldest waiters, one entry each, as many as there are free places not already promised to a
    woken document whose message is on its way."""
    live = door.live(now)
    holders = {p.knowledge_id for p in live}
    by_document: dict[str, list[Waiter]] = {}
    for waiter in map(Waiter.parse, door.waiters):
        if waiter.knowledge_id not in holders:  # an entry a holder left behind wakes nobody
            by_document.setdefault(waiter.knowledge_id, []).append(waiter)
    on_the_way = {
        k
        for k, entries in by_document.items()
        if max(w.woken_at for w in entries) > now - WAKE_IN_FLIGHT_SECONDS
    }
    free = cap - len(live) - len(on_the_way)
    if free <= 0:
        return []
    asleep = [
        min(entries, key=lambda w: w.since) for k, entries in by_document.items() if k not in on_the_way
    ]
    return sorted(asleep, key=lambda w: (w.since, w.knowledge_id))[:free]


def members(waiters: Iterable[Waiter]) -> frozenset[str]:
    return frozenset(w.member for w in waiters)
