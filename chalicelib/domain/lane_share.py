"""A tenant's share of a lane's workers (the webhooks' slow lane), pure.

A lane of few workers (the slow lane runs 2) is shared by every tenant's tries in the order the queue
hands them out, so a tenant with a backlog of slow or failing tries would hold every worker while another
tenant's one try waits behind all of it. A tenant may hold at most `slots` of the lane's workers at once: a
try that finds its tenant's slots held goes back on the queue (a short delay, nothing spent) and the worker
takes the next message, so the queue cycles past the backlog to the other tenants' tries. A slot is a
lease, "try key -> expiry": one a dying worker never gave back frees itself."""

from __future__ import annotations

from typing import Any

Book = dict[str, Any]
HELD = "held"


def take(book: Book, key: str, now: float, lease_seconds: float, slots: int) -> tuple[bool, bool, Book]:
    """The try `key` asks for one of its tenant's slots: (may run, took a slot it must give back, the book
    after). A try whose key holds a slot already (a copy of it delivered twice) may run and gives nothing
    back: the copy that took it does."""
    held = {k: until for k, until in (book.get(HELD) or {}).items() if float(until) > now}
    if key in held:
        return True, False, {**book, HELD: held}
    if len(held) >= slots:
        return False, False, {**book, HELD: held}
    return True, True, {**book, HELD: {**held, key: now + lease_seconds}}


def give_back(book: Book, key: str, now: float) -> Book:
    held = {k: until for k, until in (book.get(HELD) or {}).items() if float(until) > now and k != key}
    return {**book, HELD: held}
