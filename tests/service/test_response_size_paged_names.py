"""Two listings that had no cursor stay under Lambda's 6 MB response (JSON, non-ASCII escaped): an FAQ
knowledge base's tag names (`GET …/faq/tags`: ~13,500 names of 64 CJK characters passed it) and the
operator's tenants (`GET /admin/tenants`: ~6,000 tenants with CJK names). Past the byte budget a page ends
early; `next_cursor` and `has_more` beside `data` go on from where it ended, so every one is listed once."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateTenantRequest
from chalicelib.faq import entries
from chalicelib.faq.commands import FaqEntryRequest
from chalicelib.operations import admin
from chalicelib.operations.tenants import create_tenant_with_key

from .faq_support import CountingEmbedding, faq_kb_named

V1 = "/api/v1"


def _walk(get: Callable[[str], Any], path: str) -> list[list[Any]]:
    """Every page of a listing, following `next_cursor` from the first."""
    pages: list[list[Any]] = []
    cursor = ""
    for _ in range(50):
        answer = get(f"{path}?cursor={cursor}" if cursor else path)
        assert answer.status_code == 200, answer.body
        body = answer.json_body
        pages.append(body["data"])
        assert body["has_more"] == (body["next_cursor"] is not None)
        if body["next_cursor"] is None:
            return pages
        cursor = body["next_cursor"]
    raise AssertionError("the listing never ended")


def test_the_faq_tags_page_by_size_and_every_name_is_listed_once(
    deps: Services, client: Client, model: CountingEmbedding, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant, key = create_tenant_with_key(deps, "acme")
    kb = faq_kb_named(deps, tenant, "faq")
    names = [f"港口标签{n:02d}" for n in range(12)]
    for n in range(0, 12, 3):
        request = FaqEntryRequest(
            standard_question=f"question {n}", answers=["answer"], tags=names[n : n + 3]
        )
        entries.create_entry(deps, tenant.id, kb.id, request)
    one = len(json.dumps(names[0])) + 1
    monkeypatch.setattr(entries, "FAQ_ANSWER_MAX_BYTES", 3 * one + 1, raising=False)

    path = f"{V1}/knowledge-bases/{kb.id}/faq/tags"
    pages = _walk(lambda at: client.http.get(at, headers={"X-API-Key": key}), path)
    assert [len(page) for page in pages] == [3, 3, 3, 3]
    assert [name for page in pages for name in page] == sorted(names)


def test_the_operators_tenant_listing_pages_by_size_and_lists_every_tenant_once(
    deps: Services, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps.settings = replace(deps.settings, operator_key="op-secret")
    for n in range(10):
        admin.create_tenant(deps, CreateTenantRequest(name=f"港口公司{n}"))
    every = sorted(t.id for t in deps.tenants.page("", 1000))
    one = max(len(json.dumps(admin.tenant_view(t))) + 1 for t in deps.tenants.page("", 1000))
    monkeypatch.setattr(admin, "TENANTS_PAGE_MAX_BYTES", 3 * one + 1, raising=False)

    headers = {"X-Operator-Key": "op-secret"}
    pages = _walk(lambda at: client.http.get(at, headers=headers), f"{V1}/admin/tenants")
    assert all(1 <= len(page) <= 3 for page in pages) and len(pages) >= 4
    assert [t["id"] for page in pages for t in page] == every
