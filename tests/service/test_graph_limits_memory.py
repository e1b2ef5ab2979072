"""The graph within DynamoDB's limits on the in-memory fake, which refuses what the table refuses; and a window
whose facts the store refuses fails once, with a stable code, instead of paying the model on every retry."""

from __future__ import annotations

import uuid

import pytest

from chalicelib.adapters.memory import MemoryGraphRepo, MemoryWorkflow
from chalicelib.adapters.memory import graph as memory_graph
from chalicelib.bootstrap import Services
from chalicelib.domain.graph import entity_key
from chalicelib.domain.ids import chunk_id
from chalicelib.domain.item_limits import (
    GRAPH_ATTRIBUTE_BYTES,
    GRAPH_MAX_ATTRIBUTES,
    GRAPH_MAX_CHUNK_IDS,
    ITEM_MAX_BYTES,
    item_size,
)
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import SpanStatus, Tenant
from chalicelib.enrich.graph import MAX_ATTRIBUTES
from chalicelib.ports import GraphRepo
from chalicelib.ports.graph import GraphWriteRefused

from .graph_limits_contract import GraphLimitsContract
from .test_enrichment_replies import ReplyingLLM, finalizing, llm, llm_kb, run_subtask  # noqa: F401


class TestMemoryGraphLimits(GraphLimitsContract):
    @pytest.fixture
    def graph(self) -> GraphRepo:
        return MemoryGraphRepo()

    @pytest.fixture
    def chunk_id_cap(self, monkeypatch: pytest.MonkeyPatch) -> int:
        monkeypatch.setattr(memory_graph, "GRAPH_MAX_CHUNK_IDS", 25)
        return 25


def test_the_fake_refuses_a_key_past_1024_bytes_as_the_table_does(monkeypatch: pytest.MonkeyPatch) -> None:
    for cut in ("graph_name", "graph_relation"):  # as if names were not cut
        monkeypatch.setattr(memory_graph, cut, str)
    monkeypatch.setattr(memory_graph, "graph_name_part", entity_key)
    with pytest.raises(GraphWriteRefused):
        MemoryGraphRepo().add("kb", "k", [], [("甲" * 200, "关" * 100, "乙" * 200, "k-a1-c0")])


def test_the_fake_refuses_an_item_past_400_kb_as_the_table_does(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memory_graph, "GRAPH_MAX_ATTRIBUTES", 10_000)  # as if attributes were not capped
    graph = MemoryGraphRepo()
    with pytest.raises(GraphWriteRefused):
        for window in range(200):
            attributes = [f"{window:03d}{n:02d}" + "é" * 195 for n in range(20)]
            graph.add("kb", "k", [("Acme", attributes, f"k-a1-c{window}")], [])


def test_a_window_the_graph_store_refuses_fails_once_with_a_stable_code(
    deps: Services,
    tenant: Tenant,
    workflow: MemoryWorkflow,
    llm: ReplyingLLM,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise GraphWriteRefused("the graph store refused a fact (item or key too large)")

    monkeypatch.setattr(deps.graph, "add_window", refuse)
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge = finalizing(deps, kb)
    failures = run_subtask(deps, knowledge, "g", planned_subtask("graph.0"))
    assert failures == [] and llm.kinds().count("graph") == 1  # the model is paid once
    span = deps.spans.get(knowledge.id, knowledge.attempt, "postprocess.graph.0")
    assert span is not None and span.status == SpanStatus.FAILED and span.error_code == "graph_write_refused"
    assert [a.succeeded for a in workflow.answers_to("g")] == [True]  # answered: its slot is released


def test_a_fact_item_at_its_caps_fits_dynamodb() -> None:
    """The caps' sum: a name, GRAPH_MAX_ATTRIBUTES + a mention's attributes at their longest and
    GRAPH_MAX_CHUNK_IDS chunk ids (a uuid, an attempt, a parent mark and a sequence) stay under 400 KB."""
    longest_chunk_id = chunk_id(str(uuid.uuid4()), 9999, 10**9, parent=True)
    attributes = {f"{n:03d}" + "é" * 200 for n in range(GRAPH_MAX_ATTRIBUTES + MAX_ATTRIBUTES)}
    values = [
        ("kb_id", "k" * 100),
        ("key", "n#" + "甲" * 133 + "#" + str(uuid.uuid4())),
        ("knowledge_id", str(uuid.uuid4())),
        ("name", "甲" * 133),
        ("attributes", {a[: GRAPH_ATTRIBUTE_BYTES // 2] for a in attributes}),
        ("chunk_ids", {longest_chunk_id + str(n) for n in range(GRAPH_MAX_CHUNK_IDS)}),
    ]
    assert item_size(values) < ITEM_MAX_BYTES // 2
