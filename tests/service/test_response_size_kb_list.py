"""A page of `GET /knowledge-bases` stays under Lambda's 6 MB response (JSON, non-ASCII escaped): 100
knowledge bases with 10,000-character CJK descriptions passed it. A page past its byte budget ends early with
the cursor of its last knowledge base, so every one is listed once."""

from __future__ import annotations

import json

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.types import Tenant
from chalicelib.operations import knowledge_bases
from chalicelib.operations.knowledge_bases import ListKnowledgeBasesQuery, create_kb, kb_view

NOTE = "港口的起重机每天早上装卸集装箱。" * 100


def test_a_page_past_its_byte_budget_ends_early_and_the_next_page_starts_where_it_ended(
    deps: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(10):
        create_kb(deps, tenant.id, CreateKnowledgeBase(name=f"harbour {n}", description=NOTE))
    whole, end = knowledge_bases.list_kbs(deps, tenant.id, ListKnowledgeBasesQuery(limit=100))
    assert end is None and len(whole) >= 10
    one = max(len(json.dumps(kb_view(kb, tenant.id))) for kb in whole)
    monkeypatch.setattr(knowledge_bases, "PAGE_MAX_BYTES", 3 * one, raising=False)

    seen: list[str] = []
    cursor = None
    for _ in range(len(whole) + 1):
        page, cursor = knowledge_bases.list_kbs(
            deps, tenant.id, ListKnowledgeBasesQuery(limit=100, cursor=cursor)
        )
        assert 1 <= len(page) <= 3
        seen += [kb.id for kb in page]
        if cursor is None:
            break
    assert seen == [kb.id for kb in whole]
