"""How far a search looks: answers that only stand in (a capped document's waiting hits, an FAQ entry whose
negative question the query names) make the engine be asked deeper for a better one, and a file-type filter
reads its rows under one budget (fails before the fix: the cap answered three hits of the sheet, the FAQ
answered the negated entry, the file types read 18,000 rows before refusing)."""

from __future__ import annotations

import random
from datetime import timedelta
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, SearchRequest, validate
from chalicelib.domain.clock import to_iso
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.types import (
    EnableStatus,
    Knowledge,
    KnowledgeBase,
    KnowledgeType,
    ParseStatus,
    Tenant,
    utcnow,
)
from chalicelib.faq.commands import FaqEntryRequest
from chalicelib.faq.entries import create_entry
from chalicelib.faq.entries import search as faq_search
from chalicelib.operations import search as search_module
from chalicelib.operations.create import FileUpload, create_from_file
from chalicelib.operations.knowledge_bases import create_kb

from .conftest import drain


def _upload(deps: Services, kb: KnowledgeBase, name: str, text: str) -> Knowledge:
    return create_from_file(deps, kb.tenant_id, kb.id, FileUpload(data=text.encode(), file_name=name))


def test_the_cap_finds_another_document_ranked_past_the_first_page(deps: Services, tenant: Tenant) -> None:
    settings = {"name": "sheet", "chunking_config": {"chunk_size": 120, "chunk_overlap": 0}}
    kb = create_kb(deps, tenant.id, validate(CreateKnowledgeBase, settings))
    rnd = random.Random(7)
    vocab = [f"w{n}x" for n in range(4000)]
    rows = [f"Harbour tariff row {n}: " + " ".join(rnd.sample(vocab, 8)) + "." for n in range(80)]
    sheet = _upload(deps, kb, "tariffs.md", "\n\n".join(rows))
    memo = _upload(
        deps,
        kb,
        "memo.md",
        "The harbour master wrote a long memo about the weather, the tides, the boats, the moorings, "
        "the lighthouse, the pilots, the cranes and the office hours of the customs desk.",
    )
    drain(deps)
    chunked = deps.knowledge.get(sheet.id)
    assert chunked is not None and chunked.chunk_count > 60  # far more than the first page's 3 + 9 hits

    def documents(**extra: Any) -> list[str]:
        body = {"query_text": "harbour tariff", "match_count": 3, "retriever": "keyword", **extra}
        hits = search_module.hybrid_search(deps, kb.tenant_id, kb.id, validate(SearchRequest, body))
        return ["memo" if h["knowledge_id"] == memo.id else "sheet" for h in hits]

    assert documents() == ["sheet", "sheet", "sheet"]  # the memo ranks below all the sheet's rows
    assert documents(max_chunks_per_document=1) == ["sheet", "sheet", "memo"]  # in score order
    assert documents(max_chunks_per_document=2) == ["sheet", "sheet", "memo"]


def test_an_faq_entry_the_query_negates_goes_below_a_match_past_the_first_page(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    order = create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(
            standard_question="How do I cancel my order",
            similar_questions=[f"cancel my subscription box order number {n}" for n in range(12)],
            negative_questions=["cancel my subscription"],
            answers=["Open the order and press Cancel."],
        ),
    )
    plan = create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(
            standard_question="How to end a subscription plan", answers=["Settings > Plan > End."]
        ),
    )

    def entries(count: int) -> list[str]:
        body = {"query_text": "cancel my subscription", "match_count": count, "retriever": "keyword"}
        return [
            h["entry_id"] for h in faq_search(deps, faq_kb, validate(SearchRequest, body), faq_kb.tenant_id)
        ]

    assert entries(10) == [plan.id, order.id]  # both match, the negated one below
    # the negated entry's 13 questions fill the first page (1 × 4 hits): the other entry is further down
    assert entries(1) == [plan.id]


def test_a_file_type_filter_stops_reading_at_its_budget(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    types = ["pdf", "docx", "md", "txt", "html", "csv"]
    start = utcnow()

    def row(file_type: str, n: int) -> Knowledge:
        return Knowledge(
            id=f"{file_type}-{n:05d}",
            tenant_id=kb.tenant_id,
            kb_id=kb.id,
            type=KnowledgeType.FILE,
            title=f"{n}.{file_type}",
            file_name=f"{n}.{file_type}",
            file_type=file_type,
            parse_status=ParseStatus.COMPLETED,
            enable_status=EnableStatus.ENABLED,
            created_at=start - timedelta(seconds=n),
        )

    # 3,000 rows of each type, under the 5,000 budget one type at a time and over it together: served by a
    # stand-in for the listing index that counts the rows it hands out
    listed = {t: [row(t, n) for n in range(3000)] for t in types}
    read: list[int] = []

    def page_by_kb(
        kb_id: str,
        *,
        index: tuple[str, str] | None = None,
        after: tuple[str, str] | None = None,
        limit: int = 20,
    ) -> list[Knowledge]:
        assert kb_id == kb.id and index is not None and index[0] == "file_type"
        rows = listed[index[1]]
        first = (
            0
            if after is None
            else 1 + next(i for i, r in enumerate(rows) if (to_iso(r.created_at), r.id) == after)
        )
        page = rows[first : first + limit]
        read.append(len(page))
        return page

    monkeypatch.setattr(deps.knowledge, "page_by_kb", page_by_kb)
    with pytest.raises(BadRequest) as refused:
        search_module.hybrid_search(
            deps, kb.tenant_id, kb.id, validate(SearchRequest, {"query_text": "x", "file_types": types})
        )
    assert refused.value.code == "filter_too_broad"
    # the page holding the row past the budget is the last one read
    assert sum(read) <= search_module.MAX_FILTER_DOCUMENTS + search_module._PAGE


def test_a_capped_search_of_one_document_asks_once_and_reads_each_row_once(
    deps: Services, tenant: Tenant
) -> None:
    """Within one document (a `knowledge_ids` filter naming it) no other document's hit can come: the cap
    asks the engine no deeper than an uncapped search. A knowledge base of one document does not know it
    is one and looks down to the engine's best 400 hits, but reads each row once however many rounds."""
    settings = {"name": "sheet", "chunking_config": {"chunk_size": 120, "chunk_overlap": 0}}
    kb = create_kb(deps, tenant.id, validate(CreateKnowledgeBase, settings))
    rnd = random.Random(7)
    vocab = [f"w{n}x" for n in range(4000)]
    rows = [f"Harbour tariff row {n}: " + " ".join(rnd.sample(vocab, 8)) + "." for n in range(600)]
    sheet = _upload(deps, kb, "t.md", "\n\n".join(rows))
    drain(deps, max_batches=400)
    engine = deps.engine(kb.retrieval_engine)
    calls: list[int] = []
    real_search = engine.hybrid_search

    def counted(*args: Any, **kwargs: Any) -> Any:
        hits = real_search(*args, **kwargs)
        calls.append(len(hits))
        return hits

    engine.hybrid_search = counted  # type: ignore[method-assign]
    asked: list[tuple[str, str]] = []
    real_get_many = deps.chunks.get_many

    def noted(keys: Any) -> Any:
        asked.extend(keys)
        return real_get_many(keys)

    deps.chunks.get_many = noted  # type: ignore[method-assign]

    def ask(**extra: Any) -> list[str]:
        calls.clear()
        asked.clear()
        body = {"query_text": "harbour tariff", "match_count": 3, "retriever": "keyword", **extra}
        answer = search_module.hybrid_search(deps, kb.tenant_id, kb.id, validate(SearchRequest, body))
        return [hit["id"] for hit in answer]

    plain = ask(knowledge_ids=[sheet.id])
    plain_calls = len(calls)
    assert ask(knowledge_ids=[sheet.id], max_chunks_per_document=1) == plain
    assert len(calls) == plain_calls
    assert ask(max_chunks_per_document=1) == plain
    assert len(asked) == len(set(asked)), "a row was read again by a deeper round"
