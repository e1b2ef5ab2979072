"""A page of `GET /knowledge/{id}/chunks` stays under Lambda's 6 MB response: past its byte budget the page
ends early and its cursor starts the next page at the first chunk left out, so every chunk is listed once."""

from __future__ import annotations

import json

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import ChunkListQuery, CreateKnowledgeBase
from chalicelib.domain.types import Tenant
from chalicelib.operations import chunks as chunk_operations
from chalicelib.operations.knowledge_bases import create_kb

from .conftest import MAIN_STAGES, drain, upload

TEXT = "\n\n".join(f"## Part {n}\n\n" + "港口的起重机每天早上装卸集装箱。" * 8 for n in range(12)).encode()


def test_a_page_past_its_byte_budget_ends_early_and_the_next_page_starts_where_it_ended(
    deps: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = {"chunk_size": 150, "chunk_overlap": 0}
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="harbour", chunking_config=config))
    knowledge = upload(deps, kb, "harbour.md", TEXT)
    drain(deps, MAIN_STAGES)
    whole = chunk_operations.list_chunks(deps, tenant.id, knowledge.id, ChunkListQuery(limit=200))
    assert whole["next_cursor"] == "" and len(whole["items"]) >= 10
    one = max(len(json.dumps(item)) for item in whole["items"])
    monkeypatch.setattr(chunk_operations, "CHUNK_PAGE_MAX_BYTES", 3 * one)

    seen: list[str] = []
    cursor = ""
    for _ in range(len(whole["items"]) + 1):
        page = chunk_operations.list_chunks(
            deps, tenant.id, knowledge.id, ChunkListQuery(limit=200, cursor=cursor)
        )
        assert 1 <= len(page["items"]) <= 3
        seen += [item["id"] for item in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == [item["id"] for item in whole["items"]]
