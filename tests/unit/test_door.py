"""A tenant's places in the pipeline and its waiters (domain/door.py): leases, tickets and who is woken."""

from __future__ import annotations

from chalicelib.domain import door as doors
from chalicelib.domain.door import Door, Place, Verdict, Waiter


def door(places: list[Place], waiters: list[Waiter]) -> Door:
    return Door(frozenset(p.member for p in places), doors.members(waiters))


def test_a_lease_nobody_gave_back_frees_itself() -> None:
    held = door([Place("a", 100.0), Place("b", 200.0)], [])
    assert doors.is_full(held, 2, 50.0)
    assert not doors.is_full(held, 2, 150.0) and held.expired(150.0) == {Place("a", 100.0).member}
    assert doors.verdict(held, "a", "", 150.0) is Verdict.TRY  # its own lapsed lease holds nothing


def test_only_a_listed_ticket_lets_a_waiting_document_in() -> None:
    waiting = door([Place("a", 100.0)], [Waiter("b", 1, 5.0, "t1")])
    assert doors.verdict(waiting, "b", "t1", 50.0) is Verdict.TRY
    assert doors.verdict(waiting, "b", "t0", 50.0) is Verdict.STALE  # an older turn, spent
    assert doors.verdict(waiting, "b", "", 50.0) is Verdict.TRY  # a first delivery never waited
    entered = door([Place("b", 100.0, "t1")], [])
    assert doors.verdict(entered, "b", "t1", 50.0) is Verdict.HOLDS  # its own redelivery goes on
    assert doors.verdict(entered, "b", "t2", 50.0) is Verdict.STALE  # another of its messages came first
    assert doors.verdict(entered, "b", "", 50.0) is Verdict.HOLDS  # a reparse of a holder, as before


def test_places_given_back_wake_the_oldest_waiters_once() -> None:
    waiters = [Waiter("late", 1, 30.0, "t3"), Waiter("early", 1, 10.0, "t1"), Waiter("mid", 1, 20.0, "t2")]
    one_free = door([Place("a", 1000.0)], waiters)
    assert [w.knowledge_id for w in doors.to_wake(one_free, 3, 100.0)] == ["early", "mid"]
    woken = door([Place("a", 1000.0)], [*waiters, Waiter("early", 1, 10.0, "t9", woken_at=95.0)])
    # the woken one's message is on its way: its place is promised, the next waiter gets the other
    assert [w.knowledge_id for w in doors.to_wake(woken, 3, 100.0)] == ["mid"]
    later = 95.0 + doors.WAKE_IN_FLIGHT_SECONDS + 1
    assert [w.knowledge_id for w in doors.to_wake(woken, 3, later)] == ["early", "mid"]  # a lost wake, again
    assert doors.to_wake(door([Place("a", 1000.0)], waiters), 1, 100.0) == []  # nothing free


def test_a_holders_leftover_entry_wakes_nobody() -> None:
    left = door([Place("b", 1000.0, "t2")], [Waiter("b", 1, 10.0, "t1")])
    assert doors.to_wake(left, 3, 100.0) == []


def test_members_read_back() -> None:
    waiter = Waiter("k-1", 2, 12.5, "abc", 13.25)
    assert Waiter.parse(waiter.member) == waiter
    assert Place.parse(Place("k-1", 99.0, "abc").member) == Place("k-1", 99.0, "abc")
    assert Place.parse("k-1|99") == Place("k-1", 99.0)  # a lease written before tickets


def test_a_later_stage_renews_only_within_half_a_lease_of_the_expiry() -> None:
    held = Place("a", 1000.0)
    assert not doors.renewal_due(held, 1000.0 - 1800 * 0.6, 1800)  # 60% left: no write
    assert doors.renewal_due(held, 1000.0 - 1800 * 0.4, 1800)
    assert doors.renewal_due(held, 1100.0, 1800)  # lapsed, still listed: renewed too
    assert doors.places_past_the_door(8) == 16


def test_a_message_whose_lapsed_place_was_struck_takes_one_again() -> None:
    # a killed worker's message comes back after the visibility timeout (90 min), past the 30-min lease; the
    # place was struck for another document meanwhile: nothing lists this one, so it is no stale copy
    struck = door([Place("other", 5000.0)], [])
    assert doors.verdict(struck, "big", "t1", 4000.0) is Verdict.RETAKE
    # another turn of the document is listed (a wake with a newer ticket): this copy is stale
    woken = door([Place("other", 5000.0)], [Waiter("big", 1, 10.0, "t2", woken_at=3990.0)])
    assert doors.verdict(woken, "big", "t1", 4000.0) is Verdict.STALE
