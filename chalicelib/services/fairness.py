"""Fairness between tenants (spec row 43): one tenant's backlog must not hold everyone's documents first in,
first out. Two rules at the pipeline's door (the docreader), both kept in DynamoDB:

- whose turn it is (`domain/turns.py`): a document is let in unless another waiting tenant has been served
  less, so a tenant's one document goes ahead of another's backlog of hundreds, while a tenant alone is
  never held back; a document held back by another tenant comes back after `turn_wait_seconds`;
- how many at once (`domain/door.py`): every tenant has at most `tenant_pipeline_cap` documents between the
  docreader and the index. The places are leases in the tenant's row, given back when the document is
  indexed, fails, is cancelled or deleted; a lease nobody gave back frees itself, and one a message of its
  holder comes back to (a transcription's resume) is renewed. A message whose own place lapsed anyway (a
  killed worker) takes a place again or waits for one, never dropped for the lapse. Past the door, every
  chunking and embedding message keeps the place (`keep_place`): it renews the lease once it is within
  half a lease of expiring (one read of the row per message, one conditional write only then), so a long
  chunking and embedding keeps its place. A later message whose place lapsed and was struck for another
  document (a message delayed longer than the lease) is already past the door with work in flight: it is
  never dropped nor held back; it takes its place back at once, even over the cap (at most twice the cap
  listed), so the tenant's next documents wait until the count is under the cap again. Nothing accepted is
  lost and nothing waits on it: the place is given back when the document leaves, as every place. A
  docreader message whose place lapsed and was struck (its worker killed, the message back after the
  queue's visibility timeout) takes a place again or waits, as long as no other turn of the document is
  listed (`doors.verdict`), and page ranges keep the place as later stages do. A document that finds
  them all taken is written down as a waiter in the same row and its message comes back only after
  `turn_backstop_seconds`: the place given back wakes the oldest waiter at once (a message with a new
  ticket), so a backlog is not looked at again and again while it waits (issue 27: it was 161-238
  docreader runs for 20 documents of one tenant, every waiting one every 2 s).

A keep_place that wrote (a renewal, a place taken back) reads the row again and gives the place back if the
document left meanwhile (`give_back_if_left`); the first waiter's backstop gives back places documents no
longer in the pipeline hold (`heal_door`). A fanned-out embedding runs one chain of slices per place its
document holds, taking free ones (`chains_for_fan_out`): a tenant's slices stay within its cap too.
"""

from __future__ import annotations

import secrets
import time
from enum import Enum

from chalicelib.domain import door as doors
from chalicelib.domain import turns
from chalicelib.domain.errors import AwaitingTurn
from chalicelib.domain.status import BEGIN_PROCESSING_FROM
from chalicelib.domain.types import Knowledge, Stage, StageMessage
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, TurnBookBusy
from chalicelib.services.stage_queue import enqueue

DOOR = "docreader"
#: writes that lose a race with another worker's on the same row are read again this many times
ATTEMPTS = 8


class Entry(Enum):
    #: the document took one of its tenant's places now
    ENTERED = "entered"
    #: it held one already (a redelivery, a reparse, a resumed transcription)
    HELD = "held"
    #: another message carries the document's turn (a backstop whose wake came first, a duplicate): drop it
    STALE = "stale"


def queued_at_door(deps: Dependencies, tenant_id: str) -> None:
    """A document of the tenant was put on the docreader queue: the tenant waits at the door.

    Only a head start: the document's own knock counts it as waiting too. So a burst of uploads that keeps
    the one book busy past its tries is let through unrecorded instead of failing an accepted upload."""
    ttl = deps.settings.turn_ttl_seconds
    try:
        deps.turns.change(DOOR, lambda book: (None, turns.queued(book, tenant_id, time.time(), ttl)))
    except TurnBookBusy as busy:
        logger.warning(
            "the door's turn book is busy: the tenant counts as waiting at its knock",
            extra={"error": str(busy)},
        )


def enter_pipeline(deps: Dependencies, message: StageMessage) -> Entry:
    """Lets the document in, tells a stale message apart, or raises AwaitingTurn."""
    cap = deps.settings.tenant_pipeline_cap
    entry, served_before = _take_place(deps, message, cap) if cap > 0 else (Entry.ENTERED, False)
    # stale, let in before (a duplicate, a retried try) or its lapsed place taken back: served once
    if entry is not Entry.ENTERED or served_before:
        return entry
    ttl = deps.settings.turn_ttl_seconds
    if not deps.turns.change(DOOR, lambda book: turns.knock(book, message.tenant_id, time.time(), ttl)):
        # another tenant's document goes first: keep this one's place in line, give its place back
        ticket = (
            _wait(deps, message, deps.tenants.pipeline_door(message.tenant_id), own_turn=True)
            if cap > 0
            else ""
        )
        _give_back(deps, message.tenant_id, message.knowledge_id, wake=False)
        raise AwaitingTurn(
            "another tenant's document goes first: this one waits its turn",
            delay_seconds=deps.settings.turn_wait_seconds,
            ticket=ticket or "",
        )
    return entry


def _take_place(deps: Dependencies, message: StageMessage, cap: int) -> tuple[Entry, bool]:
    """The entry, and whether the turn book served the document before (its own lapsed place retaken)."""
    tenant_id, knowledge_id, ticket = message.tenant_id, message.knowledge_id, message.door_ticket
    for _ in range(ATTEMPTS):
        now = time.time()
        door = deps.tenants.pipeline_door(tenant_id)
        expired = door.expired(now)
        # leases nobody gave back (a crashed worker) are freed once the places are needed (the write counts
        # every member); until then a lapsed place lets its own message take it back (doors.Verdict.RETAKE)
        if expired and len(door.places) >= cap:
            deps.tenants.strike_pipeline_entries(tenant_id, expired, frozenset())
        verdict = doors.verdict(door, knowledge_id, ticket, now)
        if verdict is doors.Verdict.HOLDS:
            if _renew(deps, message, door, now):
                return Entry.HELD, True
            continue  # its place was given back or struck meanwhile: read again
        if verdict is doors.Verdict.RETAKE and door.place_of(knowledge_id) is None:
            verdict = _struck_place_verdict(deps, message)
        if verdict is doors.Verdict.STALE:
            _drop_stale(deps, door, message)
            return Entry.STALE, True
        retaking = verdict is doors.Verdict.RETAKE
        if doors.is_full(door, cap, now):
            # the first waiter's backstop: a place a document no longer in the pipeline still holds (a
            # give-back lost to a crash or a race) would keep it out until the lease lapses
            if ticket and _first_in_line(door, knowledge_id) and heal_door(deps, tenant_id, door, wake=False):
                continue  # read again: a place is free
            waiting = _wait(deps, message, door, own_turn=retaking)
            if waiting is None:
                continue  # its ticket was struck meanwhile: read again (it may hold a place now)
            wake_waiters(deps, tenant_id)  # a place given back since the read must not be missed
            raise AwaitingTurn(
                f"the tenant has {cap} documents in the pipeline: this one waits for a place",
                delay_seconds=deps.settings.turn_backstop_seconds,
                ticket=waiting,
            )
        listed = door.listed(knowledge_id, ticket) if ticket else None
        place = doors.Place(knowledge_id, now + deps.settings.pipeline_lease_seconds, ticket)
        strike = doors.members(door.entries_of(knowledge_id))
        if deps.tenants.take_pipeline_place(
            tenant_id, place.member, cap, strike, listed.member if listed else ""
        ):
            return Entry.ENTERED, retaking
    raise RuntimeError(f"the pipeline door of tenant {tenant_id} kept changing under {ATTEMPTS} reads")


def _struck_place_verdict(deps: Dependencies, message: StageMessage) -> doors.Verdict:
    """A message whose place nobody lists any more: struck after it lapsed (its worker killed mid-read),
    or given back because the document left the pipeline (a late copy). Only a document still on its way
    in (this attempt, not yet indexed) takes a place again."""
    row = deps.knowledge.get(message.knowledge_id)
    on_its_way = row is not None and row.attempt == message.attempt and in_pipeline(row)
    return doors.Verdict.RETAKE if on_its_way else doors.Verdict.STALE


def in_pipeline(row: Knowledge | None) -> bool:
    """Whether the row, read live, is between the docreader and the index (any attempt): only such a
    document may hold a place."""
    return row is not None and row.parse_status in BEGIN_PROCESSING_FROM and row.processed_at is None


def _wait(
    deps: Dependencies, message: StageMessage, door: doors.Door, *, own_turn: bool = False
) -> str | None:
    """Writes the document down as a waiter with a new ticket; returns the ticket, or None if the message's
    turn was taken by another of its messages meanwhile. Unless `own_turn` (the message took a place and
    gives it back, or its own place lapsed), its ticket, if any, must still be listed."""
    tenant_id, knowledge_id = message.tenant_id, message.knowledge_id
    ticket = secrets.token_hex(8)
    now = time.time()
    waiter = doors.Waiter(knowledge_id, message.attempt, doors.waiting_since(door, knowledge_id, now), ticket)
    listed = door.listed(knowledge_id, message.door_ticket) if message.door_ticket and not own_turn else None
    if message.door_ticket and not own_turn and listed is None:
        return None
    if not deps.tenants.add_pipeline_waiter(tenant_id, waiter.member, listed.member if listed else ""):
        return None
    # the entries read before are spent: their messages (this one, a backstop) find their ticket gone
    deps.tenants.strike_pipeline_entries(tenant_id, frozenset(), doors.members(door.entries_of(knowledge_id)))
    return ticket


def _renew(deps: Dependencies, message: StageMessage, door: doors.Door, now: float) -> bool:
    """Renews the lease of the place the document holds; False if the place is no longer listed."""
    held = door.place_of(message.knowledge_id)
    if held is None:
        return False
    renewed = doors.Place(
        held.knowledge_id, max(held.expires, now + deps.settings.pipeline_lease_seconds), held.ticket
    )
    if renewed.member == held.member:  # renewed within the same second
        return True
    return deps.tenants.renew_pipeline_place(message.tenant_id, held.member, renewed.member)


def _drop_stale(deps: Dependencies, door: doors.Door, message: StageMessage) -> None:
    logger.info(
        "docreader: another message carries this document's turn at the door",
        extra={"knowledge_id": message.knowledge_id, "ticket": message.door_ticket},
    )
    if door.place_of(message.knowledge_id) is not None:  # entries a woken holder left behind
        left = doors.members(door.entries_of(message.knowledge_id))
        if left:
            deps.tenants.strike_pipeline_entries(message.tenant_id, frozenset(), left)


def wake_waiters(deps: Dependencies, tenant_id: str, door: doors.Door | None = None) -> int:
    """Wakes the tenant's oldest waiters, as many as there are free places: a message with a new ticket
    each, on the docreader queue at once. Returns how many were woken."""
    cap = deps.settings.tenant_pipeline_cap
    if cap <= 0:
        return 0
    now = time.time()
    door = door if door is not None else deps.tenants.pipeline_door(tenant_id)
    woken = 0
    for waiter in doors.to_wake(door, cap, now):
        wake = doors.Waiter(waiter.knowledge_id, waiter.attempt, waiter.since, secrets.token_hex(8), now)
        # written before the message is sent: a wake lost between the two costs the backstop's delay
        if deps.tenants.add_pipeline_waiter(tenant_id, wake.member, waiter.member):
            message = StageMessage(tenant_id, waiter.knowledge_id, waiter.attempt, door_ticket=wake.ticket)
            enqueue(deps, Stage.DOCREADER, message)
            woken += 1
    return woken


def keep_place(deps: Dependencies, knowledge: Knowledge) -> None:
    """A message of a stage past the door (chunking, embedding) works on `knowledge`, read live: its lease
    is renewed when it is about to lapse, and a place struck after it lapsed is taken back, over the cap if
    need be: the document is in the pipeline and must be counted, never dropped or held back for it."""
    cap = deps.settings.tenant_pipeline_cap
    if cap <= 0 or knowledge.processed_at is not None:  # indexed: it gave its place back
        return
    tenant_id, lease = knowledge.tenant_id, deps.settings.pipeline_lease_seconds
    now = time.time()
    door = deps.tenants.pipeline_door(tenant_id)
    held = door.place_of(knowledge.id)
    if held is not None:
        if not doors.renewal_due(held, now, lease):
            return
        renewed = doors.Place(held.knowledge_id, now + lease, held.ticket)
        if not deps.tenants.renew_pipeline_place(tenant_id, held.member, renewed.member):
            # struck or given back since the read: its next message takes it back
            logger.info("pipeline place gone before its renewal", extra={"knowledge_id": knowledge.id})
            return
        for extra in _places_of(door, knowledge.id) - {held.member}:  # a fanned-out embedding's
            chain = _chain_place(renewed, doors.Place.parse(extra).ticket)
            deps.tenants.renew_pipeline_place(tenant_id, extra, chain.member)
    else:
        place = doors.Place(knowledge.id, now + lease)
        taken = deps.tenants.take_pipeline_place(
            tenant_id, place.member, doors.places_past_the_door(cap), frozenset(), ""
        )
        logger.warning(
            "a document past the door took back its pipeline place (lapsed and struck)"
            if taken  # else the row lists twice the cap: it goes on uncounted, its next message tries again
            else "a document past the door goes on without a pipeline place: its tenant's row is full",
            extra={"knowledge_id": knowledge.id, "live": len(door.live(now))},
        )
        if not taken:
            return
    # A cancel or delete that landed since `knowledge` was read gave the place back before this write put
    # it (back) in the row: read the row again, after the write, and give the place back if it left. A
    # cancel landing after this read gives back after its own status write, which finds the place listed.
    give_back_if_left(deps, tenant_id, knowledge.id)


def _places_of(door: doors.Door, knowledge_id: str) -> set[str]:
    return {m for m in door.places if doors.Place.parse(m).knowledge_id == knowledge_id}


def _chain_place(held: doors.Place, ticket: str) -> doors.Place:
    """A further chain's place, leased with the document's own (`place_of` never takes it for that one)."""
    return doors.Place(held.knowledge_id, held.expires, ticket)


def chains_for_fan_out(deps: Dependencies, knowledge: Knowledge, wanted: int, *, take: bool = True) -> int:
    """How many chains of slices a fanned-out embedding may run at once: one per place its document holds
    in its tenant's pipeline, taking free ones (`take`: the planner's first delivery) up to `wanted`. So a
    tenant's slices and documents together never hold more than its cap of the embedding stage (below the
    stage's concurrency): one tenant's big documents cannot take every slot. Fairness off: `wanted`."""
    cap = deps.settings.tenant_pipeline_cap
    if cap <= 0:
        return wanted
    tenant_id = knowledge.tenant_id
    door = deps.tenants.pipeline_door(tenant_id)
    held = door.place_of(knowledge.id)
    chains = max(1, len(_places_of(door, knowledge.id)))
    if not take or held is None:  # a place struck after it lapsed: the one chain its messages keep
        return min(chains, wanted)
    taken = 0
    for chain in range(chains + 1, wanted + 1):
        place = _chain_place(held, f"{doors.CHAIN}{chain}")
        if not deps.tenants.take_pipeline_place(tenant_id, place.member, cap, frozenset(), ""):
            break  # the tenant's places are taken: its other documents keep theirs
        taken += 1
    if taken and give_back_if_left(deps, tenant_id, knowledge.id):
        return 1
    return chains + taken


def give_back_if_left(deps: Dependencies, tenant_id: str, knowledge_id: str) -> bool:
    """Gives the document's place back unless its row, read now, is still in the pipeline (a newer attempt
    keeps the place); True when it left."""
    if in_pipeline(deps.knowledge.get(knowledge_id)):
        return False
    logger.info("the document left the pipeline: its place goes back", extra={"knowledge_id": knowledge_id})
    leave_pipeline(deps, tenant_id, knowledge_id)
    return True


def _first_in_line(door: doors.Door, knowledge_id: str) -> bool:
    waiters = [doors.Waiter.parse(m) for m in door.waiters]
    first = min(waiters, key=lambda w: (w.since, w.knowledge_id), default=None)
    return first is not None and first.knowledge_id == knowledge_id


def heal_door(
    deps: Dependencies, tenant_id: str, door: doors.Door | None = None, *, wake: bool = True
) -> list[str]:
    """Gives back the places of documents no longer in the pipeline (a give-back lost to a crash or a race)
    and wakes the waiters they kept out (`wake`); returns their ids. Only a door with waiters is looked at
    (elsewhere a stray place keeps nobody out, and lapses), at one row read per place (at most
    `places_past_the_door`). Only the members read are struck: a reparse's fresh lease of the same document
    taken since stays. The door's first waiter calls it at each of its backstops, so a stray place costs at
    most `turn_backstop_seconds`, not a lease."""
    cap = deps.settings.tenant_pipeline_cap
    door = door if door is not None else deps.tenants.pipeline_door(tenant_id)
    if cap <= 0 or not door.waiters:
        return []
    holders: dict[str, set[str]] = {}
    for member in door.places:
        holders.setdefault(doors.Place.parse(member).knowledge_id, set()).add(member)
    left = [k for k in sorted(holders) if not in_pipeline(deps.knowledge.get(k))]
    if not left:
        return []
    stray = frozenset(m for k in left for m in holders[k])
    deps.tenants.strike_pipeline_entries(tenant_id, stray, frozenset())
    logger.warning("gave back pipeline places of documents no longer in it", extra={"knowledge_ids": left})
    if wake:
        wake_waiters(deps, tenant_id)
    return left


def leave_pipeline(deps: Dependencies, tenant_id: str, knowledge_id: str) -> None:
    """The document gives its place back (indexed, failed, cancelled, deleted) and stops waiting for one;
    the freed place wakes the next waiter."""
    _give_back(deps, tenant_id, knowledge_id, wake=True)


def attempt_leaves_pipeline(deps: Dependencies, tenant_id: str, knowledge_id: str, attempt: int) -> None:
    """An attempt that stopped or failed gives the document's place back, unless a newer attempt holds it
    now: a reparse keeps the document's place, so the old attempt's end must not free it."""
    row = deps.knowledge.get(knowledge_id)
    if row is not None and row.attempt != attempt:
        return
    leave_pipeline(deps, tenant_id, knowledge_id)


def _give_back(deps: Dependencies, tenant_id: str, knowledge_id: str, *, wake: bool) -> None:
    if deps.settings.tenant_pipeline_cap <= 0:
        return
    door = deps.tenants.pipeline_door(tenant_id)
    rest = door.without(knowledge_id)
    places = door.places - rest.places
    # waiting entries go too when it leaves for good; a document held back by another tenant keeps its own
    entries = door.waiters - rest.waiters if wake else frozenset()
    if places or entries:
        deps.tenants.strike_pipeline_entries(tenant_id, places, entries)
    if wake and rest.waiters:
        wake_waiters(deps, tenant_id, rest)
