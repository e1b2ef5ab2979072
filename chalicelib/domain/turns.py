"""Whose turn it is at a stage's door: fair queuing between tenants (spec row 43), pure.

The book holds, per tenant, how many of its documents wait (`pending`), how many have been let in so far
(`served`) and until when the tenant counts as waiting (`until`: refreshed by each of its documents that
knocks; a document deleted before it got in stops counting once that passes). A document is let in unless
another waiting tenant has been served less: so a tenant with one document goes ahead of another's
backlog of hundreds, and a tenant alone is never held back. A tenant that starts waiting again starts level
with the least-served waiting tenant, so a quiet tenant cannot claim its whole past absence at once."""

from __future__ import annotations

from typing import Any

Book = dict[str, dict[str, Any]]


def _entry(book: Book, tenant_id: str) -> dict[str, Any]:
    return dict(book.get(tenant_id) or {"pending": 0, "served": 0, "until": 0.0})


def waiting(book: Book, now: float) -> Book:
    return {t: e for t, e in book.items() if e.get("pending", 0) > 0 and e.get("until", 0) > now}


def _level(book: Book, tenant_id: str, entry: dict[str, Any], now: float) -> dict[str, Any]:
    others = [e["served"] for t, e in waiting(book, now).items() if t != tenant_id]
    if tenant_id not in waiting(book, now) and others:
        entry["served"] = max(entry["served"], min(others))
    return entry


def queued(book: Book, tenant_id: str, now: float, ttl: float) -> Book:
    """One more document of the tenant waits at the door."""
    entry = _level(book, tenant_id, _entry(book, tenant_id), now)
    if entry.get("until", 0) <= now:
        entry["pending"] = 0  # what it waited for before has gone (let in, or deleted)
    entry["pending"] += 1
    entry["until"] = now + ttl
    return _pruned({**book, tenant_id: entry}, now, ttl)


def knock(book: Book, tenant_id: str, now: float, ttl: float) -> tuple[bool, Book]:
    """A document of the tenant asks to come in: (let in, the book after)."""
    entry = _level(book, tenant_id, _entry(book, tenant_id), now)
    ahead = any(t != tenant_id and e["served"] < entry["served"] for t, e in waiting(book, now).items())
    entry["until"] = now + ttl
    if ahead:
        entry["pending"] = max(1, entry["pending"])
        return False, _pruned({**book, tenant_id: entry}, now, ttl)
    entry["served"] += 1
    entry["pending"] = max(0, entry["pending"] - 1)
    return True, _pruned({**book, tenant_id: entry}, now, ttl)


def _pruned(book: Book, now: float, ttl: float) -> Book:
    """Tenants that have not waited for a long while are forgotten (the book stays small)."""
    return {t: e for t, e in book.items() if e.get("until", 0) > now - 10 * ttl}
