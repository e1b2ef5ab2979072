"""Whether a knowledge base can be served: its embedding model is one the operator offers and its
retrieval engine is configured here.

Creation already refuses such settings (400), but a knowledge base can outlive them (the operator withdrew a
model or an engine, or the row predates the check). Such a knowledge base is a configuration problem, not a
document problem and not a passing fault: its documents fail at once with the reason (no retry can help),
and its search answers 409 with a stable code instead of a 500.
"""

from __future__ import annotations

from chalicelib.domain.errors import BadRequest, Conflict, PermanentStageError, SpanErrorCode
from chalicelib.domain.types import KnowledgeBase
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, EmbeddingModel, IndexSpace, UnknownModel
from chalicelib.services.offered import check_engine

KNOWN_ENGINES = frozenset({"embedded", "opensearch"})
UNUSABLE_CODE = "knowledge_base_unusable"


class KnowledgeBaseUnusable(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def usable_model(deps: Dependencies, kb: KnowledgeBase) -> EmbeddingModel:
    """The knowledge base's embedding model, after checking its engine too; raises KnowledgeBaseUnusable."""
    engine = kb.retrieval_engine or deps.settings.retrieval_engine
    if engine not in KNOWN_ENGINES:
        raise KnowledgeBaseUnusable(f"the knowledge base's retrieval engine {engine!r} does not exist")
    try:
        check_engine(deps.settings, engine)
    except BadRequest as error:
        raise KnowledgeBaseUnusable(f"the knowledge base cannot be served: {error.message}") from error
    try:
        return deps.embedding_model(kb.embedding_model_id)
    except UnknownModel as error:
        raise KnowledgeBaseUnusable(
            f"the knowledge base's embedding model {kb.embedding_model_id!r} is not offered here; "
            "create a knowledge base with a model from GET /api/v1/models"
        ) from error


def require_usable_for_stage(deps: Dependencies, kb: KnowledgeBase) -> EmbeddingModel:
    try:
        return usable_model(deps, kb)
    except KnowledgeBaseUnusable as error:
        raise PermanentStageError(error.message, code=SpanErrorCode.EMBEDDING_PROVIDER_FAIL) from error


def require_usable_for_api(deps: Dependencies, kb: KnowledgeBase) -> EmbeddingModel:
    try:
        return usable_model(deps, kb)
    except KnowledgeBaseUnusable as error:
        raise Conflict(error.message, code=UNUSABLE_CODE) from error


def index_space_if_usable(deps: Dependencies, kb: KnowledgeBase) -> IndexSpace | None:
    """The space a clean-up deletes index entries from; None when the knowledge base cannot be served (its
    entries cannot be named any more, and a delete must not wait forever on a configuration problem)."""
    try:
        return IndexSpace.of(usable_model(deps, kb))
    except KnowledgeBaseUnusable as error:
        logger.warning("index entries left in place", extra={"kb_id": kb.id, "reason": error.message})
        return None
