"""Reading and refreshing what enrichment made: a summary refresh, the knowledge graph, the wiki."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from chalicelib.commands import GraphQuery, WikiQuery, validate
from chalicelib.domain.answer_size import ANSWER_MAX_BYTES, AnswerBudget, fitting, json_size
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.types import Knowledge, ParseStatus
from chalicelib.operations.listing import cursor_fields, encode_cursor, listing_fingerprint
from chalicelib.ports import Dependencies
from chalicelib.services.ownership import owned_knowledge, require_kb

#: the index's characters one wiki page carries: 6 bytes each in JSON (an escaped character; 12 outside the
#: BMP), 1.2 MB (2.4 MB) at most
WIKI_INDEX_CHARS = 200_000
#: a wiki page's JSON stays under Lambda's 6 MB response: 1,000 page records with 500-character CJK
#: document titles and 200-character page titles are 4.4 MB beside the index's part (twice that outside
#: the BMP), so past this budget the page ends early, its cursor going on after the last record it read
WIKI_PAGE_MAX_BYTES = ANSWER_MAX_BYTES


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
    return within_graph_size(
        {
            "entity": asdict(found.entity) if found.entity else None,
            "relations": [asdict(edge) for edge in found.edges],
            "neighbours": [asdict(node) for node in found.neighbours],
        }
    )


#: the graph's answer stays under Lambda's 6 MB response (JSON, non-ASCII escaped): an entity every document
#: of a big knowledge base names lists every chunk and document that names it, and so may its 200 neighbours
GRAPH_MAX_BYTES = ANSWER_MAX_BYTES
#: what each node and relation keeps of its lists once the answer is past GRAPH_MAX_BYTES
GRAPH_LIST_CAP = 100
_GRAPH_LISTS = ("attributes", "chunk_ids", "knowledge_ids")


def within_graph_size(answer: dict[str, Any]) -> dict[str, Any]:
    """The answer, `truncated` false; past GRAPH_MAX_BYTES, `truncated` true and every node's and relation's
    lists cut to their first GRAPH_LIST_CAP, then the last neighbours, then the last relations left out."""
    if json_size(answer) <= GRAPH_MAX_BYTES:
        return {**answer, "truncated": False}

    def capped(item: dict[str, Any]) -> dict[str, Any]:
        return {k: v[:GRAPH_LIST_CAP] if k in _GRAPH_LISTS else v for k, v in item.items()}

    entity = capped(answer["entity"]) if answer["entity"] else None
    kept: dict[str, list[dict[str, Any]]] = {"relations": [], "neighbours": []}
    used = json_size({"entity": entity, **kept, "truncated": True})
    for part in ("relations", "neighbours"):
        items = list(map(capped, answer[part]))
        kept[part] = items[: fitting(items, GRAPH_MAX_BYTES, used, at_least_one=False)]
        used += json_size(kept[part])
    return {"entity": entity, **kept, "truncated": True}


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
    fingerprint = listing_fingerprint("wiki", kb.id)
    offset, after = _decode(query.cursor, fingerprint) if query.cursor else (0, None)
    index, length = deps.wiki.index_part(kb.id, offset, WIKI_INDEX_CHARS) or ("", 0)
    window, more = deps.wiki.pages_after(kb.id, after, query.limit)  # about one page read, not the wiki
    rows = deps.knowledge.get_many(list(dict.fromkeys(r.knowledge_id for r in window)))
    chunks = deps.chunks.get_many([(r.knowledge_id, r.chunk_id) for r in window])
    pages: list[dict[str, Any]] = []
    answer = AnswerBudget(WIKI_PAGE_MAX_BYTES, used=json_size(index))
    for n, record in enumerate(window):
        if not is_current_page(
            rows.get(record.knowledge_id), kb.id, chunks.get((record.knowledge_id, record.chunk_id))
        ):
            continue
        page = asdict(record)
        if not answer.takes(page):  # the next page goes on from this record
            window, more = window[:n], True
            break
        pages.append(page)
    end = offset + WIKI_INDEX_CHARS
    next_cursor = None
    if more or end < length:
        last = window[-1] if window else None
        position = [last.knowledge_id, last.chunk_id] if last else list(after or ())
        next_cursor = _encode(min(end, length), position, fingerprint)
    return {
        "index": index,
        "pages": pages,
        "next_cursor": next_cursor,
        "has_more": next_cursor is not None,
    }


def _encode(offset: int, after: list[str], fingerprint: str) -> str:
    return encode_cursor({"i": offset, "a": after, "f": fingerprint})


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
