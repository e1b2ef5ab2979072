"""Reading and refreshing what enrichment made: a summary refresh, the knowledge graph, the wiki."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from chalicelib.commands import GraphQuery
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.types import Knowledge, ParseStatus
from chalicelib.ports import Dependencies
from chalicelib.services.ownership import owned_knowledge, require_kb


def refresh_summary(deps: Dependencies, tenant_id: str, knowledge_id: str) -> Knowledge:
    from chalicelib.services.dispatch import request_summary_refresh

    knowledge = owned_knowledge(deps, tenant_id, knowledge_id)
    if knowledge.parse_status != ParseStatus.COMPLETED:
        raise BadRequest("only a completed knowledge can be summarised again", code="invalid_state")
    request_summary_refresh(deps, knowledge)
    refreshed = deps.knowledge.get(knowledge.id)
    return refreshed or knowledge


def graph(deps: Dependencies, tenant_id: str, kb_id: str, query: GraphQuery) -> dict[str, Any]:
    kb = require_kb(deps, tenant_id, kb_id)
    found = deps.graph.neighbourhood(kb.id, query.entity, query.limit)
    return {
        "entity": asdict(found.entity) if found.entity else None,
        "relations": [asdict(edge) for edge in found.edges],
        "neighbours": [asdict(node) for node in found.neighbours],
    }


def wiki(deps: Dependencies, tenant_id: str, kb_id: str) -> dict[str, Any]:
    """The index and the pages it lists (`current_pages`: not those of deleted, reparsed or moved documents)."""
    from chalicelib.enrich.wiki import current_pages

    kb = require_kb(deps, tenant_id, kb_id)
    return {
        "index": deps.wiki.get_index(kb.id) or "",
        "pages": [asdict(page) for page in current_pages(deps, kb.id).records],
    }
