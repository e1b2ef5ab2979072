"""A page of `GET /knowledge-bases/{id}/knowledge` stays under Lambda's 6 MB response (JSON, non-ASCII
escaped): 100 rows with 64 KB of CJK metadata and a long description passed it. A page past its byte budget
ends early with the cursor of its last row, so every row is listed once; `page` > 1 walks over pages cut the
same way, so page N is the N-th page the cursors give."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import ListKnowledgeQuery
from chalicelib.domain.types import Knowledge, KnowledgeBase, KnowledgeType
from chalicelib.operations import listing

NOTE = "港口的起重机每天早上装卸集装箱。" * 60


def _rows(deps: Services, kb: KnowledgeBase, count: int) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for n in range(count):
        deps.knowledge.insert(
            Knowledge(
                id=f"k-{n:03d}",
                tenant_id=kb.tenant_id,
                kb_id=kb.id,
                type=KnowledgeType.MANUAL,
                title=f"harbour {n}",
                description=NOTE,
                metadata={"note": NOTE},
                created_at=start + timedelta(minutes=n),
            )
        )


def test_a_page_past_its_byte_budget_ends_early_and_the_next_page_starts_where_it_ended(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    _rows(deps, kb, 10)
    whole = listing.list_knowledge(deps, kb.tenant_id, kb.id, ListKnowledgeQuery(page_size=100))
    assert whole["next_cursor"] is None and len(whole["items"]) == 10
    one = max(len(json.dumps(item)) for item in whole["items"])
    monkeypatch.setattr(listing, "PAGE_MAX_BYTES", 3 * one, raising=False)

    seen: list[str] = []
    pages: list[list[str]] = []
    cursor = None
    for _ in range(11):
        page = listing.list_knowledge(
            deps, kb.tenant_id, kb.id, ListKnowledgeQuery(page_size=100, cursor=cursor)
        )
        assert 1 <= len(page["items"]) <= 3 and page["total"] is None  # a page cut short counts nothing
        pages.append([item["id"] for item in page["items"]])
        seen += pages[-1]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [item["id"] for item in whole["items"]] and len(pages) >= 4
    # an old client's page numbers walk the same pages
    for number, expected in enumerate(pages, start=1):
        old = listing.list_knowledge(
            deps, kb.tenant_id, kb.id, ListKnowledgeQuery(page_size=100, page=number)
        )
        assert [item["id"] for item in old["items"]] == expected
