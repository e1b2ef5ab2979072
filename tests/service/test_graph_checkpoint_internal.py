"""Review mends of the graph window: a store's refusal is its own permanent error, not a model's; the graph
window's checkpoint in a chunk's metadata is internal (never in the tenant's view of the chunk, dropped by an
edit of its text as the questions are); the runner's failure code is a code or `unknown`."""

from __future__ import annotations

from dataclasses import replace

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import ChunkListQuery, EditChunkRequest
from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.operations.chunks import edit_chunk, get_chunk, list_chunks
from chalicelib.ports import ModelRequestError
from chalicelib.ports.graph import GraphWriteRefused
from chalicelib.stages import enrichment
from chalicelib.stages.runner import _failure_code

from .test_chunks import _completed
from .test_chunks import kb as kb
from .test_enrichment_replies import ReplyingLLM, finalizing, llm_kb, run_subtask
from .test_enrichment_replies import llm as llm


def test_a_graph_store_refusal_is_not_a_model_error() -> None:
    from chalicelib.domain.errors import WriteRefused

    refused = GraphWriteRefused("the graph store refused a window record")
    assert isinstance(refused, WriteRefused) and not isinstance(refused, ModelRequestError)
    assert refused.code == "graph_write_refused"


def test_the_graph_checkpoint_is_not_in_the_tenants_view_of_a_chunk(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    graph_kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge = finalizing(deps, graph_kb)
    assert run_subtask(deps, knowledge, "g", planned_subtask("graph.0")) == []
    marked = [c for c in deps.chunks.list(knowledge.id) if enrichment.GRAPH_DONE in c.metadata]
    assert marked
    shown = [get_chunk(deps, tenant.id, knowledge.id, marked[0].id)]
    shown += list_chunks(deps, tenant.id, knowledge.id, ChunkListQuery())["items"]
    for view in shown:
        assert not [k for k in view["metadata"] if k.startswith("_") or k == "graph"]
        assert view["metadata"]["attempt"] == knowledge.attempt  # the rest of the metadata is still shown
    assert enrichment.GRAPH_DONE.startswith("_")  # named as internal


def test_an_edit_drops_the_graph_checkpoint_of_the_old_text(deps: Services, kb: KnowledgeBase) -> None:
    knowledge = _completed(deps, kb)
    chunk = deps.chunks.list(knowledge.id)[0]
    done = {"entities": 2, "relations": 1}
    deps.chunks.put_many([replace(chunk, metadata={**chunk.metadata, enrichment.GRAPH_DONE: done})])

    shown = edit_chunk(
        deps, knowledge.tenant_id, knowledge.id, chunk.id, EditChunkRequest(content="The keeper paints.")
    )
    stored = deps.chunks.get_many([(knowledge.id, chunk.id)])[(knowledge.id, chunk.id)]
    assert enrichment.GRAPH_DONE not in stored.metadata and stored.metadata["edited"] is True
    assert enrichment.GRAPH_DONE not in shown["metadata"]


class _Coded(Exception):
    def __init__(self, code: object) -> None:
        super().__init__("boom")
        self.code = code


@pytest.mark.parametrize(
    ("code", "recorded"),
    [
        ("graph_write_refused", "graph_write_refused"),
        (SpanErrorCode.UPSTREAM_FAILED, "upstream_failed"),
        ("the server says: your key expired, see https://evil.example", "unknown"),
        (503, "unknown"),
        (None, "unknown"),
    ],
)
def test_the_runner_records_an_errors_code_or_unknown(code: object, recorded: str) -> None:
    assert _failure_code(_Coded(code)) == recorded
    assert _failure_code(GraphWriteRefused("refused")) == "graph_write_refused"
