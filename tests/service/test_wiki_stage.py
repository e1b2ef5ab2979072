"""The wiki ingest claims up to five documents at once; each stands on its own. A reply that cannot be read
fails its document only; a throttled model puts the document back for a later ingest; an error of no known
kind puts it back for the queue's retry and fails it on the last try; a redelivered ingest keeps the pages
an earlier one wrote. Before, any of these retried the whole message, whose retry found the documents still
claimed, claimed nothing and was removed: every document of the batch stayed finalizing until the state
machine's timeout."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import ChunkType, Knowledge, KnowledgeBase, ParseStatus, Tenant
from chalicelib.ports import IndexSpace
from chalicelib.stages import enrichment
from chalicelib.stages import wiki as wiki_stage

from .conftest import drain, failed_ids, task_body, upload
from .test_enrichment_replies import ReplyingLLM, llm_kb, use_models


@pytest.fixture
def llm(deps: Services) -> Iterator[ReplyingLLM]:
    scripted = ReplyingLLM()
    with scripted:
        use_models(deps, scripted)
        deps.settings = replace(deps.settings, wiki_ingest_delay_seconds=0, wiki_finalize_delay_seconds=0)
        yield scripted


def wiki_kb(deps: Services, tenant: Tenant) -> KnowledgeBase:
    return llm_kb(deps, tenant, indexing_strategy={"wiki_enabled": True})


def waiting_for_its_pages(deps: Services, kb: KnowledgeBase, name: str, text: str) -> Knowledge:
    """A finalizing document whose wiki subtask ran: its op is recorded, an ingest is queued."""
    created = upload(deps, kb, name, text.encode())
    drain(deps)
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    knowledge = rows.write_fields(created.id, parse_status=ParseStatus.FINALIZING, pending_subtasks_count=1)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw("enrichment", task_body(knowledge, f"tok-{name}", subtask=planned_subtask("wiki")))
    queue.deliver("enrichment", enrichment.handle, deps)
    return knowledge


def deliver_wiki(deps: Services, rounds: int = 12) -> list[int]:
    """Wiki messages until none is left; the failures of each delivery."""
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    failures = []
    for _ in range(rounds):
        if not queue.waiting("wiki"):
            break
        failures.append(len(failed_ids(queue.deliver("wiki", wiki_stage.handle, deps))))
    assert not queue.waiting("wiki")
    return failures


def one_ingest(deps: Services, kb: KnowledgeBase) -> MemoryTaskQueue:
    """The documents' ingest triggers as one message (SQS would deliver them apart, in time)."""
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.purge("wiki")
    queue.send_raw("wiki", {"kb_id": kb.id, "action": "ingest"})
    return queue


def wiki_calls(llm: ReplyingLLM, title: str) -> int:
    return sum(1 for r in llm.requests if r["kind"] == "wiki" and r["user"].startswith(f"Document: {title}"))


def status(deps: Services, knowledge: Knowledge) -> ParseStatus:
    row = deps.knowledge.get(knowledge.id)
    assert row is not None
    return row.parse_status


def test_a_reply_that_cannot_be_read_fails_its_document_and_no_other(
    deps: Services, tenant: Tenant, workflow: MemoryWorkflow, llm: ReplyingLLM
) -> None:
    def poisoned(body: dict[str, Any]) -> str:
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        title = user.split("\n", 1)[0].removeprefix("Document: ")
        return (
            "[" * 50_000
            if title == "poison.md"
            else json.dumps([{"title": f"{title} page", "content": "ok"}])
        )

    llm.replies["wiki"] = poisoned
    kb = wiki_kb(deps, tenant)
    poison = waiting_for_its_pages(
        deps, kb, "poison.md", "# Poison\n\nThe keeper logs the weather at dawn.\n"
    )
    innocent = waiting_for_its_pages(deps, kb, "innocent.md", "# Innocent\n\nOil arrives by boat monthly.\n")
    assert deliver_wiki(deps) == [0, 0]  # the ingest, its finalize
    [failed] = workflow.answers_to("tok-poison.md")
    assert not failed.succeeded and (failed.error, failed.cause) == ("wiki.failed", "model_reply_malformed")
    span = deps.spans.get(poison.id, poison.attempt, "postprocess.wiki")
    assert span is not None and span.error_code == "model_reply_malformed"
    assert [a.succeeded for a in workflow.answers_to("tok-innocent.md")] == [True]
    assert status(deps, innocent) == ParseStatus.COMPLETED
    assert deps.wiki.pending(kb.id) == 0 and deps.wiki.claim_ops(kb.id, 5, 0) == []  # no op held
    later = waiting_for_its_pages(deps, kb, "later.md", "# Later\n\nCranes lift containers in the harbour.\n")
    deliver_wiki(deps)
    assert status(deps, later) == ParseStatus.COMPLETED
    assert wiki_calls(llm, "poison.md") == 1


def test_a_throttled_model_puts_the_document_back_for_an_ingest_a_minute_later(
    deps: Services, tenant: Tenant, workflow: MemoryWorkflow, llm: ReplyingLLM
) -> None:
    throttled = {"once": True}
    answer = llm.answer

    def throttle_once(body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status_code, payload = answer(body)
        if llm.requests[-1]["kind"] == "wiki" and throttled.pop("once", False):
            return 429, {"error": {"code": "rate_limited", "message": "slow down"}}
        return status_code, payload

    llm.answer = throttle_once  # type: ignore[method-assign]
    kb = wiki_kb(deps, tenant)
    one = waiting_for_its_pages(deps, kb, "one.md", "# One\n\nThe keeper logs the weather at dawn.\n")
    two = waiting_for_its_pages(deps, kb, "two.md", "# Two\n\nOil, wicks and bread arrive by boat.\n")
    queue = one_ingest(deps, kb)
    assert len(failed_ids(queue.deliver("wiki", wiki_stage.handle, deps))) == 0
    backed_off = [m for m in queue.waiting("wiki") if m.json()["action"] == "ingest"]
    assert [m.delay_seconds for m in backed_off] == [wiki_stage.MODEL_BACKOFF_SECONDS]
    assert deps.wiki.pending(kb.id) == 1  # back to pending, not held by a claim
    deliver_wiki(deps)
    assert status(deps, one) == ParseStatus.COMPLETED and status(deps, two) == ParseStatus.COMPLETED
    assert all(a.succeeded for t in ("tok-one.md", "tok-two.md") for a in workflow.answers_to(t))


def test_an_unknown_error_is_retried_by_the_queue_and_fails_its_document_on_the_last_try(
    deps: Services,
    tenant: Tenant,
    workflow: MemoryWorkflow,
    llm: ReplyingLLM,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.enrich import wiki as wiki_module

    pages_for = wiki_module.pages_for

    def broken_for_one(chat: Any, title: str, text: str) -> Any:
        if title == "broken.md":
            raise RuntimeError("a bug")
        return pages_for(chat, title, text)

    monkeypatch.setattr(wiki_module, "pages_for", broken_for_one)
    kb = wiki_kb(deps, tenant)
    broken = waiting_for_its_pages(deps, kb, "broken.md", "# Broken\n\nThe keeper logs the weather.\n")
    fine = waiting_for_its_pages(deps, kb, "fine.md", "# Fine\n\nOil, wicks and bread arrive by boat.\n")
    queue = one_ingest(deps, kb)
    assert len(failed_ids(queue.deliver("wiki", wiki_stage.handle, deps))) == 1
    assert status(deps, fine) == ParseStatus.COMPLETED
    assert deps.wiki.pending(kb.id) == 1  # the broken one, claimable by the retry
    deliver_wiki(deps)
    [failed] = workflow.answers_to("tok-broken.md")
    assert not failed.succeeded and failed.error == "wiki.failed"
    assert deps.wiki.pending(kb.id) == 0 and deps.wiki.claim_ops(kb.id, 5, 0) == []
    assert status(deps, broken) == ParseStatus.FINALIZING  # its slot is the state machine's catch's


def test_a_redelivered_ingest_keeps_the_pages_an_earlier_one_wrote(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    """The first delivery wrote four pages and died before it finished the op; the model, asked again,
    answered two: the other two stayed searchable, out of the wiki's page list."""
    kb = wiki_kb(deps, tenant)
    knowledge = waiting_for_its_pages(
        deps, kb, "notes.md", "# Notes\n\nThe keeper logs the weather at dawn.\n"
    )
    llm.replies["wiki"] = json.dumps([{"title": f"Page {i}", "content": f"Body {i}."} for i in range(4)])
    assert wiki_stage._pages(deps, knowledge, kb) == 4
    llm.replies["wiki"] = json.dumps([{"title": f"Other {i}", "content": f"Other {i}."} for i in range(2)])
    assert wiki_stage._pages(deps, knowledge, kb) == 4
    assert wiki_calls(llm, "notes.md") == 1
    titles = [f"Page {i}" for i in range(4)]
    assert sorted(r.title for r in deps.wiki.pages(kb.id)) == titles
    pages = [c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.WIKI_PAGE]
    assert sorted(c.metadata["wiki_title"] for c in pages) == titles
    space = IndexSpace.of(deps.embedding_model(kb.embedding_model_id))
    entries = deps.engine(kb.retrieval_engine).entries_of(space, kb.id, knowledge.id)
    assert sorted(e.chunk_id for e in entries if e.chunk_type == "wiki_page") == sorted(c.id for c in pages)
