"""Found by an enrichment audit: a document's model calls had no bound (a question call per text chunk, up to
150,000; a graph call per 5). The operator's caps (WEKNORA_MAX_QUESTION_CHUNKS, WEKNORA_MAX_GRAPH_CHUNKS)
bound them, in whole windows spread evenly over the document, the plan saying what was left out; a document
under the caps is planned as before."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from chalicelib.domain.plan import WINDOW, CallCaps, plan, planned_subtask
from chalicelib.domain.process_config import resolve
from chalicelib.domain.types import Chunk, ChunkType, KnowledgeBase
from chalicelib.settings import Settings

KB = KnowledgeBase(id="kb", tenant_id="t", name="kb")
GRAPH_CHUNKS_PER_CALL = 5


def chunks(count: int) -> list[Chunk]:
    return [
        Chunk(f"k-a1-{i:06d}", "t", "kb", "k", i, "text", chunk_type=ChunkType.TEXT) for i in range(count)
    ]


def enriched() -> object:
    return replace(resolve(KB, {}), questions_enabled=True, graph_enabled=True, chat_model_id="openai/chat")


def default_caps() -> CallCaps:
    settings = Settings()
    return CallCaps(settings.max_question_chunks, settings.max_graph_chunks)


def positions(subtasks: list[dict[str, object]], kind: str, count: int) -> list[int]:
    """The chunk positions the subtasks of `kind` read (as the enrichment worker computes them)."""
    read: list[int] = []
    for subtask in subtasks:
        if subtask["kind"] == kind:
            window, size = int(subtask["window"]), int(subtask["size"])  # type: ignore[call-overload]
            read += [p for p in range(window * size, (window + 1) * size) if p < count]
    return read


@pytest.mark.parametrize("count", [40_000, 150_000])
def test_a_huge_documents_model_calls_stay_within_the_default_caps(count: int) -> None:
    caps = default_caps()
    subtasks, not_planned = plan(KB, enriched(), chunks(count), caps)  # type: ignore[arg-type]
    questions = positions(subtasks, "questions", count)
    graph = positions(subtasks, "graph", count)
    assert caps.question_chunks is not None and caps.graph_chunks is not None
    assert len(questions) <= caps.question_chunks  # a question call per chunk
    assert len(graph) <= caps.graph_chunks
    assert math.ceil(len(graph) / GRAPH_CHUNKS_PER_CALL) <= caps.graph_chunks // GRAPH_CHUNKS_PER_CALL
    for read in (questions, graph):
        assert len(read) == len(set(read))  # no chunk twice
        assert read[0] == 0 and read[-1] >= count - count // 20  # spread over the document, end included
    assert not_planned["questions_capped"].startswith(f"{count - len(questions)} of {count} chunks left out")
    assert "WEKNORA_MAX_GRAPH_CHUNKS" in not_planned["graph_capped"]
    for subtask in subtasks:  # the stored plan (its ids) gives back the same subtasks
        assert planned_subtask(str(subtask["id"])) == subtask


@pytest.mark.parametrize("count", [1, 45, 1_000, 2_000])
def test_an_ordinary_document_is_planned_as_without_caps(count: int) -> None:
    capped = plan(KB, enriched(), chunks(count), default_caps())  # type: ignore[arg-type]
    assert capped == plan(KB, enriched(), chunks(count))  # type: ignore[arg-type]
    assert "questions_capped" not in capped[1] and "graph_capped" not in capped[1]


@pytest.mark.parametrize("cap", [1, 7, WINDOW, 50, 333])
def test_a_small_cap_is_never_exceeded_and_reads_whole_windows(cap: int) -> None:
    count = 1_000
    subtasks, not_planned = plan(  # type: ignore[arg-type]
        KB, enriched(), chunks(count), CallCaps(question_chunks=cap, graph_chunks=cap)
    )
    for kind in ("questions", "graph"):
        read = positions(subtasks, kind, count)
        assert 1 <= len(read) <= cap and len(read) == len(set(read))
        assert f"{count - len(read)} of {count}" in not_planned[f"{kind}_capped"]
