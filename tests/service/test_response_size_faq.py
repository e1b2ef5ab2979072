"""An FAQ knowledge base's answers stay under Lambda's 6 MB response (JSON, non-ASCII escaped): 100 entries of
up to 350 KB each would pass it. A list page past its byte budget ends early and its cursor starts the next
page at the first entry left out (every entry listed once); a search answer past it leaves its last results
out (the best one always stays)."""

from __future__ import annotations

import json

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import SearchRequest
from chalicelib.domain.types import KnowledgeBase
from chalicelib.faq import entries
from chalicelib.faq.commands import FaqEntryRequest, FaqListQuery
from chalicelib.operations.search import hybrid_search

ANSWER = "港口的起重机每天早上装卸集装箱。" * 40


def _entries(deps: Services, kb: KnowledgeBase, count: int) -> None:
    for n in range(count):
        request = FaqEntryRequest(standard_question=f"harbour gate question {n}", answers=[ANSWER])
        entries.create_entry(deps, kb.tenant_id, kb.id, request)


def test_a_list_page_past_its_byte_budget_ends_early_and_the_next_page_starts_where_it_ended(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    _entries(deps, faq_kb, 10)
    whole = entries.list_entries(deps, faq_kb.tenant_id, faq_kb.id, FaqListQuery(limit=100))
    assert whole["next_cursor"] == "" and len(whole["items"]) == 10
    one = max(len(json.dumps(item)) for item in whole["items"])
    monkeypatch.setattr(entries, "FAQ_ANSWER_MAX_BYTES", 3 * one, raising=False)

    seen: list[str] = []
    cursor = ""
    for _ in range(11):
        page = entries.list_entries(deps, faq_kb.tenant_id, faq_kb.id, FaqListQuery(limit=100, cursor=cursor))
        assert 1 <= len(page["items"]) <= 3
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == [item["id"] for item in whole["items"]]


def test_a_search_answer_past_its_byte_budget_leaves_its_last_results_out(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    _entries(deps, faq_kb, 6)
    request = SearchRequest(query_text="harbour gate question", match_count=6)
    whole = hybrid_search(deps, faq_kb.tenant_id, faq_kb.id, request)
    assert len(whole) == 6
    one = max(len(json.dumps(result)) for result in whole)
    monkeypatch.setattr(entries, "FAQ_ANSWER_MAX_BYTES", 3 * one, raising=False)

    cut = hybrid_search(deps, faq_kb.tenant_id, faq_kb.id, request)
    assert [r["id"] for r in cut] == [r["id"] for r in whole][: len(cut)]
    assert 1 <= len(cut) <= 3 and len(json.dumps(cut)) <= 3 * one
    monkeypatch.setattr(
        entries, "FAQ_ANSWER_MAX_BYTES", 10, raising=False
    )  # the best result is always answered
    assert [r["id"] for r in hybrid_search(deps, faq_kb.tenant_id, faq_kb.id, request)] == [whole[0]["id"]]
