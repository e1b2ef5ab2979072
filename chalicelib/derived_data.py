"""What processing derives from a knowledge's source (chunks, index entries): removed by a reparse, by the
embedding stage's rollback, and by delete. The source object is not derived data and stays."""

from __future__ import annotations

from .domain.types import Knowledge
from .ports import Dependencies, IndexSpace


def remove_derived_data(deps: Dependencies, knowledge: Knowledge) -> None:
    """Chunks and index entries of every attempt."""
    kb = deps.kbs.get(knowledge.kb_id)
    if kb is not None and kb.indexing_strategy.needs_embedding:
        model = deps.embedding_model(kb.embedding_model_id)
        deps.engine(kb.retrieval_engine).delete_by_knowledge(IndexSpace.of(model), kb.id, [knowledge.id])
    deps.chunks.delete_all(knowledge.id)
