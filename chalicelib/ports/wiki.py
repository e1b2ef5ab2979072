"""The wiki's port: the ops of documents waiting for their pages, the page records and the index of each
knowledge base (re-exported by chalicelib/ports/state.py)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

#: a page record's place in the wiki's listing: (knowledge id, chunk id)
PagePosition = tuple[str, str]


@dataclass
class WikiOp:
    """A document waiting for its wiki pages; its task token holds the document's finalizing slot."""

    kb_id: str
    knowledge_id: str
    attempt: int
    token: str


@dataclass
class WikiPageRecord:
    knowledge_id: str
    document: str
    title: str
    chunk_id: str


class WikiRepo(Protocol):
    def put_op(self, op: WikiOp) -> None:
        """Queues (or requeues, for a newer attempt) the document's wiki work."""
        ...

    def claim_ops(self, kb_id: str, limit: int, stale_after_seconds: int) -> list[WikiOp]:
        """Up to `limit` pending ops (or ones claimed longer ago than `stale_after_seconds`), now claimed."""
        ...

    def pending(self, kb_id: str) -> int: ...

    def ops(self, kb_id: str) -> list[WikiOp]:
        """Every op of the knowledge base, pending or claimed: the tokens its wiki holds."""
        ...

    def heartbeat_due(self, kb_id: str, every_seconds: int) -> bool:
        """True for one caller per `every_seconds` and knowledge base (a lease): that one heartbeats the ops."""
        ...

    def finish_op(self, kb_id: str, knowledge_id: str, attempt: int) -> None: ...

    def release_op(self, kb_id: str, knowledge_id: str, attempt: int) -> None:
        """A claimed op back to pending (its worker could not do it now); another attempt's op is left be."""
        ...

    def put_pages(self, kb_id: str, knowledge_id: str, pages: Sequence[WikiPageRecord]) -> None:
        """Replaces the document's page records."""
        ...

    def delete_pages(self, kb_id: str, knowledge_id: str) -> int: ...  # how many records it deleted

    def delete_kb(self, kb_id: str) -> None:
        """Everything of the knowledge base's wiki: its ops, page records and index."""
        ...

    def pages(self, kb_id: str) -> list[WikiPageRecord]:
        """Every page record of the knowledge base (the index is made of them all)."""
        ...

    def pages_after(
        self, kb_id: str, after: PagePosition | None, limit: int
    ) -> tuple[list[WikiPageRecord], bool]:
        """Up to `limit` (>= 1) page records by (knowledge id, chunk id) after `after` (exclusive; None: from
        the first), and whether any is left after them: `page_window` over the records in key order. Reads
        about one page, not every record (a wiki listed page by page read each record on every page)."""
        ...

    def put_index(self, kb_id: str, markdown: str) -> None: ...

    def get_index(self, kb_id: str) -> str | None: ...

    def index_part(self, kb_id: str, offset: int, chars: int) -> tuple[str, int] | None:
        """The index's characters [offset, offset + chars) and its length in characters (None: no index),
        read from the parts that hold them (`parts_holding`), not the whole index on every listing page."""
        ...


def page_window(
    records: Iterable[WikiPageRecord], after: PagePosition | None, limit: int
) -> tuple[list[WikiPageRecord], bool]:
    """`pages_after` over `records` as the table keeps them: a document's records together (in write order,
    not chunk-id order), documents by knowledge id (ids are UUIDs: as their keys `page#<id>#<n>` sort), from
    the document of `after` on. Consumed only to the end of the document where the page ends and the first
    record after it, which says there is more."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    taken: list[WikiPageRecord] = []
    document: list[WikiPageRecord] = []
    for record in records:
        if document and record.knowledge_id != document[0].knowledge_id:
            taken += sorted(document, key=lambda r: r.chunk_id)
            document = []
            if len(taken) >= limit:
                return taken[:limit], True
        if after is None or (record.knowledge_id, record.chunk_id) > after:
            document.append(record)
    taken += sorted(document, key=lambda r: r.chunk_id)
    return taken[:limit], len(taken) > limit


def parts_holding(lengths: Sequence[int], offset: int, chars: int) -> tuple[list[int], int]:
    """Which of an index's parts (their lengths in characters, in order) hold its characters [offset,
    offset + chars), and where the range starts in the first of them."""
    wanted: list[int] = []
    skip = at = 0
    for n, length in enumerate(lengths):
        if at + length > offset and at < offset + chars:
            if not wanted:
                skip = offset - at
            wanted.append(n)
        at += length
    return wanted, skip
