"""Knowledge bases: create and read."""

from __future__ import annotations

import uuid

from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.errors import BadRequest, Conflict
from chalicelib.domain.process_config import apply_chunking, check_enrichment, resolve
from chalicelib.domain.types import EnrichmentSettings, FaqIndexSettings, IndexingStrategy, KnowledgeBase
from chalicelib.ports import Dependencies
from chalicelib.services.offered import check_engine, check_models
from chalicelib.services.ownership import require_kb


def create_kb(deps: Dependencies, tenant_id: str, request: CreateKnowledgeBase) -> KnowledgeBase:
    check_models(
        deps.settings,
        embedding=request.embedding_model_id,
        chat=request.summary_model_id,
        vision=request.vlm_model_id,
        asr=request.asr_model_id,
    )
    check_engine(deps.settings, request.retrieval_engine)
    if request.faq_index is not None and request.type != "faq":
        raise BadRequest("faq_index applies to FAQ knowledge bases only", code="setting_cannot_be_honoured")
    if deps.kbs.by_name(tenant_id, request.name) is not None:
        raise Conflict(f"a knowledge base named {request.name!r} exists", code="duplicate_kb_name")
    strategy = request.indexing_strategy
    kb = KnowledgeBase(
        id=str(uuid.uuid4()),
        tenant_id=tenant_id,
        name=request.name,
        description=request.description,
        type=request.type,
        chunking_config=apply_chunking(
            None, request.chunking_config.changes() if request.chunking_config else {}
        ),
        indexing_strategy=IndexingStrategy(**strategy.model_dump()) if strategy else IndexingStrategy(),
        # pinned at creation: a later change of the default never moves a knowledge base's vector space
        embedding_model_id=request.embedding_model_id or deps.settings.default_embedding_model,
        summary_model_id=request.summary_model_id,
        vlm_model_id=request.vlm_model_id,
        asr_model_id=request.asr_model_id,
        ocr_languages=list(request.ocr_languages),
        asr_language=request.asr_language,
        retrieval_engine=request.retrieval_engine,
        enrichment=EnrichmentSettings(**request.enrichment.model_dump())
        if request.enrichment
        else EnrichmentSettings(),
        faq_index=FaqIndexSettings(**request.faq_index.model_dump())
        if request.faq_index
        else FaqIndexSettings(),
    )
    check_enrichment(resolve(kb, {}), ocr_available=deps.ocr() is not None)
    deps.kbs.put(kb)
    return kb


def get_kb(deps: Dependencies, tenant_id: str, kb_id: str) -> KnowledgeBase:
    return require_kb(deps, tenant_id, kb_id)


def list_kbs(deps: Dependencies, tenant_id: str) -> list[KnowledgeBase]:
    return deps.kbs.list(tenant_id)
