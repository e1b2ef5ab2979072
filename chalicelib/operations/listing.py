"""GET /knowledge-bases/{id}/knowledge: filters and cursor paging that read about one page, never the whole
knowledge base.

The rows come newest first from one index: the tag's relations (tags table) when a tag is asked for, else
the file-type GSI, else the source GSI, else the knowledge base GSI — each bounded by the time range in its
key condition. What the index cannot say (status, keyword, a second key) is checked on the rows read, and
a request reads at most MAX_READ rows: a short page with a `next_cursor` means "keep going". The cursor is
the position (created_at, id) of the last row consumed, bound to the filters it was made with.

`page` > 1 without a cursor (old clients) walks the earlier pages. Unfiltered, each of them reads its own
rows and no more; filtered, the pages walked over share one MAX_READ budget (each had its own: page 100
with a keyword matching nothing read every row of the knowledge base, up to 100 × MAX_READ). A page that
budget cannot reach is 400 `page_too_deep`: the cursor from page 1 reaches it, MAX_READ rows a request.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chalicelib.commands import ListKnowledgeQuery
from chalicelib.domain import strict_json
from chalicelib.domain.answer_size import ANSWER_MAX_BYTES, AnswerBudget
from chalicelib.domain.clock import to_iso
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.listing import listing_source
from chalicelib.domain.types import Knowledge
from chalicelib.ports import Dependencies
from chalicelib.services.ownership import require_kb
from chalicelib.services.tagging import check_tag_ids

#: rows one request may read when filters are checked on the rows (status, keyword)
MAX_READ = 500
#: rows fetched per index read while filtering on the rows
FILTER_BATCH = 100
#: a page's rows as JSON (non-ASCII escaped, as Lambda sends the answer) stay under its 6 MB response: 100
#: rows with 64 KB of CJK metadata and a 10,000-character description passed it. A page past it ends early
#: with the cursor of its last row (so do the pages `page` > 1 walks over: page N stays the N-th page)
PAGE_MAX_BYTES = ANSWER_MAX_BYTES

Position = tuple[str, str]  # (created_at ISO, knowledge id)


@dataclass
class Listed:
    items: list[Knowledge]
    next_cursor: str | None
    #: rows read from storage for this page (relations and rows of the index), for tests and logs
    read: int
    #: the read budget ended the page, not a full page or the end of the index
    cut_short: bool = False


def list_knowledge(
    deps: Dependencies, tenant_id: str, kb_id: str, query: ListKnowledgeQuery
) -> dict[str, Any]:
    kb = require_kb(deps, tenant_id, kb_id)
    if query.created_from and query.created_to and query.created_from > query.created_to:
        # DynamoDB refuses a BETWEEN whose bounds are reversed (a 500); moto and the fake answered []
        raise BadRequest("created_from is after created_to", code="invalid_query")
    if query.tag_id is not None:  # a tag unknown to this knowledge base, or being deleted: 400, as search
        check_tag_ids(deps, kb.id, [query.tag_id])
    listed = page(deps, kb_id, query)
    return {
        "items": [k.to_dict() for k in listed.items],
        "next_cursor": listed.next_cursor,
        "has_more": listed.next_cursor is not None,
        "page_size": query.page_size,
        "page": query.page if query.cursor is None else None,
        # known without counting only when everything fits on the first page
        "total": len(listed.items)
        if listed.next_cursor is None and query.cursor is None and query.page == 1
        else None,
    }


def page(deps: Dependencies, kb_id: str, query: ListKnowledgeQuery) -> Listed:
    """One page; `page` > 1 without a cursor walks the earlier pages (at most 100). Filtered, the pages
    walked over share one budget of MAX_READ rows; a page each would have cut short by its own budget
    starts the next one where it stopped, so a skipped page the shared budget cut short ends the walk."""
    fingerprint = _fingerprint(kb_id, query)
    after = _decode(query.cursor, fingerprint) if query.cursor else None
    filtering = _plan(deps, kb_id, query)[2]
    read = 0
    for _ in range(0 if query.cursor else query.page - 1):
        budget = MAX_READ - read if filtering else MAX_READ
        if budget <= 0:
            raise _too_deep(query.page)
        skipped = _one_page(deps, kb_id, query, after, fingerprint, budget)
        read += skipped.read
        if skipped.next_cursor is None:
            return Listed([], None, read)
        if skipped.cut_short and budget < MAX_READ:  # its own budget would have read on: its end is unknown
            raise _too_deep(query.page)
        after = _decode(skipped.next_cursor, fingerprint)
    listed = _one_page(deps, kb_id, query, after, fingerprint, MAX_READ)
    listed.read += read
    return listed


def _too_deep(page_number: int) -> BadRequest:
    return BadRequest(
        f"page {page_number} is further than one request reads with these filters: "
        "follow next_cursor from the first page instead",
        code="page_too_deep",
    )


def _one_page(
    deps: Dependencies,
    kb_id: str,
    query: ListKnowledgeQuery,
    after: Position | None,
    fingerprint: str,
    budget: int,
) -> Listed:
    fetch, checks, filtering = _plan(deps, kb_id, query)
    size = query.page_size
    matched: list[tuple[Position, Knowledge]] = []
    read = 0
    position = after
    answer = AnswerBudget(PAGE_MAX_BYTES)
    while True:
        want = size + 1 - len(matched)
        batch = min(budget - read, max(want, FILTER_BATCH) if filtering else want)
        got = fetch(position, batch)
        read += len(got)
        for at, row in got:
            position = at
            if row is not None and all(check(row) for check in checks):
                if not answer.takes(row.to_dict()):  # the next page starts at this row
                    return Listed([r for _, r in matched], _encode(matched[-1][0], fingerprint), read)
                matched.append((at, row))
                if len(matched) > size:  # one more than the page: there is a next page
                    return Listed(
                        [r for _, r in matched[:size]], _encode(matched[size - 1][0], fingerprint), read
                    )
        if len(got) < batch:  # the index has no more
            return Listed([r for _, r in matched], None, read)
        if read >= budget:  # the budget is spent: what matched so far, and where to go on
            assert position is not None
            return Listed([r for _, r in matched], _encode(position, fingerprint), read, cut_short=True)


Fetch = Callable[[Position | None, int], list[tuple[Position, Knowledge | None]]]
Check = Callable[[Knowledge], bool]


def _plan(deps: Dependencies, kb_id: str, query: ListKnowledgeQuery) -> tuple[Fetch, list[Check], bool]:
    """How the rows are read, what is checked on them, and whether that check filters (reads in larger
    batches) or only drops the odd stale relation."""
    created_from = to_iso(query.created_from) if query.created_from else None
    created_to = to_iso(query.created_to) if query.created_to else None
    checks: list[Check] = []
    if query.parse_status is not None:
        checks.append(lambda k: k.parse_status.value == query.parse_status)
    if query.keyword is not None:
        needle = query.keyword.casefold()
        checks.append(lambda k: needle in k.title.casefold() or needle in k.file_name.casefold())
    file_type = query.file_type.lower().lstrip(".") if query.file_type else None

    if query.tag_id is not None:
        tag_id = query.tag_id
        if file_type is not None:
            checks.append(lambda k: k.file_type == file_type)
        if query.source is not None:
            checks.append(lambda k: listing_source(k.type) == query.source)
        filtering = bool(checks)
        checks.append(lambda k: tag_id in k.tag_ids)  # a stale relation (tag since removed) is dropped

        def by_tag(after: Position | None, limit: int) -> list[tuple[Position, Knowledge | None]]:
            keys = deps.tags.tagged(
                kb_id, tag_id, created_from=created_from, created_to=created_to, after=after, limit=limit
            )
            rows = deps.knowledge.get_many([k for _, k in keys]) if keys else {}
            return [(key, rows.get(key[1])) for key in keys]

        return by_tag, checks, filtering

    index: tuple[str, str] | None = None
    if file_type is not None:
        index = ("file_type", file_type)
        if query.source is not None:
            checks.append(lambda k: listing_source(k.type) == query.source)
    elif query.source is not None:
        index = ("source", query.source)

    def by_index(after: Position | None, limit: int) -> list[tuple[Position, Knowledge | None]]:
        rows = deps.knowledge.page_by_kb(
            kb_id, index=index, created_from=created_from, created_to=created_to, after=after, limit=limit
        )
        return [((to_iso(k.created_at), k.id), k) for k in rows]

    return by_index, checks, bool(checks)


def listing_fingerprint(*parts: Any) -> str:
    """What a cursor is bound to (the listing, its tenant or knowledge base, its filters): a cursor sent to
    another listing is refused."""
    return hashlib.sha256(json.dumps(list(parts), sort_keys=True).encode()).hexdigest()[:16]


def encode_cursor(fields: dict[str, Any]) -> str:
    """An opaque cursor carrying `fields` (read back by `cursor_fields`)."""
    raw = json.dumps(fields, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _fingerprint(kb_id: str, query: ListKnowledgeQuery) -> str:
    return listing_fingerprint(kb_id, query.model_dump(mode="json", exclude={"cursor", "page", "page_size"}))


def _encode(position: Position, fingerprint: str) -> str:
    return encode_cursor({"a": list(position), "f": fingerprint})


#: how deep a cursor this service writes nests: an object holding a list of strings
_CURSOR_DEPTH = 2


def cursor_fields(cursor: str) -> dict[str, Any]:
    """The object an opaque cursor (`encode_cursor`'s) carries; BadRequest `invalid_cursor`
    for anything else: not base64, not JSON, nested deeper than a cursor ever is (refused before it is
    parsed), not an object."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("utf-8")
        data = strict_json.loads_nested_at_most(text, _CURSOR_DEPTH)
    except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors
        data = None
    if not isinstance(data, dict):
        raise BadRequest("cursor is not one this listing gave", code="invalid_cursor")
    return data


def _decode(cursor: str, fingerprint: str) -> Position:
    data = cursor_fields(cursor)
    try:
        created_at, knowledge_id = data["a"]
        matches = data["f"] == fingerprint
    except (ValueError, KeyError, TypeError) as error:
        raise BadRequest("cursor is not one this listing gave", code="invalid_cursor") from error
    if not matches or not isinstance(created_at, str) or not isinstance(knowledge_id, str):
        raise BadRequest(
            "cursor belongs to another listing (other filters or knowledge base)", code="invalid_cursor"
        )
    return created_at, knowledge_id
