"""Whose is it: a knowledge base or a knowledge row of the calling tenant, else the same 404 a missing one
gets (another tenant's ids are never told apart from missing ones)."""

from __future__ import annotations

import json

from chalicelib.domain.errors import Conflict, NotFound
from chalicelib.domain.storage_keys import upload_intent_key, upload_result_key
from chalicelib.domain.types import Knowledge, KnowledgeBase
from chalicelib.ports import Dependencies


def require_kb(deps: Dependencies, tenant_id: str, kb_id: str) -> KnowledgeBase:
    kb = deps.kbs.get(kb_id)
    if kb is None or kb.tenant_id != tenant_id:
        raise NotFound(f"knowledge base {kb_id} not found", code="kb_not_found")
    if kb.status == "deleting":
        raise Conflict(f"knowledge base {kb_id} is being deleted", code="kb_deleting")
    return kb


def owned_knowledge(deps: Dependencies, tenant_id: str, knowledge_id: str) -> Knowledge:
    """The row if it belongs to the tenant; another tenant's ids answer 404, as missing ones do."""
    knowledge = deps.knowledge.get(knowledge_id)
    if knowledge is None or knowledge.tenant_id != tenant_id:
        raise NotFound(f"knowledge {knowledge_id} not found", code="knowledge_not_found")
    return knowledge


def missing_knowledge_error(deps: Dependencies, tenant_id: str, knowledge_id: str) -> NotFound:
    """The 404 for a knowledge id without a row of this tenant. A presigned upload of this tenant that
    has no row yet says whether it is still awaited or why it was rejected; nothing about another
    tenant's upload is ever revealed (the intent names its tenant)."""
    not_found = NotFound(f"knowledge {knowledge_id} not found", code="knowledge_not_found")
    intent_url = deps.inbox.url_for(upload_intent_key(knowledge_id))
    if deps.knowledge.get(knowledge_id) is not None or not deps.inbox.exists(intent_url):
        return not_found
    if json.loads(deps.inbox.read(intent_url)).get("tenant_id") != tenant_id:
        return not_found
    result_url = deps.inbox.url_for(upload_result_key(knowledge_id))
    if not deps.inbox.exists(result_url):
        return NotFound("the presigned upload has not arrived yet", code="upload_pending")
    rejected = json.loads(deps.inbox.read(result_url))
    return NotFound(rejected["message"], code=rejected["code"], data=rejected.get("data"))
