"""Whose turn it is at the pipeline's door (domain/turns.py): fair queuing between tenants."""

from __future__ import annotations

from chalicelib.domain import turns

TTL = 60.0


def test_a_tenant_alone_is_always_let_in() -> None:
    book: turns.Book = {}
    for _ in range(5):
        book = turns.queued(book, "a", 0.0, TTL)
    for n in range(5):
        admitted, book = turns.knock(book, "a", float(n), TTL)
        assert admitted


def test_one_document_goes_ahead_of_another_tenants_backlog() -> None:
    book: turns.Book = {}
    for _ in range(200):
        book = turns.queued(book, "a", 0.0, TTL)
    admitted, book = turns.knock(book, "a", 1.0, TTL)
    assert admitted  # nobody else waits yet
    book = turns.queued(book, "b", 2.0, TTL)  # b joins level with the least-served waiting tenant
    admitted, book = turns.knock(book, "a", 2.5, TTL)
    assert admitted  # level: a tie does not hold a back
    admitted, book = turns.knock(book, "a", 3.0, TTL)
    assert not admitted  # now b has been served less: a's next document waits
    admitted, book = turns.knock(book, "b", 4.0, TTL)
    assert admitted
    admitted, book = turns.knock(book, "a", 5.0, TTL)
    assert admitted  # b has nothing left waiting


def test_a_tenant_whose_documents_vanished_stops_counting() -> None:
    book = turns.queued({}, "ghost", 0.0, TTL)  # its document is deleted before it ever knocks
    book = turns.queued(book, "a", 0.0, TTL)
    for n in range(3):
        _, book = turns.knock(book, "a", float(n), TTL)
        book = turns.queued(book, "a", float(n), TTL)
    assert not turns.knock(book, "a", 10.0, TTL)[0]  # the ghost still counts as waiting for a while
    assert turns.knock(book, "a", 10.0 + TTL, TTL)[0]  # then it does not
    assert "ghost" not in turns.queued(book, "a", 20 * TTL, TTL)  # and is forgotten


def test_two_backlogs_take_turns() -> None:
    book: turns.Book = {}
    for _ in range(10):
        book = turns.queued(book, "a", 0.0, TTL)
        book = turns.queued(book, "b", 0.0, TTL)
    order = []
    for n in range(20):
        for tenant in ("a", "a", "b"):  # a's documents knock twice as often
            admitted, book = turns.knock(book, tenant, float(n), TTL)
            if admitted:
                order.append(tenant)
    first_ten = order[:10]
    assert abs(first_ten.count("a") - first_ten.count("b")) <= 1
