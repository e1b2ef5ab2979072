"""What processing derives from a knowledge's source (chunks, index entries, graph facts, wiki page
records): removed by a reparse, by the embedding stage's rollback, and by delete. The source object is not
derived data and stays."""

from __future__ import annotations

from chalicelib.domain.types import Knowledge
from chalicelib.ports import Dependencies
from chalicelib.services.dispatch import trigger_wiki
from chalicelib.services.usable import index_space_if_usable


def remove_derived_data(deps: Dependencies, knowledge: Knowledge) -> None:
    """Chunks, index entries and graph facts of every attempt (a new attempt whose graph is off would never
    clear them: their chunks are gone), and the wiki page records that named its page chunks (the wiki index
    is rebuilt without them)."""
    kb = deps.kbs.get(knowledge.kb_id)
    # whatever the knowledge base indexes now (entries written before its indexing was switched off stay)
    space = index_space_if_usable(deps, kb) if kb is not None else None
    if kb is not None and space is not None:
        deps.engine(kb.retrieval_engine).delete_by_knowledge(space, kb.id, [knowledge.id])
    deps.chunks.delete_all(knowledge.id)
    deps.graph.delete_knowledge(knowledge.kb_id, knowledge.id)
    retracted = deps.wiki.delete_pages(knowledge.kb_id, knowledge.id)
    if retracted and kb is not None and kb.indexing_strategy.wiki_enabled:
        trigger_wiki(deps, kb.id, "finalize")
