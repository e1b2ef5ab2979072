"""A document's switch (enable or disable): its chunks' index entries flipped to what its row says, a page of
chunk rows at a time, so no reader holds a whole document's chunks.

A document of at most INLINE_CHUNKS chunks is flipped within the API request, before its row is written (a
failure leaves the row as it was). A bigger one is flipped by a lifecycle task (tasks/switch.py): listing
150,000 chunk rows (~300 MB of DynamoDB pages) and flipping their entries does not fit in API Gateway's 29 s
nor in the API function's memory. Search reads every hit's document row, so it shows what the row says at
once either way; only the entries' share of the engine's hits waits for the task.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chalicelib.domain.types import Chunk, KnowledgeBase
from chalicelib.ports import Dependencies, IndexSpace
from chalicelib.ports.index import RetrieveEngine
from chalicelib.services.chunk_pages import PAGE
from chalicelib.services.usable import require_usable_for_api

#: a switch of a document with more chunks runs as a task (a 1 MB DynamoDB page holds ~500 chunk rows, so
#: the request reads ~10 pages twice and flips 5,000 entries: a few seconds)
INLINE_CHUNKS = 5_000


@dataclass(frozen=True)
class EntrySwitch:
    """Where a knowledge base's entries are flipped: its engine and its model's index space."""

    engine: RetrieveEngine
    space: IndexSpace
    kb_id: str

    def flip(
        self,
        deps: Dependencies,
        knowledge_id: str,
        enabled: bool,
        *,
        after: str | None = None,
        stop: Callable[[], bool] = lambda: False,
        check: Callable[[Sequence[Chunk]], None] = lambda page: None,
    ) -> str | None:
        """The document's entries (from the chunk after `after`) set to `enabled`, a page at a time, until
        `stop()` says so between pages: the cursor to go on from then, None when every page was flipped.
        `check` is called with each page before its write and raises to end the flip there (nothing of
        that page written). Raises IndexWriteError when the engine refuses a write."""
        while True:
            page, after = deps.chunks.list_page(knowledge_id, after=after, limit=PAGE)
            check(page)
            self.write(deps, knowledge_id, page, enabled)
            if after is None:
                return None
            if stop():
                return after

    def write(self, deps: Dependencies, knowledge_id: str, chunks: Sequence[Chunk], enabled: bool) -> None:
        """These chunks' entries set for their document being `enabled` or not, by the one rule: every one
        off with the document, and on with it only while its chunk is (a chunk switched off on its own
        stays off, as its own switch left it: it writes its entries before its row)."""
        chunk_ids = [chunk.id for chunk in chunks if chunk.is_enabled or not enabled]
        if not chunk_ids:
            return
        self.engine.set_enabled(self.space, self.kb_id, chunk_ids, enabled)
        if enabled:  # read again: a chunk switched off since the page was read is put off again
            # (its own switch wrote its entries before this write turned them on)
            again = deps.chunks.get_many([(knowledge_id, chunk_id) for chunk_id in chunk_ids])
            off = [key[1] for key, chunk in again.items() if not chunk.is_enabled]
            if off:
                self.engine.set_enabled(self.space, self.kb_id, off, False)


def entry_switch(deps: Dependencies, kb: KnowledgeBase) -> EntrySwitch | None:
    """What flips the knowledge base's entries (no re-embedding: the vectors stay where they are); None when
    it keeps none (no embedding). A Conflict when its model cannot be used."""
    if not kb.indexing_strategy.needs_embedding:
        return None
    model = require_usable_for_api(deps, kb)
    return EntrySwitch(deps.engine(kb.retrieval_engine), IndexSpace.of(model), kb.id)
