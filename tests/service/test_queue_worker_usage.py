"""The queue workers outside the stage runner meter what they spend: a wiki ingest and a re-embed write one
usage entry per document they worked for (the model's tokens included), a wiki finalize and an FAQ import
one for their knowledge base (tests/service/test_usage_shares.py: how an invocation is split and keyed)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.domain import metering
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.operations.cost import kb_cost, knowledge_cost
from chalicelib.ports import UsageEntry

from .faq_support import CountingEmbedding
from .test_enrichment_replies import ReplyingLLM
from .test_faq import entry, run_import
from .test_move_clone import run_lifecycle
from .test_reembed import NEW, docs, reembed  # noqa: F401
from .test_wiki_stage import deliver_wiki, llm, waiting_for_its_pages, wiki_calls, wiki_kb  # noqa: F401

WIKI_TOKENS = {"prompt_tokens": 100, "completion_tokens": 50}


def kb_usage_id(kb_id: str) -> str:
    from chalicelib.services.usage import kb_usage_id

    return kb_usage_id(kb_id)


def entries_of(deps: Services, knowledge_id: str, stage: str) -> list[UsageEntry]:
    return [e for e in deps.usage.for_knowledge(knowledge_id) if e.stage == stage]


def tokens(entries: Sequence[UsageEntry]) -> dict[str, float]:
    total: dict[str, float] = {}
    for e in entries:
        for name, amount in e.counts.items():
            if name.startswith(metering.TOKENS_PREFIX):
                total[name] = total.get(name, 0) + amount
    return total


def answering_with_usage(monkeypatch: Any) -> None:
    original = ReplyingLLM.answer

    def with_usage(self: ReplyingLLM, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status, payload = original(self, body)
        return status, dict(payload, usage=WIKI_TOKENS)

    monkeypatch.setattr(ReplyingLLM, "answer", with_usage)


def test_each_wiki_ingested_document_has_its_own_entry_with_its_tokens(
    deps: Services,
    tenant: Tenant,
    llm: ReplyingLLM,  # noqa: F811
    monkeypatch: Any,
) -> None:
    answering_with_usage(monkeypatch)
    kb = wiki_kb(deps, tenant)
    keeper = waiting_for_its_pages(
        deps, kb, "keeper.md", "# Keeper\n\nThe keeper logs the weather at dawn.\n"
    )
    pilot = waiting_for_its_pages(deps, kb, "pilot.md", "# Pilot\n\nThe pilot boards ships at the bar.\n")
    deliver_wiki(deps)
    assert wiki_calls(llm, "keeper.md") == wiki_calls(llm, "pilot.md") == 1
    for document in (keeper, pilot):
        [own] = entries_of(deps, document.id, "wiki")
        assert own.attempt == document.attempt and own.kb_id == kb.id and own.tenant_id == tenant.id
        spent = tokens([own])  # what the chat model reported for this document's pages, no other's
        assert sorted((name.split(":", 1)[0], amount) for name, amount in spent.items()) == [
            ("tokens_input", 100.0),
            ("tokens_output", 50.0),
        ]
        assert own.counts[metering.LAMBDA_REQUESTS] > 0  # a part of the invocation's own cost
        assert "wiki" in knowledge_cost(deps, tenant.id, document.id)["by_stage"]
    # the finalize (and an ingest that found no op left) worked for no one document: the knowledge base's own
    own_work = entries_of(deps, kb_usage_id(kb.id), "wiki")
    assert own_work and all(e.kb_id == kb.id and e.attempt == 0 for e in own_work)
    assert not tokens(own_work)
    report = kb_cost(deps, tenant.id, kb.id)
    assert report["knowledge_base_work"]["aws_dollars"] > 0
    assert report["documents"] == 2


class Counting(HashingEmbedding):
    """The re-embed's new model, reporting 10 tokens per text as a paid provider does."""

    def __init__(self) -> None:
        super().__init__(32)
        self.model_id = NEW

    def embed(self, texts: Sequence[str]) -> Any:
        metering.record_tokens(NEW, 10 * len(texts))
        return super().embed(texts)


def test_a_reembed_writes_each_documents_tokens_to_its_own_entry(
    deps: Services,
    docs: tuple[KnowledgeBase, list[str]],  # noqa: F811
) -> None:
    deps._embedders[NEW] = Counting()
    kb, ids = docs
    chunks = {i: len(deps.chunks.list(i)) for i in ids}
    reembed(deps, kb)
    run_lifecycle(deps)
    for knowledge_id in ids:
        [own] = entries_of(deps, knowledge_id, "reembed")
        row = deps.knowledge.get(knowledge_id)
        assert row is not None and (own.attempt, own.kb_id) == (row.attempt, kb.id)
        assert tokens([own]) == {metering.token_counter("input", NEW): 10.0 * chunks[knowledge_id]}
    # the slice's own costs (its Lambda time, the switch) are split between the documents it worked for
    assert not entries_of(deps, kb_usage_id(kb.id), "lifecycle")


def test_an_faq_import_is_its_knowledge_bases_own_usage(
    deps: Services,
    faq_kb: KnowledgeBase,
    model: CountingEmbedding,
) -> None:
    before = kb_cost(deps, faq_kb.tenant_id, faq_kb.id)
    assert before["knowledge_base_work"] == {"aws_dollars": 0.0, "model_dollars": 0.0}
    run_import(deps, faq_kb, [entry("Opening hours", "9 to 5"), entry("Parking", "Behind the building")])
    [own] = entries_of(deps, kb_usage_id(faq_kb.id), "faq-import")
    assert (own.kb_id, own.tenant_id, own.attempt) == (faq_kb.id, faq_kb.tenant_id, 0)
    assert own.counts[metering.LAMBDA_REQUESTS] > 0
    after = kb_cost(deps, faq_kb.tenant_id, faq_kb.id)
    assert after["knowledge_base_work"]["aws_dollars"] > 0
    assert after["aws_dollars"] == after["knowledge_base_work"]["aws_dollars"]
    assert after["documents"] == 0  # FAQ entries are no documents
