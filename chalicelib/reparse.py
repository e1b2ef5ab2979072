"""Reparse: a new attempt that cleans the previous chunks and index entries and re-enqueues."""

from __future__ import annotations

from typing import Any

from .bootstrap import Services
from .create import enqueue_first_stage
from .domain.errors import BadRequest, NotFound
from .domain.process_config import validate_overrides
from .domain.types import Knowledge, ParseStatus


def owned_knowledge(svc: Services, tenant_id: str, knowledge_id: str) -> Knowledge:
    knowledge = svc.knowledge.get(knowledge_id)
    if knowledge is None or knowledge.tenant_id != tenant_id:
        raise NotFound(f"knowledge {knowledge_id} not found", code="knowledge_not_found")
    return knowledge


def remove_derived_data(svc: Services, knowledge: Knowledge) -> None:
    """Chunks and index entries of every attempt (the source object stays)."""
    kb = svc.kbs.get(knowledge.kb_id)
    if kb is not None and kb.indexing_strategy.needs_embedding:
        model = svc.embedding_model(kb.embedding_model_id)
        svc.engine(kb.retrieval_engine).delete_by_knowledge(svc.index_space(model), kb.id, [knowledge.id])
    svc.chunks.delete_all(knowledge.id)


def reparse(svc: Services, tenant_id: str, knowledge_id: str, body: dict[str, Any] | None) -> Knowledge:
    knowledge = owned_knowledge(svc, tenant_id, knowledge_id)
    if knowledge.parse_status in (ParseStatus.DELETING, ParseStatus.DRAFT):
        raise BadRequest(
            f"cannot reparse a knowledge that is {knowledge.parse_status.value}", code="invalid_state"
        )
    overrides = (
        validate_overrides((body or {}).get("process_config")) if body and "process_config" in body else None
    )
    remove_derived_data(svc, knowledge)
    try:
        knowledge = svc.knowledge.reset_for_reparse(knowledge.id, overrides)
    except LookupError as error:
        raise BadRequest("the knowledge changed state; try again", code="invalid_state") from error
    return enqueue_first_stage(svc, knowledge)
