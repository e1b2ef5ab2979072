"""A graph window whose worker died after writing a call's facts and before marking the call done (a crash, a
timeout) comes back from SQS and asks the model again: the second answer replaces the first for that window
instead of landing on top of it, and the other windows' facts stay. Once marked, a redelivery asks nothing."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus, Tenant
from chalicelib.stages import enrichment

from .conftest import drain, upload
from .test_enrichment_replies import ReplyingLLM, llm, llm_kb, run_subtask  # noqa: F401

#: two windows of one chunk each ("graph.<window>x<size>"), so one window's redelivery can be told apart
WINDOW_0, WINDOW_1 = planned_subtask("graph.0x1"), planned_subtask("graph.1x1")
#: a document of several chunks: each section longer than a chunk
SECTIONS = b"\n\n".join(
    f"## Section {n}\n\n".encode() + b" ".join([f"Keeper {n} logs the weather at dawn.".encode()] * 120)
    for n in range(3)
)


def _finalizing(deps: Services, kb: KnowledgeBase) -> Knowledge:
    """As `finalizing`, with a document of several chunks and both windows' slots counted."""
    created = upload(deps, kb, "sections.md", SECTIONS)
    drain(deps)
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    return rows.write_fields(created.id, parse_status=ParseStatus.FINALIZING, pending_subtasks_count=2)


def _answers(*replies: list[dict[str, Any]]) -> Callable[[dict[str, Any]], str]:
    """The model's graph replies, one per call, in order (then the last one again)."""
    calls: list[int] = []

    def reply(_body: dict[str, Any]) -> str:
        calls.append(1)
        return json.dumps(replies[min(len(calls), len(replies)) - 1])

    return reply


def _dies_before_its_first_mark(deps: Services, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The worker is killed once after window 0's facts were written and before its call was marked done."""
    mark = deps.chunks.set_metadata
    died: list[str] = []

    def mark_or_die(knowledge_id: str, chunk_id: str, key: str, value: Any, **kwargs: Any) -> bool:
        # window 0's first answer has two entities (window 1's one)
        if key == enrichment.GRAPH_DONE and not died and value.get("entities") == 2:
            died.append(WINDOW_0["id"])
            raise TimeoutError("the Lambda timed out before the call was marked done")
        return mark(knowledge_id, chunk_id, key, value, **kwargs)

    monkeypatch.setattr(deps.chunks, "set_metadata", mark_or_die)
    return died


def test_a_graph_window_redelivered_before_its_release_keeps_only_its_second_answer(
    deps: Services,
    tenant: Tenant,
    workflow: MemoryWorkflow,
    llm: ReplyingLLM,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge = _finalizing(deps, kb)
    chunks = [c for c in deps.chunks.list(knowledge.id) if c.metadata.get("attempt") == 1]
    assert len(chunks) >= 2, "the document must span two windows"
    llm.replies["graph"] = json.dumps(
        [
            {"passage": 1, "entity": "Harbour", "entity_attributes": ["sheltered"]},
            {"passage": 1, "entity1": "Lamp", "entity2": "Harbour", "relation": "lights"},
        ]
    )
    assert run_subtask(deps, knowledge, "g1", WINDOW_1) == []  # another window, answered and released
    died = _dies_before_its_first_mark(deps, monkeypatch)
    llm.replies["graph"] = _answers(
        [
            {"passage": 1, "entity": "Keeper", "entity_attributes": ["first"]},
            {"passage": 1, "entity": "Lamp", "entity_attributes": ["bright"]},
            {"passage": 1, "entity1": "Keeper", "entity2": "Lamp", "relation": "tends"},
        ],
        [  # the model answers differently when asked again
            {"passage": 1, "entity": "Lamp", "entity_attributes": ["dim"]},
            {"passage": 1, "entity": "Tower", "entity_attributes": ["white"]},
            {"passage": 1, "entity1": "Lamp", "entity2": "Tower", "relation": "crowns"},
        ],
    )

    failures = run_subtask(deps, knowledge, "g0", WINDOW_0)

    assert died == [WINDOW_0["id"]] and len(failures) == 1  # delivered twice: the first run died
    assert llm.kinds().count("graph") == 3  # window 1 once, window 0 twice
    assert deps.graph.neighbourhood(kb.id, "Keeper").entity is None  # only the first answer had it
    lamp = deps.graph.neighbourhood(kb.id, "Lamp")
    assert lamp.entity is not None and lamp.entity.attributes == ["dim"]
    window_0_chunk = lamp.entity.chunk_ids
    assert len(window_0_chunk) == 1
    assert sorted((e.source, e.relation, e.target) for e in lamp.edges) == [
        ("Lamp", "crowns", "Tower"),
        ("Lamp", "lights", "Harbour"),  # window 1's fact stays
    ]
    tower = deps.graph.neighbourhood(kb.id, "Tower").entity
    assert tower is not None and tower.chunk_ids == window_0_chunk
    harbour = deps.graph.neighbourhood(kb.id, "Harbour").entity
    assert harbour is not None and harbour.chunk_ids != window_0_chunk
    [answer] = workflow.answers_to("g0")
    assert answer.succeeded and answer.output["entities"] == 2
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.pending_subtasks_count == 0 and row.parse_status.value == "completed"
