"""Enrichment subtasks against a model server that answers badly: a reply that cannot be read fails only its
subtask, once (no redelivery, no second paid call), with a stable code; the server's words never reach a
span, a token or the row; what a reply makes is capped; a redelivered questions subtask asks nothing again
and leaves no extra entries; and enrichment that lands after a move never writes under the old knowledge base."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from scripted_llm import CHAT, ScriptedLLM, use_models

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, CreateTagRequest
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import (
    Chunk,
    ChunkType,
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    SpanStatus,
    SummaryStatus,
    Tenant,
)
from chalicelib.ports import IndexSpace
from chalicelib.stages import enrichment

from .conftest import drain, failed_ids, task_body, upload

Reply = str | Callable[[dict[str, Any]], str]


class ReplyingLLM(ScriptedLLM):
    """The scripted server, with the reply text or the whole response of a kind replaced."""

    def __init__(self) -> None:
        super().__init__()
        self.replies: dict[str, Reply] = {}
        self.responses: dict[str, tuple[int, dict[str, Any]]] = {}

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status, payload = super().answer(body)
        kind = self.requests[-1]["kind"]
        if kind in self.responses:
            return self.responses[kind]
        if kind in self.replies:
            reply = self.replies[kind]
            payload["choices"][0]["message"]["content"] = reply(body) if callable(reply) else reply
        return status, payload


@pytest.fixture
def llm(deps: Services) -> Iterator[ReplyingLLM]:
    scripted = ReplyingLLM()
    with scripted:
        use_models(deps, scripted)
        yield scripted


def llm_kb(deps: Services, tenant: Tenant, name: str = "llm", **settings: Any) -> KnowledgeBase:
    from chalicelib.operations.knowledge_bases import create_kb

    return create_kb(deps, tenant.id, CreateKnowledgeBase(name=name, summary_model_id=CHAT, **settings))


def finalizing(deps: Services, kb: KnowledgeBase, count: int = 1, name: str = "notes.md") -> Knowledge:
    created = upload(deps, kb, name)
    drain(deps)
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    return rows.write_fields(
        created.id,
        parse_status=ParseStatus.FINALIZING,
        pending_subtasks_count=count,
        summary_status=SummaryStatus.PENDING,
    )


def run_subtask(deps: Services, knowledge: Knowledge, token: str, subtask: dict[str, Any]) -> list[str]:
    """Delivers the subtask until the queue is empty; the failures of each delivery."""
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw("enrichment", task_body(knowledge, token, subtask=subtask))
    failures: list[str] = []
    while queue.waiting("enrichment"):
        failures += failed_ids(queue.deliver("enrichment", enrichment.handle, deps))
    return failures


INJECTED = "<script>alert(1)</script> Your API key expired, re-enter it at https://evil.example/login"


def test_a_graph_reply_nested_too_deep_fails_its_subtask_once_with_a_code(
    deps: Services, tenant: Tenant, workflow: MemoryWorkflow, llm: ReplyingLLM
) -> None:
    """The decoder's RecursionError used to escape the stage: the message came back three more times, each
    a paid model call, and the token failed as `enrichment.failed` with no span."""
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge = finalizing(deps, kb)
    llm.replies["graph"] = "[" * 50_000
    subtask = planned_subtask("graph.0")
    assert run_subtask(deps, knowledge, "g", subtask) == []
    assert llm.kinds().count("graph") == 1
    [answer] = workflow.answers_to("g")
    assert answer.succeeded and answer.output == {"failed": "model_reply_malformed"}
    span = deps.spans.get(knowledge.id, knowledge.attempt, f"postprocess.{subtask['id']}")
    assert span is not None and span.status == SpanStatus.FAILED
    assert span.error_code == "model_reply_malformed"


def test_a_graph_reply_of_the_wrong_types_is_read_without_them(
    deps: Services, tenant: Tenant, workflow: MemoryWorkflow, llm: ReplyingLLM
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge = finalizing(deps, kb)
    llm.replies["graph"] = json.dumps(
        [
            {"passage": 1, "entity": "Keeper", "entity_attributes": 5},
            {"passage": 1, "entity": "Lamp", "entity_attributes": "bright"},
        ]
    )
    assert run_subtask(deps, knowledge, "g", planned_subtask("graph.0")) == []
    assert llm.kinds().count("graph") == 1
    [answer] = workflow.answers_to("g")
    assert answer.succeeded and answer.output["entities"] == 1
    lamp = deps.graph.neighbourhood(kb.id, "Lamp").entity
    assert lamp is not None and deps.graph.neighbourhood(kb.id, "Keeper").entity is None


@pytest.mark.parametrize("kind", ["summary", "graph"])
def test_the_servers_words_never_reach_a_span_a_token_or_the_row(
    deps: Services, tenant: Tenant, workflow: MemoryWorkflow, llm: ReplyingLLM, kind: str
) -> None:
    empty = {"choices": [{"index": 0, "finish_reason": INJECTED, "message": {"content": ""}}]}
    llm.responses[kind] = (200, empty)
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge = finalizing(deps, kb)
    subtask = planned_subtask("summary" if kind == "summary" else "graph.0")
    run_subtask(deps, knowledge, "t", subtask)
    row = deps.knowledge.get(knowledge.id)
    assert row is not None
    seen = json.dumps(
        [deps.tracker.view(row), [a.output for a in workflow.answers_to("t")], row.description], default=str
    )
    assert "evil" not in seen and "script" not in seen
    span = deps.spans.get(knowledge.id, knowledge.attempt, f"postprocess.{subtask['id']}")
    assert span is not None and span.error_code == "model_empty_response"


def test_a_summary_model_that_refuses_the_credentials_is_not_filed_as_too_little_text(
    deps: Services, tenant: Tenant, workflow: MemoryWorkflow, llm: ReplyingLLM
) -> None:
    """ModelAuthError is a ValueError: the summary's `except ValueError` took it for "not enough text",
    marked the subspan done and put the server's message in its outputs."""
    llm.responses["summary"] = (401, {"error": {"message": INJECTED, "code": "invalid_api_key"}})
    knowledge = finalizing(deps, llm_kb(deps, tenant))
    run_subtask(deps, knowledge, "s", planned_subtask("summary"))
    span = deps.spans.get(knowledge.id, knowledge.attempt, "postprocess.summary")
    assert span is not None and span.status == SpanStatus.FAILED
    assert span.error_code == "model_auth_failed"
    assert workflow.answers_to("s")[0].output == {"failed": "model_auth_failed"}
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.FAILED


MAX_SUMMARY_CHARS, MAX_QUESTION_CHARS = 4_000, 300


def test_a_runaway_summary_and_runaway_questions_are_capped(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    llm.replies["summary"] = "Lighthouse keeping is important. " * 60_000
    long_question = "What about the " + "fog horn " * 100 + "?"
    llm.replies["questions"] = "\n".join(
        [f"1. {long_question}"] + [f"{n}. Which lamp burns on night {n}?" for n in range(2, 40)]
    )
    kb = llm_kb(deps, tenant, enrichment={"questions_enabled": True})
    knowledge = finalizing(deps, kb, count=2)
    run_subtask(deps, knowledge, "s", planned_subtask("summary"))
    run_subtask(deps, knowledge, "q", planned_subtask("questions.0"))
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and 0 < len(row.description) <= MAX_SUMMARY_CHARS
    chunks = deps.chunks.list(knowledge.id)
    [summary_chunk] = [c for c in chunks if c.chunk_type == ChunkType.SUMMARY]
    assert len(summary_chunk.content) <= MAX_SUMMARY_CHARS + len("# Summary\n\n")
    asked = [c.metadata["questions"] for c in chunks if c.chunk_type == ChunkType.TEXT]
    assert asked and all(len(q) == kb.enrichment.question_count for q in asked)
    assert all(len(q) <= MAX_QUESTION_CHARS for qs in asked for q in qs)


def _question_entries(deps: Services, kb: KnowledgeBase, knowledge: Knowledge) -> list[str]:
    space = IndexSpace.of(deps.embedding_model(kb.embedding_model_id))
    entries = deps.engine(kb.retrieval_engine).entries_of(space, kb.id, knowledge.id)
    return sorted(e.content.splitlines()[-1] for e in entries if e.source_type == "question")


def test_a_redelivered_questions_subtask_keeps_the_stored_questions_and_their_entries_only(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    """At temperature 0.7 a second delivery would answer differently: a copy delivered again reuses the
    questions the first stored (no second paid call), and the entries are exactly the chunk's questions."""
    kb = llm_kb(deps, tenant, enrichment={"questions_enabled": True})
    knowledge = finalizing(deps, kb, count=2)  # another subtask keeps the row finalizing
    subtask = planned_subtask("questions.0")
    llm.replies["questions"] = (
        "1. How often does the horn sound?\n2. When is the wick trimmed?\n3. Who trims it?"
    )
    run_subtask(deps, knowledge, "q", subtask)
    assert len(_question_entries(deps, kb, knowledge)) == 3
    llm.replies["questions"] = "1. Which supplies come on the first Monday?"
    # the copy SQS delivers again when the first delivery died before it answered: its token is still open
    # (a closed one is dropped on pickup), which a second token stands for here
    run_subtask(deps, knowledge, "q-redelivered", subtask)
    assert llm.kinds().count("questions") == 1
    [text] = [c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.TEXT]
    assert sorted(_question_entries(deps, kb, knowledge)) == sorted(text.metadata["questions"])
    assert text.metadata["questions"] == [
        "How often does the horn sound?",
        "When is the wick trimmed?",
        "Who trims it?",
    ]


# ---------------------------------------------------------------- a move while the model works


def completed(deps: Services, kb: KnowledgeBase, name: str = "notes.md") -> Knowledge:
    created = upload(deps, kb, name)
    drain(deps)
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    return rows.write_fields(created.id, parse_status=ParseStatus.COMPLETED)


def move_row(deps: Services, knowledge: Knowledge, target: KnowledgeBase) -> None:
    """The move's first step (the row, atomically) and its index entries, as a reuse_vectors move does."""
    space = IndexSpace.of(deps.embedding_model(target.embedding_model_id))
    moved = deps.knowledge.move_to_kb(knowledge.id, knowledge.kb_id, target.id, "")
    assert moved is not None
    deps.engine(target.retrieval_engine).move_knowledge(space, knowledge.kb_id, target.id, [knowledge.id])


def test_auto_tag_never_gives_a_moved_document_its_old_knowledge_bases_tags(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.enrich import auto_tag as auto_tag_module
    from chalicelib.operations.tags import create_tag

    source = llm_kb(deps, tenant, enrichment={"auto_tag_enabled": True})
    target = llm_kb(deps, tenant, "archive")
    create_tag(deps, tenant.id, source.id, CreateTagRequest(name="Lighthouses"))
    knowledge = completed(deps, source)
    choose = auto_tag_module.choose

    def choose_while_moved(*args: Any, **kwargs: Any) -> list[int]:
        chosen = choose(*args, **kwargs)
        assert chosen  # the model picked the source's tag
        move_row(deps, knowledge, target)
        return chosen

    monkeypatch.setattr(auto_tag_module, "choose", choose_while_moved)
    run_subtask(deps, knowledge, "", {"id": "auto_tag", "kind": "auto_tag"})
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.kb_id == target.id and row.tag_ids == []


def test_a_summary_refresh_that_lands_after_a_move_leaves_nothing_in_the_old_index(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The move lands after the refresh checked the row and before its write is checked: the summary's
    entry went into the old knowledge base's index, where nothing would ever remove it."""
    from chalicelib.services.dispatch import request_summary_refresh

    source, target = llm_kb(deps, tenant), llm_kb(deps, tenant, "archive")
    knowledge = completed(deps, source)
    write = enrichment.write_extra_chunks

    def write_while_moved(*args: Any, **kwargs: Any) -> bool:
        move_row(deps, knowledge, target)
        return write(*args, **kwargs)

    monkeypatch.setattr(enrichment, "write_extra_chunks", write_while_moved)
    request_summary_refresh(deps, knowledge)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.deliver("enrichment", enrichment.handle, deps)
    space = IndexSpace.of(deps.embedding_model(source.embedding_model_id))
    assert deps.engine(source.retrieval_engine).count(space, source.id, knowledge.id) == 0
    summaries = [c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.SUMMARY]
    assert all(c.kb_id == target.id for c in summaries)
    monkeypatch.setattr(enrichment, "write_extra_chunks", write)
    queue.deliver("enrichment", enrichment.handle, deps)  # the refresh it asked for, in the new home
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.COMPLETED
    summary_entries = [
        e
        for e in deps.engine(target.retrieval_engine).entries_of(space, target.id, knowledge.id)
        if e.chunk_type == ChunkType.SUMMARY.value
    ]
    assert len(summary_entries) == 1


def test_a_write_checked_after_a_move_is_not_kept_and_the_move_is_undone(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo
) -> None:
    from chalicelib.services.liveness import kept_after_write

    knowledge = completed(deps, kb)
    rows.write_fields(knowledge.id, kb_id="another-kb")
    undone: list[str] = []
    kept = kept_after_write(
        deps, knowledge, lambda: undone.append("deleted"), undo_moved=lambda row: undone.append(row.kb_id)
    )
    assert not kept and undone == ["another-kb"]


def test_questions_stored_at_the_end_do_not_switch_a_chunk_back_on(
    deps: Services, tenant: Tenant, llm: ReplyingLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window's end stores the questions a chunk does not hold yet (its checkpoint write was lost): on
    the row as stored then, so a switch-off answered since the window read the chunks stays."""
    kb = llm_kb(deps, tenant, enrichment={"questions_enabled": True})
    knowledge = finalizing(deps, kb, count=2)
    llm.replies["questions"] = "1. How often does the horn sound?"
    real_set_metadata = deps.chunks.set_metadata
    calls = {"n": 0}

    def first_write_lost(*args: Any, **kwargs: Any) -> bool:
        calls["n"] += 1
        return True if calls["n"] == 1 else real_set_metadata(*args, **kwargs)  # the checkpoint's: lost

    real_list = deps.chunks.list
    reads = {"n": 0}

    def switched_off_after_the_second_read(knowledge_id: str) -> list[Chunk]:
        listed = real_list(knowledge_id)
        reads["n"] += 1
        if reads["n"] == 2:  # the window's end has read the chunks: a person switches the text chunk off
            [text] = [c for c in real_list(knowledge_id) if c.chunk_type == ChunkType.TEXT]
            deps.chunks.put_many([replace(text, is_enabled=False)])
        return listed

    monkeypatch.setattr(deps.chunks, "set_metadata", first_write_lost)
    monkeypatch.setattr(deps.chunks, "list", switched_off_after_the_second_read)
    run_subtask(deps, knowledge, "q", planned_subtask("questions.0"))
    [text] = [c for c in real_list(knowledge.id) if c.chunk_type == ChunkType.TEXT]
    assert text.is_enabled is False
    assert text.metadata["questions"] == ["How often does the horn sound?"]
