"""What an attempt a reparse superseded leaves behind: nothing. Its questions written after the new attempt
was embedded are taken back, and its graph facts go with its chunks even when the new attempt's graph is
off (its planner clears other attempts' facts only when the graph is on)."""

from __future__ import annotations

from typing import Any

import pytest

import chalicelib.services.embedding_runs as embedding_runs
from chalicelib.bootstrap import Services
from chalicelib.commands import ReparseRequest, SearchRequest
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import Tenant
from chalicelib.operations.search import hybrid_search
from chalicelib.ports import IndexSpace
from chalicelib.tasks.reparse import reparse

from .conftest import drain
from .test_enrichment_once_per_attempt import _plan
from .test_enrichment_replies import ReplyingLLM, finalizing, llm_kb, run_subtask
from .test_enrichment_replies import llm as llm
from .test_graph_chunk_edit import _completed_with_graph


def test_questions_written_after_a_reparse_embedded_its_attempt_are_taken_back(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = llm_kb(deps, tenant, enrichment={"questions_enabled": True})
    first = finalizing(deps, kb, count=2)
    embed = embedding_runs.embed_texts

    def reparsed_meanwhile(*args: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(embedding_runs, "embed_texts", embed)
        reparse(deps, kb.tenant_id, first.id, ReparseRequest())
        drain(deps)  # attempt 2 parsed, chunked and embedded while attempt 1's questions were embedded
        return embed(*args, **kwargs)

    monkeypatch.setattr(embedding_runs, "embed_texts", reparsed_meanwhile)
    run_subtask(deps, first, "q", planned_subtask("questions.0"))
    row = deps.knowledge.get(first.id)
    assert row is not None and row.attempt == 2
    space = IndexSpace.of(deps.embedding_model(kb.embedding_model_id))
    old = f"{first.id}-a1-"
    entries = deps.engine(kb.retrieval_engine).entries_of(space, kb.id, first.id)
    assert [e.id for e in entries if e.chunk_id.startswith(old)] == []
    hits = hybrid_search(deps, kb.tenant_id, kb.id, SearchRequest(query_text="detail number", match_count=5))
    assert not [h for h in hits if h["chunk_id"].startswith(old)]


def test_a_reparse_with_the_graph_off_leaves_no_facts_of_the_old_attempt(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge, _, _ = _completed_with_graph(deps, kb, llm)
    assert deps.graph.neighbourhood(kb.id, "Keeper").entity is not None
    stored = deps.kbs.get(kb.id)
    assert stored is not None
    stored.indexing_strategy.graph_enabled = False  # the tenant turns the graph off, then reparses
    deps.kbs.put(stored)
    reparse(deps, tenant.id, knowledge.id, ReparseRequest())
    drain(deps)
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.attempt == 2
    _plan(deps, row, "p2")
    assert deps.graph.neighbourhood(kb.id, "Keeper").entity is None
