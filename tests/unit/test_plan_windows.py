"""The enrichment plan stays within what one state machine execution carries, whatever the document's size:
past 8,000 text chunks its windows grow instead of their number, and every chunk is still read once."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from chalicelib.domain.plan import MAX_WINDOWS, WINDOW, plan, planned_subtask
from chalicelib.domain.process_config import resolve
from chalicelib.domain.types import Chunk, ChunkType, KnowledgeBase

#: Step Functions' limit on a state's data; the plan answer must leave room for the rest of the state
STATE_DATA_LIMIT = 256 * 1024


def chunks(count: int, kind: ChunkType = ChunkType.TEXT) -> list[Chunk]:
    return [Chunk(f"k-a1-{i:06d}", "t", "kb", "k", i, "text", chunk_type=kind) for i in range(count)]


def enriched(kb: KnowledgeBase) -> object:
    effective = resolve(kb, {})
    return replace(effective, questions_enabled=True, graph_enabled=True, chat_model_id="openai/chat")


def covered(subtasks: list[dict[str, object]], kind: str) -> list[int]:
    """The chunk positions the subtasks of `kind` read, in order (as the enrichment worker computes them)."""
    positions: list[int] = []
    for subtask in subtasks:
        if subtask["kind"] == kind:
            window, size = int(subtask["window"]), int(subtask["size"])  # type: ignore[call-overload]
            positions += range(window * size, (window + 1) * size)
    return positions


@pytest.mark.parametrize("count", [1, 100, WINDOW * MAX_WINDOWS, WINDOW * MAX_WINDOWS + 1, 20_000, 150_000])
def test_every_chunk_is_read_once_by_at_most_max_windows_subtasks(count: int) -> None:
    kb = KnowledgeBase(id="kb", tenant_id="t", name="kb")
    subtasks, _ = plan(kb, enriched(kb), chunks(count))  # type: ignore[arg-type]
    for kind in ("questions", "graph"):
        mine = [s for s in subtasks if s["kind"] == kind]
        assert 1 <= len(mine) <= MAX_WINDOWS
        assert [p for p in covered(subtasks, kind) if p < count] == list(range(count))
        for subtask in mine:  # the stored plan (its ids) gives back the same subtasks
            assert planned_subtask(str(subtask["id"])) == subtask
    answer = {"skipped": False, "subtasks": subtasks, "count": len(subtasks)}
    assert len(json.dumps(answer)) < STATE_DATA_LIMIT // 2


def test_a_document_under_the_bound_keeps_windows_of_twenty_and_their_ids() -> None:
    kb = KnowledgeBase(id="kb", tenant_id="t", name="kb")
    subtasks, _ = plan(kb, enriched(kb), chunks(45))  # type: ignore[arg-type]
    assert [s["id"] for s in subtasks if s["kind"] == "questions"] == [
        "questions.0",
        "questions.1",
        "questions.2",
    ]
    assert planned_subtask("graph.2") == {
        "id": "graph.2",
        "kind": "graph",
        "window": 2,
        "size": WINDOW,
        "id_set": ["graph.2"],
    }
