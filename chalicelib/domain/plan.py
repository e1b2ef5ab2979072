"""A document's enrichment plan: the subtasks the state machine counts (the summary, windows of questions and
graph, the wiki), decided from the knowledge base's settings and the chunks, and rebuilt from their ids."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chalicelib.domain.process_config import EffectiveProcessConfig
from chalicelib.domain.types import Chunk, ChunkType, KnowledgeBase

#: the chunk kinds enrichment reads as text
TEXT_LIKE = (ChunkType.TEXT, ChunkType.IMAGE_OCR, ChunkType.IMAGE_CAPTION)
#: chunks per questions or graph subtask
WINDOW = 20
#: at most this many questions (and as many graph) subtasks a document: the plan rides in the state
#: machine's data (256 KB) and each subtask costs its inline Map some history events (25,000 per execution),
#: so past WINDOW × MAX_WINDOWS text chunks (8,000) the windows grow instead of their number
MAX_WINDOWS = 400


def window_size(chunks: int) -> int:
    """Chunks per window for a document of `chunks` chunks of the window's kind."""
    return max(WINDOW, math.ceil(chunks / MAX_WINDOWS))


@dataclass(frozen=True)
class CallCaps:
    """At most this many chunks of one document get questions (one model call each) or are read for its
    graph (one call per 5): the operator's bound on what one document costs (settings)."""

    question_chunks: int | None = None
    graph_chunks: int | None = None


def plan(
    kb: KnowledgeBase, effective: EffectiveProcessConfig, chunks: list[Chunk], caps: CallCaps | None = None
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """(the counted subtasks, what was not planned and why: a capped kind says how much of it was left
    out under `<kind>_capped`)."""
    caps = caps or CallCaps()
    text = [c for c in chunks if c.chunk_type == ChunkType.TEXT]
    text_like = [c for c in chunks if c.chunk_type in TEXT_LIKE]
    subtasks: list[dict[str, Any]] = []
    not_planned: dict[str, str] = {}
    if text_like and effective.summary_enabled:
        subtasks.append({"id": "summary"})
    wanted = {
        "questions": effective.questions_enabled,
        "graph": effective.graph_enabled,
        "wiki": effective.wiki_enabled,
        "auto_tag": effective.auto_tag_enabled,
    }
    if not effective.has_chat_model:
        for name, on in wanted.items():
            if on:
                not_planned[name] = "no chat model configured (the knowledge base's summary_model_id)"
        return _with_ids(subtasks), not_planned
    if effective.questions_enabled and not kb.indexing_strategy.needs_embedding:
        not_planned["questions"] = "the knowledge base indexes nothing"
    elif effective.questions_enabled:
        subtasks += _windows("questions", len(text), caps.question_chunks, not_planned)
    if effective.graph_enabled:
        subtasks += _windows("graph", len(text_like), caps.graph_chunks, not_planned)
    if effective.wiki_enabled and text_like:
        subtasks.append({"id": "wiki"})
    return _with_ids(subtasks), not_planned


def _windows(kind: str, chunks: int, cap: int | None, not_planned: dict[str, str]) -> list[dict[str, Any]]:
    """The windows of `kind` over `chunks` chunks. Past `cap` chunks, whole windows spread evenly over the
    document, at most `cap` chunks in all: a search about any part of it still meets some questions and
    entities (the first windows only would leave a long document's end with none), each window stays a
    run of neighbouring chunks read as before, and the ids keep the form `planned_subtask` reads."""
    picked: Sequence[int]
    if cap is None or chunks <= cap:
        size = window_size(chunks)
        picked = range(math.ceil(chunks / size))
    else:
        size = window_size(cap) if cap >= WINDOW else max(1, cap)
        total, count = math.ceil(chunks / size), max(1, cap // size)
        picked = [window * total // count for window in range(count)]
        covered = sum(min(size, chunks - window * size) for window in picked)
        not_planned[f"{kind}_capped"] = (
            f"{chunks - covered} of {chunks} chunks left out: at most {cap} a document "
            f"(WEKNORA_MAX_{'QUESTION' if kind == 'questions' else 'GRAPH'}_CHUNKS), "
            f"in {count} windows of {size} spread evenly over it"
        )
    suffix = "" if size == WINDOW else f"x{size}"  # the id holds the size when it is not the default
    return [{"id": f"{kind}.{window}{suffix}"} for window in picked]


def _with_ids(subtasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [planned_subtask(s["id"]) for s in subtasks]


def planned_subtask(subtask_id: str) -> dict[str, Any]:
    """A subtask from its id (`summary`, `questions.<window>`, `graph.<window>`, either with `x<size>` when
    its windows are larger than WINDOW, `wiki`): the plan stored on the row (its ids) gives back the very
    subtasks that were answered."""
    kind, _, window = subtask_id.partition(".")
    subtask: dict[str, Any] = {"id": subtask_id, "kind": kind}
    if window:
        number, _, size = window.partition("x")
        subtask["window"] = int(number)
        subtask["size"] = int(size) if size else WINDOW
    # the state machine's ReleaseSlot (after a failure) adds it to done_subtasks
    subtask["id_set"] = [subtask_id]
    return subtask
