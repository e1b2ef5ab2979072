"""An edit of a chunk's text takes the graph facts read from its old text out of the graph (an entity or a
relation only that chunk supported goes; one other chunks support stays, without this chunk), and when the
knowledge base's graph is on, the new text's facts are read on the enrichment queue: a redelivered message
replaces what it wrote, and a message sent for an earlier text leaves the later one's facts alone."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.commands import EditChunkRequest
from chalicelib.domain.ids import content_hash
from chalicelib.domain.types import Chunk, Knowledge, KnowledgeBase, Tenant
from chalicelib.operations.chunks import edit_chunk
from chalicelib.stages import enrichment

from .conftest import failed_ids
from .test_enrichment_replies import ReplyingLLM, llm_kb, run_subtask
from .test_enrichment_replies import llm as llm
from .test_graph_window_redelivery import WINDOW_0, WINDOW_1, _finalizing

OLD_TEXT = [  # chunk 0's first answer: Keeper only there, Lamp also in chunk 1
    {"passage": 1, "entity": "Keeper", "entity_attributes": ["first"]},
    {"passage": 1, "entity": "Lamp", "entity_attributes": ["bright"]},
    {"passage": 1, "entity1": "Keeper", "entity2": "Lamp", "relation": "tends"},
    {"passage": 1, "entity1": "Lamp", "entity2": "Harbour", "relation": "lights"},
]
OTHER_CHUNK = [
    {"passage": 1, "entity": "Lamp", "entity_attributes": []},
    {"passage": 1, "entity": "Harbour", "entity_attributes": ["sheltered"]},
    {"passage": 1, "entity1": "Lamp", "entity2": "Harbour", "relation": "lights"},
]
NEW_TEXT = [
    {"passage": 1, "entity": "Ferry", "entity_attributes": ["daily"]},
    {"passage": 1, "entity1": "Ferry", "entity2": "Harbour", "relation": "calls at"},
]


def _queue(deps: Services) -> MemoryTaskQueue:
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    return queue


def _completed_with_graph(
    deps: Services, kb: KnowledgeBase, llm: ReplyingLLM
) -> tuple[Knowledge, Chunk, Chunk]:
    """A completed document whose two first chunks' facts are in the graph: chunk 0's OLD_TEXT, chunk 1's
    OTHER_CHUNK. Returns the row and those two chunks."""
    knowledge = _finalizing(deps, kb)
    llm.replies["graph"] = json.dumps(OLD_TEXT)
    assert run_subtask(deps, knowledge, "g0", WINDOW_0) == []
    llm.replies["graph"] = json.dumps(OTHER_CHUNK)
    assert run_subtask(deps, knowledge, "g1", WINDOW_1) == []
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.parse_status.value == "completed"
    chunks = sorted(
        (c for c in deps.chunks.list(knowledge.id) if c.metadata.get("attempt") == row.attempt),
        key=lambda c: c.seq,
    )
    keeper = deps.graph.neighbourhood(kb.id, "Keeper").entity
    assert keeper is not None and keeper.chunk_ids == [chunks[0].id]
    return row, chunks[0], chunks[1]


def _edit(deps: Services, knowledge: Knowledge, chunk: Chunk, text: str) -> None:
    edit_chunk(deps, knowledge.tenant_id, knowledge.id, chunk.id, EditChunkRequest(content=text))


def _graph_messages(deps: Services) -> list[dict[str, Any]]:
    return [
        m
        for m in _queue(deps).bodies("enrichment")
        if m.get("subtask", {}).get("kind") == enrichment.GRAPH_CHUNK
    ]


def _deliver_enrichment(deps: Services) -> list[str]:
    queue, failures = _queue(deps), []
    while queue.waiting("enrichment"):
        failures += failed_ids(queue.deliver("enrichment", enrichment.handle, deps))
    return failures


def _triples(deps: Services, kb: KnowledgeBase, entity: str) -> list[tuple[str, str, str]]:
    return sorted((e.source, e.relation, e.target) for e in deps.graph.neighbourhood(kb.id, entity).edges)


def test_an_edit_takes_the_old_texts_facts_out_and_reads_the_new_texts(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge, edited, other = _completed_with_graph(deps, kb, llm)
    llm.replies["graph"] = json.dumps(NEW_TEXT)
    asked = llm.kinds().count("graph")

    _edit(deps, knowledge, edited, "The ferry calls at the harbour every day.")
    assert len(_graph_messages(deps)) == 1
    assert _deliver_enrichment(deps) == []

    assert llm.kinds().count("graph") == asked + 1  # one call, for the edited chunk alone
    assert deps.graph.neighbourhood(kb.id, "Keeper").entity is None  # only the old text had it
    lamp = deps.graph.neighbourhood(kb.id, "Lamp")
    # chunk 1 supports Lamp and Lamp-lights-Harbour too: they stay, without the edited chunk
    assert lamp.entity is not None and lamp.entity.chunk_ids == [other.id]
    assert _triples(deps, kb, "Lamp") == [("Lamp", "lights", "Harbour")]
    ferry = deps.graph.neighbourhood(kb.id, "Ferry").entity
    assert ferry is not None and ferry.chunk_ids == [edited.id]
    assert _triples(deps, kb, "Harbour") == [("Ferry", "calls at", "Harbour"), ("Lamp", "lights", "Harbour")]
    harbour = deps.graph.neighbourhood(kb.id, "Harbour").entity
    assert harbour is not None and harbour.chunk_ids == [other.id]


def test_a_redelivered_refresh_replaces_what_it_wrote(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge, edited, _other = _completed_with_graph(deps, kb, llm)
    llm.replies["graph"] = json.dumps(NEW_TEXT)
    _edit(deps, knowledge, edited, "The ferry calls at the harbour every day.")
    [sent] = _graph_messages(deps)
    assert _deliver_enrichment(deps) == []

    # the same message again (SQS delivers at least once): the model answers the same, then differently
    _queue(deps).send_raw("enrichment", sent)
    assert _deliver_enrichment(deps) == []
    ferry = deps.graph.neighbourhood(kb.id, "Ferry").entity
    assert ferry is not None and ferry.chunk_ids == [edited.id] and ferry.attributes == ["daily"]
    llm.replies["graph"] = json.dumps([{"passage": 1, "entity": "Boat", "entity_attributes": []}])
    _queue(deps).send_raw("enrichment", sent)
    assert _deliver_enrichment(deps) == []
    assert deps.graph.neighbourhood(kb.id, "Ferry").entity is None
    assert _triples(deps, kb, "Harbour") == [("Lamp", "lights", "Harbour")]
    boat = deps.graph.neighbourhood(kb.id, "Boat").entity
    assert boat is not None and boat.chunk_ids == [edited.id]


def test_a_message_for_an_earlier_text_leaves_the_later_texts_facts(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge, edited, _other = _completed_with_graph(deps, kb, llm)
    _edit(deps, knowledge, edited, "The keeper paints the tower.")
    _edit(deps, knowledge, edited, "The ferry calls at the harbour every day.")
    assert len(_graph_messages(deps)) == 2
    asked = llm.kinds().count("graph")
    llm.replies["graph"] = json.dumps(NEW_TEXT)

    assert _deliver_enrichment(deps) == []

    assert llm.kinds().count("graph") == asked + 1  # the first edit's message asks nothing
    assert deps.graph.neighbourhood(kb.id, "Keeper").entity is None
    ferry = deps.graph.neighbourhood(kb.id, "Ferry").entity
    assert ferry is not None and ferry.chunk_ids == [edited.id]


def test_a_chunk_edited_while_its_facts_are_read_is_read_again(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The later edit's message ran before this one wrote: this one's facts (of the earlier text) would
    stay, so it reads the chunk again."""
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge, edited, _other = _completed_with_graph(deps, kb, llm)
    _edit(deps, knowledge, edited, "The keeper paints the tower.")
    later = "The ferry calls at the harbour every day."

    def answer(body: dict[str, Any]) -> str:
        if "keeper paints" in json.dumps(body):  # the model reads the earlier text; the tenant edits again
            stored = deps.chunks.get_many([(knowledge.id, edited.id)])[(knowledge.id, edited.id)]
            if stored.content != later:  # the edit's row write (its message ran before this one writes:
                # it is not delivered again here)
                deps.chunks.put_many([replace(stored, content=later, content_hash=content_hash(later))])
            return json.dumps([{"passage": 1, "entity": "Brush", "entity_attributes": []}])
        return json.dumps(NEW_TEXT)

    llm.replies["graph"] = answer
    assert _deliver_enrichment(deps) == []

    assert deps.graph.neighbourhood(kb.id, "Brush").entity is None
    ferry = deps.graph.neighbourhood(kb.id, "Ferry").entity
    assert ferry is not None and ferry.chunk_ids == [edited.id]


def test_with_the_graph_off_an_edit_still_takes_the_old_facts_out_and_asks_nothing(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge, edited, other = _completed_with_graph(deps, kb, llm)
    stored_kb = deps.kbs.get(kb.id)
    assert stored_kb is not None
    stored_kb.indexing_strategy.graph_enabled = False  # switched off after the document's graph was read
    deps.kbs.put(stored_kb)
    asked = llm.kinds().count("graph")

    _edit(deps, knowledge, edited, "The ferry calls at the harbour every day.")
    assert _deliver_enrichment(deps) == []

    assert llm.kinds().count("graph") == asked
    assert deps.graph.neighbourhood(kb.id, "Keeper").entity is None
    lamp = deps.graph.neighbourhood(kb.id, "Lamp").entity
    assert lamp is not None and lamp.chunk_ids == [other.id]


def test_a_model_that_refuses_the_new_text_still_takes_the_old_texts_facts_out(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge, edited, other = _completed_with_graph(deps, kb, llm)
    llm.responses["graph"] = (400, {"error": {"message": "bad request", "code": "invalid_request"}})

    _edit(deps, knowledge, edited, "The ferry calls at the harbour every day.")
    _deliver_enrichment(deps)  # the refusal is permanent: the subtask fails, its message is done

    assert deps.graph.neighbourhood(kb.id, "Keeper").entity is None  # only the old text had it
    lamp = deps.graph.neighbourhood(kb.id, "Lamp").entity
    assert lamp is not None and lamp.chunk_ids == [other.id]
