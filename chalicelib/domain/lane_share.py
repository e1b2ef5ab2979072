"""A tenant's share of a lane's workers (the webhooks' slow lane), pure.

A lane of few workers (the slow lane runs 2) is shared by every tenant's tries in the order the queue
hands them out, so a tenant with a backlog of slow or failing tries would hold every worker while another
tenant's one try waits behind all of it. A tenant may hold at most `slots` of the lane's workers at once: a
try that finds its tenant's slots held goes back on the queue, nothing spent, and the worker takes the next
message, so the queue cycles past the backlog to the other tenants' tries. A slot is a lease, "try key ->
expiry": one a dying worker never gave back frees itself.

The tries turned away are spread out: each comes back `spacing` seconds after the one turned away before it
(`next`, the tenant's next free time), not all after the same delay, so a backlog of N tries is turned away
about N times in all while it drains, not N times each (N²/2: a review measured 12,720 put-backs for 160
tries of a receiver that answers in 5 s)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Book = dict[str, Any]
HELD, NEXT = "held", "next"
#: SQS's longest message delay
MAX_WAIT_SECONDS = 900


@dataclass(frozen=True)
class Share:
    #: the try may run now
    may_run: bool
    #: it took a slot, which it must give back (a copy of a try that holds one takes none)
    owned: bool = False
    #: turned away: how long until it comes back
    wait_seconds: int = 0


def take(
    book: Book, key: str, now: float, *, lease_seconds: float, slots: int, spacing: float
) -> tuple[Share, Book]:
    """The try `key` asks for one of its tenant's slots: its share, and the book after."""
    held = _held(book, now)
    if key in held:
        return Share(True), {**book, HELD: held}
    if len(held) < slots:
        return Share(True, owned=True), {**book, HELD: {**held, key: now + lease_seconds}}
    next_free = max(float(book.get(NEXT) or 0), now) + spacing
    wait = min(MAX_WAIT_SECONDS, max(1, round(next_free - now)))
    return Share(False, wait_seconds=wait), {**book, HELD: held, NEXT: min(next_free, now + MAX_WAIT_SECONDS)}


def give_back(book: Book, key: str, now: float) -> Book:
    return {**book, HELD: {k: until for k, until in _held(book, now).items() if k != key}}


def _held(book: Book, now: float) -> dict[str, float]:
    """The slots held now (a lease past its expiry is free)."""
    return {k: float(until) for k, until in (book.get(HELD) or {}).items() if float(until) > now}
