"""A knowledge base's rows, read a page at a time (newest first, a GSI query per page): what a sweep over a
whole knowledge base reads, so that its cost grows with the rows it reads, not with how often it asks."""

from __future__ import annotations

from collections.abc import Iterator

from chalicelib.domain.clock import to_iso
from chalicelib.domain.types import Knowledge
from chalicelib.ports import Dependencies

#: rows read per query
PAGE = 500


def position(row: Knowledge) -> tuple[str, str]:
    """The row's place in the newest-first order: `kb_rows(after=)` goes on just after it."""
    return to_iso(row.created_at), row.id


def kb_rows(
    deps: Dependencies,
    kb_id: str,
    *,
    index: tuple[str, str] | None = None,
    after: tuple[str, str] | None = None,
    page: int = PAGE,
) -> Iterator[Knowledge]:
    """Every row of the knowledge base (of one listing `index`, as `page_by_kb` takes it), newest first, from
    just after `after`; a page is read when the caller gets to it."""
    while rows := deps.knowledge.page_by_kb(kb_id, index=index, after=after, limit=page):
        yield from rows
        if len(rows) < page:
            return
        after = position(rows[-1])
