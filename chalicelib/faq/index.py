"""An FAQ knowledge base's index entries: one per question of an entry (or one per entry, combined),
written and removed through the knowledge base's retrieval engine (see entries.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from chalicelib.domain.faq import FAQ_CHUNK_TYPE, FAQ_SOURCE, FaqEntry
from chalicelib.domain.types import KnowledgeBase
from chalicelib.ports import Dependencies, IndexEntry, IndexSpace, RetrieveEngine, iter_batches
from chalicelib.services.usable import index_space_if_usable, require_usable_for_stage


@dataclass
class FaqIndex:
    """Writes and removes an FAQ knowledge base's index entries."""

    deps: Dependencies
    kb: KnowledgeBase
    texts_embedded: int = 0
    cache_hits: int = 0
    _space: IndexSpace | None = field(default=None, init=False)
    #: where removals go: None when the knowledge base can no longer be served (`_removals`)
    _removal_space: IndexSpace | None = field(default=None, init=False)
    _removal_checked: bool = field(default=False, init=False)

    @property
    def active(self) -> bool:
        return self.kb.indexing_strategy.needs_embedding

    def engine(self) -> RetrieveEngine:
        return self.deps.engine(self.kb.retrieval_engine)

    def space(self) -> IndexSpace:
        """Where entries are written; a knowledge base that can no longer be served (its model withdrawn,
        its engine gone) is a PermanentStageError with the reason."""
        if self._space is None:
            self._space = IndexSpace.of(require_usable_for_stage(self.deps, self.kb))
        return self._space

    def _removals(self) -> IndexSpace | None:
        """Where removals go; None when the knowledge base can no longer be served: its index entries cannot
        be named any more, and a delete must not fail on a configuration problem (as a document's)."""
        if not self._removal_checked:
            # whatever the knowledge base indexes now: entries written before its indexing was switched off
            # ('for new documents only') are still there, and nothing else would ever remove them
            self._removal_space = index_space_if_usable(self.deps, self.kb)
            self._removal_checked = True
        return self._removal_space

    def ids(self, entry: FaqEntry) -> dict[str, str]:
        """The entry's index entries (id -> text) under this knowledge base's index mode."""
        return entry.index_ids(self.kb.faq_index)

    def write_all(self, entries: Sequence[FaqEntry]) -> None:
        self.write([(entry, list(self.ids(entry))) for entry in entries])

    def write(self, items: Sequence[tuple[FaqEntry, Sequence[str]]]) -> None:
        """Indexes, for each entry, the index ids given (a subset of `self.ids(entry)`)."""
        if not self.active:
            return
        wanted = [(entry, iid, self.ids(entry)[iid]) for entry, ids in items for iid in ids]
        if not wanted:
            return
        vectors: Any = None
        if self.kb.indexing_strategy.vector_enabled:
            from chalicelib.services.embedding_runs import EmbeddingRun

            model = require_usable_for_stage(self.deps, self.kb)
            run = EmbeddingRun(self.deps, self.kb.tenant_id, model, space=self.space())
            vectors = run.embed([text for _, _, text in wanted])
            self.texts_embedded += run.texts_embedded
            self.cache_hits += run.cache_hits
        entries = [
            IndexEntry(
                id=iid,
                kb_id=self.kb.id,
                knowledge_id=entry.id,
                chunk_id=iid,
                content=text,
                vector=vectors[i] if vectors is not None else None,
                source_id=entry.id,
                source_type=FAQ_SOURCE,
                chunk_type=FAQ_CHUNK_TYPE,
                is_enabled=entry.is_enabled,
            )
            for i, (entry, iid, text) in enumerate(wanted)
        ]
        for batch in iter_batches(entries, 200):
            self.engine().batch_index(self.space(), list(batch))

    def remove_ids(self, ids: Sequence[str]) -> None:
        space = self._removals() if ids else None
        if space is not None:
            self.engine().delete_by_ids(space, self.kb.id, list(ids))

    def remove_entries(self, entry_ids: Sequence[str]) -> None:
        space = self._removals() if entry_ids else None
        if space is not None:
            for batch in iter_batches(list(entry_ids), 200):
                self.engine().delete_by_knowledge(space, self.kb.id, list(batch))

    def set_enabled(self, entry: FaqEntry, ids: Sequence[str]) -> None:
        space = self._removals() if ids else None
        if space is not None:
            self.engine().set_enabled(space, self.kb.id, list(ids), entry.is_enabled)

    def update(self, before: FaqEntry | None, after: FaqEntry) -> None:
        """Index what changed: new questions embedded, dropped ones removed, the flag flipped in place.
        The new entries are written first: when embedding fails, nothing of the entry's index changed."""
        old = set(self.ids(before)) if before is not None else set()
        new = self.ids(after)
        self.write([(after, [i for i in new if i not in old])])
        self.remove_ids(sorted(old - set(new)))
        if before is not None and before.is_enabled != after.is_enabled:
            self.set_enabled(after, [i for i in new if i in old])
