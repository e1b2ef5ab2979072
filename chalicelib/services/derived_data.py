"""What processing derives from a knowledge's source (chunks, index entries): removed by a reparse, by the
embedding stage's rollback, and by delete. The source object is not derived data and stays."""

from __future__ import annotations

from chalicelib.domain.types import Knowledge
from chalicelib.ports import Dependencies
from chalicelib.services.usable import index_space_if_usable


def remove_derived_data(deps: Dependencies, knowledge: Knowledge) -> None:
    """Chunks and index entries of every attempt."""
    kb = deps.kbs.get(knowledge.kb_id)
    space = (
        index_space_if_usable(deps, kb) if kb is not None and kb.indexing_strategy.needs_embedding else None
    )
    if kb is not None and space is not None:
        deps.engine(kb.retrieval_engine).delete_by_knowledge(space, kb.id, [knowledge.id])
    deps.chunks.delete_all(knowledge.id)
