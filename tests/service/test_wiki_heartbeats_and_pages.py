"""The wiki holds a document's task token from its op's put until its pages are in: a long backlog (or a
throttled model) keeps ops pending for longer than the machine's HeartbeatSeconds (3600 s), so the wiki
heartbeats every token it holds, as the runner does (`still_awaited`), once per knowledge base every
HEARTBEAT_EVERY_SECONDS; a token the machine no longer waits for drops its op, and its span says
task_timeout. Before, only the enrichment worker's pickup heartbeated the token, once.

The page list (GET .../wiki) lists the pages the index lists: not those of a document being deleted, of an
earlier attempt, or whose page chunk is gone (`current_pages`). Before, it listed every page record."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryWorkflow
from chalicelib.adapters.memory import wiki as memory_wiki
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.types import Knowledge, ParseStatus, Tenant
from chalicelib.stages import wiki as wiki_stage

from .test_enrichment_replies import ReplyingLLM
from .test_wiki_audit_fixes import NOTES, page_chunks, page_per_document, rows_of
from .test_wiki_stage import deliver_wiki, llm, one_ingest, waiting_for_its_pages, wiki_kb

__all__ = ["llm"]  # the fixture, used by name


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The in-memory wiki repository's time (its heartbeat lease and its claims)."""
    fake = Clock()
    monkeypatch.setattr(memory_wiki, "time", fake)
    return fake


def waiting_documents(deps: Services, tenant: Tenant, count: int) -> tuple[Any, list[Knowledge], list[str]]:
    kb = wiki_kb(deps, tenant)
    docs = [
        waiting_for_its_pages(deps, kb, f"d{n}.md", f"# D{n}\n\nThe keeper logs {n}.\n") for n in range(count)
    ]
    return kb, docs, [f"tok-d{n}.md" for n in range(count)]


def test_an_ingest_heartbeats_the_tokens_of_the_documents_still_waiting(
    deps: Services, tenant: Tenant, workflow: MemoryWorkflow, llm: ReplyingLLM, clock: Clock
) -> None:
    """Seven documents, five per ingest: the two left pending are heartbeaten by the wiki itself, and again
    by an ingest HEARTBEAT_EVERY_SECONDS later, not by every ingest in between."""
    kb, _, tokens = waiting_documents(deps, tenant, 7)
    picked_up = list(workflow.heartbeats)  # the enrichment worker's, when it took each wiki subtask
    assert sorted(picked_up) == sorted(tokens)
    queue = one_ingest(deps, kb)
    queue.deliver("wiki", wiki_stage.handle, deps)
    assert deps.wiki.pending(kb.id) == 2
    by_the_wiki = workflow.heartbeats[len(picked_up) :]
    assert sorted(by_the_wiki) == sorted(tokens)  # the batch's and the two left waiting
    waiting = [op.token for op in deps.wiki.ops(kb.id)]
    assert len(waiting) == 2

    clock.now += 60  # an ingest soon after: within the lease, no heartbeat again
    before = len(workflow.heartbeats)
    wiki_stage.keep_alive(deps, kb.id)
    assert len(workflow.heartbeats) == before

    clock.now += wiki_stage.HEARTBEAT_EVERY_SECONDS  # a backlog later: the waiting tokens again
    wiki_stage.keep_alive(deps, kb.id)
    assert sorted(workflow.heartbeats[before:]) == sorted(waiting)
    deliver_wiki(deps)
    assert all(a.succeeded for t in tokens for a in workflow.answers_to(t))


def test_a_waiting_document_whose_token_timed_out_is_dropped_and_its_span_says_so(
    deps: Services, tenant: Tenant, workflow: MemoryWorkflow, llm: ReplyingLLM, clock: Clock
) -> None:
    kb, docs, tokens = waiting_documents(deps, tenant, 2)
    workflow.close_task(tokens[0])  # HeartbeatSeconds ran out: the machine released its slot
    calls = len(llm.requests)
    one_ingest(deps, kb).deliver("wiki", wiki_stage.handle, deps)
    wiki_calls = [r for r in llm.requests[calls:] if r["kind"] == "wiki"]
    assert len(wiki_calls) == 1  # the live document's pages only
    assert deps.wiki.pending(kb.id) == 0 and deps.wiki.claim_ops(kb.id, 5, 0) == []  # its op is gone
    assert workflow.answers_to(tokens[0]) == []
    assert [a.succeeded for a in workflow.answers_to(tokens[1])] == [True]
    row = deps.knowledge.get(docs[0].id)
    assert row is not None
    spans = {c["span_id"]: c for s in deps.tracker.view(row)["trace"] for c in s.get("children", [])}
    assert spans["postprocess.wiki"]["status"] == "failed"
    assert spans["postprocess.wiki"]["error_code"] == SpanErrorCode.TASK_TIMEOUT


def test_the_page_list_lists_only_the_pages_the_index_lists(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    from chalicelib.operations.enrichment_outputs import wiki
    from chalicelib.operations.knowledge_changes import delete_knowledge

    llm.replies["wiki"] = page_per_document
    kb = wiki_kb(deps, tenant)
    one = waiting_for_its_pages(deps, kb, "one.md", NOTES)
    two = waiting_for_its_pages(deps, kb, "two.md", "# Two\n\nOil, wicks and bread arrive by boat.\n")
    three = waiting_for_its_pages(deps, kb, "three.md", "# Three\n\nCranes lift containers.\n")
    waiting_for_its_pages(deps, kb, "four.md", "# Four\n\nThe ferry leaves at eight.\n")
    deliver_wiki(deps)
    assert len(wiki(deps, tenant.id, kb.id)["pages"]) == 4
    rows_of(deps).write_fields(one.id, attempt=one.attempt + 1, parse_status=ParseStatus.PROCESSING)
    deps.chunks.delete_many(two.id, [c.id for c in page_chunks(deps, two.id)])
    delete_knowledge(deps, tenant.id, three.id)  # being deleted: its lifecycle task has not run yet
    listed = wiki(deps, tenant.id, kb.id)
    assert [p["document"] for p in listed["pages"]] == ["four.md"]
    wiki_stage.finalize(deps, kb.id)
    index = wiki(deps, tenant.id, kb.id)["index"]
    assert "Page of four.md" in index
    assert all(f"Page of {name}" not in index for name in ("one.md", "two.md", "three.md"))
    assert json.dumps(listed)  # the answer stays plain data
