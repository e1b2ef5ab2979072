"""Knowledge-base create/read."""

from __future__ import annotations

import uuid
from typing import Any

from .bootstrap import Services
from .create import require_kb
from .domain.errors import BadRequest, Conflict
from .domain.process_config import chunking_config_from
from .domain.types import IndexingStrategy, KnowledgeBase

ENGINES = ("", "embedded", "opensearch")


def kb_to_dict(kb: KnowledgeBase) -> dict[str, Any]:
    from .adapters.dynamo import kb_to_body

    return kb_to_body(kb)


def create_kb(svc: Services, tenant_id: str, body: dict[str, Any]) -> KnowledgeBase:
    name = str(body.get("name") or "").strip()
    if not name or len(name) > 200:
        raise BadRequest("name is required (at most 200 characters)", code="invalid_name")
    if svc.kbs.by_name(tenant_id, name) is not None:
        raise Conflict(f"a knowledge base named {name!r} exists", code="duplicate_kb_name")
    chunking = chunking_config_from(body.get("chunking_config"))
    strategy_raw = body.get("indexing_strategy") or {}
    strategy = IndexingStrategy(
        **{k: bool(v) for k, v in strategy_raw.items() if k in IndexingStrategy.__dataclass_fields__}
    )
    engine = str(body.get("retrieval_engine") or "")
    if engine not in ENGINES:
        raise BadRequest(
            f"retrieval_engine must be one of {', '.join(e for e in ENGINES if e)}", code="invalid_engine"
        )
    kb_type = str(body.get("type") or "document")
    if kb_type not in ("document", "faq"):
        raise BadRequest("type must be document or faq", code="invalid_kb_type")
    kb = KnowledgeBase(
        id=str(uuid.uuid4()),
        tenant_id=tenant_id,
        name=name,
        description=str(body.get("description") or ""),
        type=kb_type,
        chunking_config=chunking,
        indexing_strategy=strategy,
        embedding_model_id=str(body.get("embedding_model_id") or ""),
        summary_model_id=str(body.get("summary_model_id") or ""),
        vlm_model_id=str(body.get("vlm_model_id") or ""),
        asr_model_id=str(body.get("asr_model_id") or ""),
        retrieval_engine=engine,
    )
    svc.kbs.put(kb)
    return kb


def get_kb(svc: Services, tenant_id: str, kb_id: str) -> KnowledgeBase:
    return require_kb(svc, tenant_id, kb_id)
