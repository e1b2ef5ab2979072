"""The embedding cache is each tenant's own (a reviewer's proof, sec_iso): keyed by content alone, another
tenant's `cache_hits` (a document's embedding span, an FAQ import's task progress) told whether anyone had
embedded a guessed text or searched a guessed phrase, even after that document was deleted."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, SearchRequest
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.search import hybrid_search
from chalicelib.operations.tenants import create_tenant_with_key

from .conftest import drain, embedding_outputs, upload
from .faq_support import CountingEmbedding, faq_kb_named
from .test_faq import run_import

SECRET = b"# Payroll\n\nAlice Example is paid 187,400 EUR a year; Bob Example 92,150 EUR.\n"
PHRASE = "severance terms for the Rotterdam plant closure"


def _other_tenant(deps: Services) -> Tenant:
    created, _ = create_tenant_with_key(deps, "other")
    return created


def _kb(deps: Services, tenant: Tenant, name: str = "payroll") -> KnowledgeBase:
    return create_kb(deps, tenant.id, CreateKnowledgeBase(name=name))


def _counts(outputs: dict[str, Any]) -> tuple[int, int]:
    return int(outputs.get("cache_hits", 0)), int(outputs.get("texts_embedded", 0))


def test_another_tenants_document_of_the_same_text_is_no_cache_hit(
    deps: Services, tenant: Tenant, model: CountingEmbedding
) -> None:
    victim = upload(deps, _kb(deps, tenant), "payroll.md", SECRET)
    drain(deps)
    assert _counts(embedding_outputs(deps, victim)) == (0, 1)
    guess = upload(deps, _kb(deps, _other_tenant(deps)), "payroll.md", SECRET)
    drain(deps)
    assert _counts(embedding_outputs(deps, guess)) == (0, 1)  # embedded again: nothing told it apart
    mine = upload(deps, _kb(deps, tenant, "copy"), "payroll.md", SECRET)  # the tenant's own copy still hits
    drain(deps)
    assert _counts(embedding_outputs(deps, mine)) == (1, 0)


def test_an_faq_import_does_not_tell_another_tenants_search_query(
    deps: Services, tenant: Tenant, model: CountingEmbedding
) -> None:
    searched = hybrid_search(deps, tenant.id, _kb(deps, tenant).id, SearchRequest(query_text=PHRASE))
    assert searched == []
    faq = faq_kb_named(deps, _other_tenant(deps), "faq")
    view = run_import(deps, faq, [{"standard_question": PHRASE, "answers": ["x"]}], mode="append")
    assert view["progress"]["texts_embedded"] == 1
    assert model.texts.count(PHRASE) == 2  # the query's, then the import's own


def test_a_shared_knowledge_bases_searches_are_not_cached_for_its_owner(
    deps: Services, tenant: Tenant, model: CountingEmbedding, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader's search of a shared knowledge base is embedded under the reader's cache, not the owner's:
    under the owner's, the owner's own import of the same text showed `texts_embedded` 0 (a reviewer's
    proof: the owner learnt what a reader searched)."""
    from chalicelib.commands import ShareRequest
    from chalicelib.operations.shares import share
    from chalicelib.services import ownership

    phrase = "severance terms for the Rotterdam plant closure"
    reader = _other_tenant(deps)
    shared = _kb(deps, tenant, "handbook")
    share(deps, tenant.id, shared.id, ShareRequest(tenant_id=reader.id))
    monkeypatch.setattr(ownership, "_reads_shared", lambda _tenant_id: True)  # a reading request's rule
    hybrid_search(deps, reader.id, shared.id, SearchRequest(query_text=phrase))  # the reader's search
    faq = faq_kb_named(deps, tenant, "faq")  # the owner's own FAQ import of the same text
    view = run_import(deps, faq, [{"standard_question": phrase, "answers": ["x"]}], mode="append")
    assert view["progress"]["texts_embedded"] == 1
    assert model.texts.count(phrase) == 2
