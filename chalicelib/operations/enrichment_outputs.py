"""Reading and refreshing what enrichment made: a summary refresh, the knowledge graph, the wiki."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from chalicelib.commands import GraphQuery, WikiQuery, validate
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.types import Knowledge, ParseStatus
from chalicelib.operations.listing import cursor_fields
from chalicelib.ports import Dependencies
from chalicelib.services.ownership import owned_knowledge, require_kb

#: the index's characters one wiki page carries: at most 6 bytes each in JSON (an escaped character), so
#: with 1,000 page records (a few KB each at most) an answer stays well under Lambda's 6 MB
WIKI_INDEX_CHARS = 200_000


def refresh_summary(deps: Dependencies, tenant_id: str, knowledge_id: str) -> Knowledge:
    from chalicelib.services.dispatch import refresh_refusal_answered, request_summary_refresh

    knowledge = owned_knowledge(deps, tenant_id, knowledge_id)
    if knowledge.parse_status != ParseStatus.COMPLETED:
        raise BadRequest("only a completed knowledge can be summarised again", code="invalid_state")
    with refresh_refusal_answered("the summary is marked pending"):
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


def wiki(
    deps: Dependencies, tenant_id: str, kb_id: str, params: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """One page of the wiki: the next part of its index (`index`: the parts of every page, joined, are the
    index) and up to `limit` page records by (document, page chunk), those the index lists (not those of
    deleted, reparsed or moved documents: `current_pages`' rule, so a page may come short), and the cursor
    of the next page (None on the last). The whole wiki in one answer passed Lambda's 6 MB at ~10,000
    documents."""
    from chalicelib.enrich.wiki import is_current_page

    query = validate(WikiQuery, params or {})
    kb = require_kb(deps, tenant_id, kb_id)
    fingerprint = hashlib.sha256(json.dumps(["wiki", kb.id]).encode()).hexdigest()[:16]
    offset, after = _decode(query.cursor, fingerprint) if query.cursor else (0, None)
    index, length = deps.wiki.index_part(kb.id, offset, WIKI_INDEX_CHARS) or ("", 0)
    window, more = deps.wiki.pages_after(kb.id, after, query.limit)  # about one page read, not the wiki
    rows = deps.knowledge.get_many(list(dict.fromkeys(r.knowledge_id for r in window)))
    chunks = deps.chunks.get_many([(r.knowledge_id, r.chunk_id) for r in window])
    end = offset + WIKI_INDEX_CHARS
    next_cursor = None
    if more or end < length:
        last = window[-1] if window else None
        position = [last.knowledge_id, last.chunk_id] if last else list(after or ())
        next_cursor = _encode(min(end, length), position, fingerprint)
    return {
        "index": index,
        "pages": [
            asdict(r)
            for r in window
            if is_current_page(rows.get(r.knowledge_id), kb.id, chunks.get((r.knowledge_id, r.chunk_id)))
        ],
        "next_cursor": next_cursor,
        "has_more": next_cursor is not None,
    }


def _encode(offset: int, after: list[str], fingerprint: str) -> str:
    raw = json.dumps({"i": offset, "a": after, "f": fingerprint}, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str, fingerprint: str) -> tuple[int, tuple[str, str] | None]:
    """(the index's offset, the last page record given: (knowledge id, chunk id), None before the first)."""
    data = cursor_fields(cursor)
    offset, after = data.get("i"), data.get("a")
    if (
        data.get("f") != fingerprint
        or not isinstance(offset, int)
        or isinstance(offset, bool)
        or offset < 0
        or not isinstance(after, list)
        or len(after) not in (0, 2)
        or not all(isinstance(a, str) for a in after)
    ):
        raise BadRequest("cursor is not one this wiki gave", code="invalid_cursor")
    return offset, (after[0], after[1]) if after else None
