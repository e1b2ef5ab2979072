"""A wiki ingest claims up to five documents and asks the model for each in turn (a call may take minutes).
Once the invocation is out of time it starts no further document: the ones left go back to pending and a
follow-up ingest takes them. Before, it went on into the next model call, which the Lambda's timeout cut
off: the call was paid for nothing, and the documents left stayed claimed until the queue redelivered the
message half an hour later (a receive spent each time, so a slow model could send the message to its DLQ
with documents still claimed and no ingest coming for them)."""

from __future__ import annotations

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus, Tenant
from chalicelib.stages import wiki as wiki_stage

from .conftest import failed_ids
from .test_enrichment_replies import ReplyingLLM
from .test_wiki_stage import deliver_wiki, llm, one_ingest, status, waiting_for_its_pages, wiki_calls, wiki_kb  # noqa: F401


def _three_waiting(
    deps: Services, tenant: Tenant, line: str
) -> tuple[KnowledgeBase, list[str], list[Knowledge], MemoryTaskQueue]:
    """A wiki knowledge base with three documents waiting for their pages, and the one ingest for them."""
    kb = wiki_kb(deps, tenant)
    names = ["one.md", "two.md", "three.md"]
    rows = [waiting_for_its_pages(deps, kb, name, f"# {name}\n\n{line}, {name}.\n") for name in names]
    return kb, names, rows, one_ingest(deps, kb)


def test_an_ingest_out_of_time_starts_no_further_document_and_hands_the_rest_over(
    deps: Services,
    tenant: Tenant,
    workflow: MemoryWorkflow,
    llm: ReplyingLLM,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kb, names, rows, queue = _three_waiting(deps, tenant, "The keeper logs the weather at dawn")
    asked: list[str] = []
    pages_of = wiki_stage._pages

    def pages(deps_: Services, knowledge: object, kb_: object) -> int:
        asked.append(knowledge.title)  # type: ignore[attr-defined]
        return pages_of(deps_, knowledge, kb_)  # type: ignore[arg-type]

    monkeypatch.setattr(wiki_stage, "_pages", pages)
    monkeypatch.setattr(wiki_stage, "out_of_time", lambda: bool(asked))  # spent on the first document
    assert failed_ids(queue.deliver("wiki", wiki_stage.handle, deps)) == []
    assert len(asked) == 1  # the first document always (progress), then no further model call
    assert deps.wiki.pending(kb.id) == 2  # the rest back to pending, not held by a claim
    assert any(m.json()["action"] == "ingest" for m in queue.waiting("wiki"))  # and an ingest for them

    monkeypatch.setattr(wiki_stage, "out_of_time", lambda: False)  # a fresh invocation
    deliver_wiki(deps)
    assert all(status(deps, row) == ParseStatus.COMPLETED for row in rows)
    assert all(wiki_calls(llm, name) == 1 for name in names)
    assert all([a.succeeded for a in workflow.answers_to(f"tok-{name}")] == [True] for name in names)


def test_a_store_error_mid_batch_leaves_no_document_claimed_without_an_ingest_coming(
    deps: Services,
    tenant: Tenant,
    workflow: MemoryWorkflow,
    llm: ReplyingLLM,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A throttled write while the first document's slot was settled failed the message: its retry, seconds
    later, found every document of the batch still claimed, claimed nothing and was consumed, so no ingest
    came for them: the rest never got pages, and all waited for the state machine's timeout."""
    kb, names, rows, queue = _three_waiting(deps, tenant, "Oil and wicks arrive by boat")
    settle = wiki_stage.settle_slot
    throttled = {"once": True}

    def settle_or_throttle(*args: object) -> None:
        if throttled.pop("once", False):
            raise RuntimeError("ProvisionedThroughputExceededException")  # a store's transient error
        settle(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(wiki_stage, "settle_slot", settle_or_throttle)
    assert len(failed_ids(queue.deliver("wiki", wiki_stage.handle, deps))) == 1  # retried by the queue
    assert deps.wiki.pending(kb.id) == len(names)  # none held by the failed delivery's claim
    deliver_wiki(deps)
    assert all(status(deps, row) == ParseStatus.COMPLETED for row in rows)
    assert all(wiki_calls(llm, name) == 1 for name in names)  # the written pages were kept, not asked again
    assert all([a.succeeded for a in workflow.answers_to(f"tok-{name}")] == [True] for name in names)
