"""A knowledge base that keeps no vector and no keyword index, only a wiki and a graph (the API accepts it:
only every index off is refused). Its embedding stage has nothing to embed and hands the document over as it
is; it used to answer that without the `counts` the stage reads, so every document failed there (KeyError,
four tries, then the dead-letter queue). Here the whole path runs: upload, the pipeline, the machine's plan
and subtasks, the wiki; search answers an empty list (hybrid) or 400 (a retriever with no index); stats and
the recount hold; and a chunk edit, a chunk switch, a document switch, a reparse and a delete go through."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from chalice.test import Client
from scripted_llm import CHAT, ScriptedLLM, use_models

from chalicelib.adapters.memory import MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, IndexingStrategySettings
from chalicelib.domain.types import ChunkType, Knowledge, KnowledgeBase, ParseStatus, Tenant
from chalicelib.operations.enrichment_outputs import wiki as wiki_of
from chalicelib.ports import IndexSpace

from .conftest import TEXT, drain, embedding_outputs, failed_ids, task_body, upload

WIKI_AND_GRAPH = {
    "vector_enabled": False,
    "keyword_enabled": False,
    "wiki_enabled": True,
    "graph_enabled": True,
}


@pytest.fixture
def llm(deps: Services) -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as scripted:
        use_models(deps, scripted)
        deps.settings = replace(deps.settings, wiki_ingest_delay_seconds=0, wiki_finalize_delay_seconds=0)
        yield scripted


@pytest.fixture
def api_key(deps: Services) -> str:
    from chalicelib.operations.tenants import create_tenant_with_key

    _, key = create_tenant_with_key(deps, "unindexed")
    return key


def _no_index_kb(deps: Services, tenant_id: str) -> KnowledgeBase:
    from chalicelib.operations.knowledge_bases import create_kb

    kb = create_kb(
        deps,
        tenant_id,
        CreateKnowledgeBase(
            name="wiki and graph",
            summary_model_id=CHAT,
            indexing_strategy=IndexingStrategySettings(**WIKI_AND_GRAPH),
        ),
    )
    assert not kb.indexing_strategy.needs_embedding
    return kb


def _queue(deps: Services) -> MemoryTaskQueue:
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    return queue


def _through_the_machine(
    deps: Services, workflow: MemoryWorkflow, knowledge_id: str, token: str
) -> Knowledge:
    """What the state machine runs after the hand-over: the plan, each planned subtask, then the wiki's
    ingest and finalize; the row as it ends."""
    from chalicelib.stages import enrichment, postprocess
    from chalicelib.stages import wiki as wiki_stage

    row = deps.knowledge.get(knowledge_id)
    assert row is not None and row.parse_status == ParseStatus.PROCESSING, row
    queue = _queue(deps)
    queue.send_raw("postprocess", task_body(row, token))
    while queue.waiting("postprocess"):
        assert failed_ids(queue.deliver("postprocess", postprocess.handle, deps)) == []
    (plan,) = workflow.answers_to(token)
    planned = [subtask["kind"] for subtask in plan.output["subtasks"]]
    assert sorted(planned) == ["graph", "summary", "wiki"], plan.output
    for n, subtask in enumerate(plan.output["subtasks"]):
        queue.send_raw("enrichment", task_body(row, f"{token}.{n}", subtask=subtask))
        while queue.waiting("enrichment"):
            assert failed_ids(queue.deliver("enrichment", enrichment.handle, deps)) == []
        if subtask["kind"] != "wiki":  # the wiki's slot is released by its ingest
            (answer,) = workflow.answers_to(f"{token}.{n}")
            assert answer.succeeded, answer
    for _ in range(10):
        if not queue.waiting("wiki"):
            break
        assert failed_ids(queue.deliver("wiki", wiki_stage.handle, deps)) == []
    assert not queue.waiting("wiki")
    ended = deps.knowledge.get(knowledge_id)
    assert ended is not None
    return ended


def _entries(deps: Services, kb: KnowledgeBase, knowledge_id: str) -> int:
    return deps.engine().count(IndexSpace.of(deps.embedding_model()), kb.id, knowledge_id)


def test_a_wiki_and_graph_only_document_completes_with_its_enrichment(
    deps: Services, tenant: Tenant, workflow: MemoryWorkflow, llm: ScriptedLLM
) -> None:
    kb = _no_index_kb(deps, tenant.id)
    created = upload(deps, kb, "notes.md", TEXT)
    drain(deps)
    row = deps.knowledge.get(created.id)
    assert row is not None
    assert row.parse_status == ParseStatus.PROCESSING, (row.parse_status, row.error_message)
    assert _queue(deps).dead_letters("embedding") == []
    outputs = embedding_outputs(deps, row)
    assert outputs["skipped"] == "vector and keyword indexing are off"
    assert "counts" not in outputs and "next_cursor" not in outputs  # the span holds figures only
    assert outputs["chunks"] == row.chunk_count == 1 and _entries(deps, kb, created.id) == 0
    ended = _through_the_machine(deps, workflow, created.id, "plan")
    assert (ended.parse_status, ended.pending_subtasks_count) == (ParseStatus.COMPLETED, 0)
    assert ended.description  # the summary
    wiki = wiki_of(deps, kb.tenant_id, kb.id)
    assert [page["knowledge_id"] for page in wiki["pages"]] == [created.id] and "notes.md" in wiki["index"]
    kinds = [request["kind"] for request in llm.requests]
    assert {"summary", "graph", "wiki"} <= set(kinds), kinds
    assert _entries(deps, kb, created.id) == 0  # nothing enrichment wrote went to an index either


def _api(client: Client, key: str) -> Any:
    headers = {"X-API-Key": key, "Content-Type": "application/json"}

    def call(method: str, path: str, body: Any = None) -> Any:
        extra = {} if body is None else {"body": json.dumps(body)}
        return getattr(client.http, method)(f"/api/v1{path}", headers=headers, **extra)

    return call


def test_search_stats_and_every_change_of_a_wiki_and_graph_only_document(
    deps: Services, workflow: MemoryWorkflow, llm: ScriptedLLM, client: Client, api_key: str
) -> None:
    from chalicelib.services.stored_size import recount_document
    from chalicelib.stages import wiki as wiki_stage

    call = _api(client, api_key)
    kb_id = call(
        "post",
        "/knowledge-bases",
        {"name": "wg", "summary_model_id": CHAT, "indexing_strategy": WIKI_AND_GRAPH},
    ).json_body["data"]["id"]
    kb = deps.kbs.get(kb_id)
    assert kb is not None
    created = upload(deps, kb, "notes.md", TEXT)
    drain(deps)
    assert _through_the_machine(deps, workflow, created.id, "p1").parse_status == ParseStatus.COMPLETED

    search = f"/knowledge-bases/{kb_id}/hybrid-search"
    hybrid = call("post", search, {"query_text": "keeper weather"})
    assert (hybrid.status_code, hybrid.json_body["data"]) == (200, [])
    for retriever in ("keyword", "vector"):
        refused = call("post", search, {"query_text": "keeper weather", "retriever": retriever})
        assert (refused.status_code, refused.json_body["error"]["code"]) == (400, "retriever_unavailable")
    stats = call("get", f"/knowledge-bases/{kb_id}/stats")
    assert stats.status_code == 200, stats.json_body
    assert (
        stats.json_body["data"]["parse_status"] == {"completed": 1} and stats.json_body["data"]["chunks"] == 1
    )
    assert call("get", f"/knowledge-bases/{kb_id}/cost").status_code == 200
    assert call("get", f"/knowledge/{created.id}/cost").status_code == 200
    stored = deps.knowledge.get(created.id)
    assert stored is not None
    recount = recount_document(deps, created.id)
    assert recount is not None and recount.before == recount.after == stored.storage_size > 0
    wiki = call("get", f"/knowledge-bases/{kb_id}/wiki").json_body["data"]
    assert [p["knowledge_id"] for p in wiki["pages"]] == [created.id]

    # a chunk edit and switches: no entries to rewrite, the rows change
    [chunk] = [c for c in deps.chunks.list(created.id) if c.chunk_type == ChunkType.TEXT]
    chunk_path = f"/knowledge/{created.id}/chunks/{chunk.id}"
    edited = call("put", chunk_path, {"content": "The keeper logs the tide at dawn."})
    assert edited.status_code == 200, edited.json_body
    assert call("put", chunk_path, {"is_enabled": False}).json_body["data"]["is_enabled"] is False
    assert call("put", chunk_path, {"is_enabled": True}).json_body["data"]["is_enabled"] is True
    drain(deps, ("enrichment",))  # the edit's graph and summary refreshes
    for status in ("disabled", "enabled"):
        switched = call("put", f"/knowledge/{created.id}", {"enable_status": status})
        assert (switched.status_code, switched.json_body["data"]["enable_status"]) == (200, status)
    assert _entries(deps, kb, created.id) == 0

    # a reparse runs the whole path again
    assert call("post", f"/knowledge/{created.id}/reparse", {}).status_code == 200
    drain(deps)
    again = _through_the_machine(deps, workflow, created.id, "p2")
    assert (again.attempt, again.parse_status) == (2, ParseStatus.COMPLETED)
    wiki = call("get", f"/knowledge-bases/{kb_id}/wiki").json_body["data"]
    assert [p["chunk_id"].split("-")[-2] for p in wiki["pages"]] == ["a2"]  # attempt 2's page

    # a delete takes the document, its wiki page and its storage
    assert call("delete", f"/knowledge/{created.id}").status_code == 202
    drain(deps, ("lifecycle",))
    queue = _queue(deps)
    while queue.waiting("wiki"):
        assert failed_ids(queue.deliver("wiki", wiki_stage.handle, deps)) == []
    assert deps.knowledge.get(created.id) is None and deps.chunks.list(created.id) == []
    wiki = call("get", f"/knowledge-bases/{kb_id}/wiki").json_body["data"]
    assert wiki["pages"] == [] and "notes.md" not in wiki["index"]
    tenant = deps.tenants.get(kb.tenant_id)
    assert tenant is not None and (tenant.storage_used, tenant.document_count) == (0, 0)


@pytest.mark.parametrize("change", ["delete", "reparse"])
def test_entries_written_before_indexing_was_switched_off_go_with_their_document(
    deps: Services, kb: KnowledgeBase, llm: ScriptedLLM, change: str
) -> None:
    from chalicelib.commands import ReparseRequest, UpdateKnowledgeBase
    from chalicelib.operations.knowledge_bases import update_kb
    from chalicelib.operations.knowledge_changes import delete_knowledge
    from chalicelib.tasks.reparse import reparse

    created = upload(deps, kb)
    drain(deps)
    assert _entries(deps, kb, created.id) > 0
    # for new documents only: the document indexed before keeps its entries until it changes
    off = {"vector_enabled": False, "keyword_enabled": False, "wiki_enabled": True}
    update_kb(deps, kb.tenant_id, kb.id, UpdateKnowledgeBase(summary_model_id=CHAT, indexing_strategy=off))
    if change == "delete":
        delete_knowledge(deps, kb.tenant_id, created.id)
        drain(deps, ("lifecycle",))
        assert deps.knowledge.get(created.id) is None
    else:
        deps.knowledge.settle_plan(created.id, created.attempt, 0, {"planned": [], "not_planned": {}})
        reparse(deps, kb.tenant_id, created.id, ReparseRequest())
        drain(deps)
    assert _entries(deps, kb, created.id) == 0  # were left in the engine for good
