"""Found by an enrichment audit: a document's model calls had no bound and a graph window ignored the Lambda
deadline; a graph store's refusal was blamed on the chat model. Now the operator's caps bound the plan (the
row and the postprocess span say what was left out), a graph window keeps each call's facts as they come and
carries on past the deadline in a fresh message of the same token, asking nothing twice, and a refused write
says the store refused it (graph_write_refused)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import ChunkType, SpanStatus, Stage, Tenant
from chalicelib.ports import Dependencies
from chalicelib.ports.graph import GraphWriteRefused
from chalicelib.stages import enrichment, postprocess
from chalicelib.stages.messages import SubtaskMessageModel

from .conftest import drain, failed_ids, task_body, upload
from .test_enrichment_given_up import LONG, NoTimeLeft, _long_finalizing
from .test_enrichment_replies import ReplyingLLM, finalizing, llm_kb, run_subtask
from .test_enrichment_replies import llm as llm


def test_the_plan_keeps_to_the_operators_caps_and_says_so(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    deps.settings = replace(deps.settings, max_question_chunks=20, max_graph_chunks=20)
    kb = llm_kb(
        deps, tenant, enrichment={"questions_enabled": True}, indexing_strategy={"graph_enabled": True}
    )
    knowledge = upload(deps, kb, "long.md", LONG.encode())
    drain(deps)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw("postprocess", task_body(knowledge, "plan-token"))
    queue.deliver("postprocess", postprocess.handle, deps)
    texts = [c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.TEXT]
    assert len(texts) > 40, "the document must be longer than two windows"
    row = deps.knowledge.get(knowledge.id)
    assert row is not None
    planned = row.enrichment["planned"]
    assert [p for p in planned if p.startswith("questions.")] == ["questions.0"]
    assert [p for p in planned if p.startswith("graph.")] == ["graph.0"]
    left_out = f"{len(texts) - 20} of {len(texts)} chunks left out"
    assert row.enrichment["not_planned"]["questions_capped"].startswith(left_out)
    span = deps.spans.get(knowledge.id, knowledge.attempt, Stage.POSTPROCESS.value)
    assert span is not None and "WEKNORA_MAX_GRAPH_CHUNKS" in span.outputs["not_planned"]["graph_capped"]


def _deliver_out_of_time(queue: MemoryTaskQueue, deps: Services) -> list[str]:
    return failed_ids(
        queue.deliver("enrichment", lambda d, e, _c: enrichment.handle(d, e, NoTimeLeft()), deps)
    )


def test_a_graph_window_stops_at_the_deadline_and_carries_on_under_the_same_token(
    deps: Services, tenant: Tenant, workflow: MemoryWorkflow, llm: ReplyingLLM
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge = _long_finalizing(deps, kb)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw("enrichment", task_body(knowledge, "g", subtask=planned_subtask("graph.0")))
    assert _deliver_out_of_time(queue, deps) == []
    assert llm.kinds().count("graph") == 1  # one call, its facts stored, then a fresh message
    assert workflow.answers_to("g") == []
    [continued] = queue.bodies("enrichment")
    assert continued["task_token"] == "g" and continued.get("deferrals", 0) == 0
    deliveries = 1
    while queue.waiting("enrichment"):
        assert _deliver_out_of_time(queue, deps) == []
        deliveries += 1
    calls = 20 // enrichment.GRAPH_CHUNKS_PER_CALL
    assert deliveries == calls and llm.kinds().count("graph") == calls  # no call asked twice
    [answer] = workflow.answers_to("g")
    assert answer.succeeded and answer.output["chunks"] == 20
    marked = [c for c in deps.chunks.list(knowledge.id) if enrichment.GRAPH_DONE in c.metadata]
    assert len(marked) == calls
    assert answer.output["entities"] == sum(c.metadata[enrichment.GRAPH_DONE]["entities"] for c in marked)


def test_a_graph_window_redelivered_before_its_release_asks_nothing_again(
    deps: Services,
    tenant: Tenant,
    workflow: MemoryWorkflow,
    llm: ReplyingLLM,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge = finalizing(deps, kb)
    release, died = enrichment.release, []

    def release_or_die(deps: Dependencies, task: SubtaskMessageModel) -> None:
        if not died:
            died.append(task.subtask.id)
            raise TimeoutError("the Lambda timed out before the slot was released")
        release(deps, task)

    monkeypatch.setattr(enrichment, "release", release_or_die)
    assert len(run_subtask(deps, knowledge, "g", planned_subtask("graph.0"))) == 1  # delivered twice
    assert llm.kinds().count("graph") == 1  # the calls were marked done: not paid for again
    [answer] = workflow.answers_to("g")
    assert answer.succeeded and answer.output["entities"] >= 1


def test_a_refused_graph_write_is_not_blamed_on_the_chat_model(
    deps: Services,
    tenant: Tenant,
    workflow: MemoryWorkflow,
    llm: ReplyingLLM,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge = finalizing(deps, kb)

    def refuse(*_: Any, **__: Any) -> None:
        raise GraphWriteRefused("the graph store refused a window record")

    monkeypatch.setattr(deps.graph, "add_window", refuse)
    subtask = planned_subtask("graph.0")
    assert run_subtask(deps, knowledge, "g", subtask) == []
    assert llm.kinds().count("graph") == 1  # failed at once, not retried
    [answer] = workflow.answers_to("g")
    assert answer.succeeded and answer.output == {"failed": "graph_write_refused"}
    span = deps.spans.get(knowledge.id, knowledge.attempt, f"postprocess.{subtask['id']}")
    assert span is not None and span.status == SpanStatus.FAILED
    assert span.error_code == "graph_write_refused"
    assert "chat model" not in span.error_message and "store refused" in span.error_message
