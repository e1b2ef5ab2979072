"""The embedding cache is each tenant's own (a reviewer's proof, sec_iso): keyed by content alone, another
tenant's `cache_hits` (a document's embedding span, an FAQ import's task progress) told whether anyone had
embedded a guessed text or searched a guessed phrase, even after that document was deleted."""

from __future__ import annotations

from typing import Any

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
