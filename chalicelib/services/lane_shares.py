"""The webhooks' slow lane, shared between tenants (domain/lane_share.py): each tenant's slots are an item
of the turn book (`webhooks-slow#<tenant id>`, one conditional write to take one and one to give it back),
kept a day after its last change (the turns table's TTL)."""

from __future__ import annotations

import time

from chalicelib.domain import lane_share
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, TurnBookBusy

#: the slow lane's workers one tenant may hold at once (of its 2)
SLOW_LANE_TENANT_SLOTS = 1
#: a slot a worker never gave back frees itself after this long (a try ends within the function's 60 s)
SLOT_LEASE_SECONDS = 120
#: the tries of a tenant whose slots are held come back this far apart (domain/lane_share.py)
SHARE_SPACING_SECONDS = 2
BOOK_KEPT_SECONDS = 86_400


def book_name(tenant_id: str) -> str:
    return f"webhooks-slow#{tenant_id}"


def take_slot(deps: Dependencies, tenant_id: str, key: str) -> lane_share.Share:
    """The try's share: may it run now (and must it give its slot back), or in how many seconds it comes
    back. A book too busy to write lets the try run (as the pipeline's door does): a try is never held for
    the book's sake."""
    now = time.time()
    try:
        return deps.turns.change(
            book_name(tenant_id),
            lambda book: _taken(book, key, now),
            expires_at=int(now) + BOOK_KEPT_SECONDS,
        )
    except TurnBookBusy as busy:
        logger.warning("the slow lane's share book is busy: the try runs", extra={"error": str(busy)})
        return lane_share.Share(True)


def _taken(book: lane_share.Book, key: str, now: float) -> tuple[lane_share.Share, lane_share.Book]:
    return lane_share.take(
        book,
        key,
        now,
        lease_seconds=SLOT_LEASE_SECONDS,
        slots=SLOW_LANE_TENANT_SLOTS,
        spacing=SHARE_SPACING_SECONDS,
    )


def give_slot_back(deps: Dependencies, tenant_id: str, key: str) -> None:
    now = time.time()
    deps.turns.change(
        book_name(tenant_id),
        lambda book: (None, lane_share.give_back(book, key, now)),
        expires_at=int(now) + BOOK_KEPT_SECONDS,
    )
