"""An attempt's chunks a page at a time, in chunk-id order (document order: ids.ordered_seq): the one loop
for every reader that walks a whole document's chunks without holding them all (issue 12)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from chalicelib.domain.ids import attempt_chunk_prefix
from chalicelib.domain.types import Chunk, Knowledge
from chalicelib.ports import Dependencies

PAGE = 1000


def attempt_chunk_pages(
    deps: Dependencies, knowledge: Knowledge, *, limit: int = PAGE, kind: str = ""
) -> Iterator[Sequence[Chunk]]:
    """The pages of `knowledge.attempt`'s chunks (those whose id goes on with `kind` after the attempt's
    prefix, e.g. "table"); a caller that stops early reads no further page."""
    prefix = attempt_chunk_prefix(knowledge.id, knowledge.attempt) + kind
    after: str | None = None
    while True:
        page, after = deps.chunks.list_page(knowledge.id, prefix=prefix, after=after, limit=limit)
        yield page
        if after is None:
            return
