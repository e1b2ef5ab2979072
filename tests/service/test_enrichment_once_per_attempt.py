"""Enrichment work that a reparse or a redelivery overtakes (found by an audit): a superseded attempt's summary
worker leaves the new attempt's summary as it is (no refresh reset to pending, no failure, no description),
and a graph window delivered twice asks the model once and keeps one answer."""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import chalicelib.enrich.summary as summary_module
from chalicelib.adapters.memory import MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.commands import ReparseRequest
from chalicelib.domain.events import EventType
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import ChunkType, Knowledge, KnowledgeBase, SummaryStatus, Tenant
from chalicelib.stages import enrichment, postprocess
from chalicelib.stages.housekeeping import sweep
from chalicelib.tasks.reparse import reparse

from .conftest import drain, task_body, upload
from .test_enrichment_replies import ReplyingLLM, finalizing, llm, llm_kb, run_subtask  # noqa: F401


def _plan(deps: Services, knowledge: Knowledge, token: str) -> None:
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw("postprocess", task_body(knowledge, token))
    while queue.waiting("postprocess"):
        queue.deliver("postprocess", postprocess.handle, deps)


def _summary_events(deps: Services) -> list[tuple[str, int]]:
    published = deps.events.published  # type: ignore[attr-defined]
    return [(e.type.value, e.detail["attempt"]) for e in published if e.type.value.startswith("Summary")]


def _reparsed(deps: Services, kb: KnowledgeBase, knowledge_id: str) -> Knowledge:
    """A reparse that runs to its plan while attempt 1's model call is still out."""
    reparse(deps, kb.tenant_id, knowledge_id, ReparseRequest())
    drain(deps)
    row = deps.knowledge.get(knowledge_id)
    assert row is not None and row.attempt == 2
    _plan(deps, row, "p2")
    return row


def _summary_of_attempt_1_ending_in_the_middle(
    deps: Services, kb: KnowledgeBase, first: Knowledge, monkeypatch: pytest.MonkeyPatch, ends: str
) -> Knowledge:
    """Attempt 1's summary worker (a thread) asks its model; a reparse runs to its plan; attempt 2's summary
    worker claims its summary and, while its own model call is out, attempt 1's call returns (`written`)
    or finds too little text: attempt 1's worker ends, then attempt 2's."""
    summarize = summary_module.summarize
    asked, answer = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def model_call(*args: Any, **kwargs: Any) -> str:
        if threading.current_thread() is not threading.main_thread():  # attempt 1's
            asked.set()
            assert answer.wait(10)
            if ends == "too_little_text":
                raise summary_module.SummaryNotMade("too little text", "summary_input_too_short")
            return summarize(*args, **kwargs)
        answer.set()  # attempt 2's: attempt 1's worker ends while this one's model writes
        worker.join(10)
        return summarize(*args, **kwargs)

    def attempt_1() -> None:
        try:
            enrichment.summary(deps, first, kb)
        except BaseException as error:  # re-raised on the test's thread
            errors.append(error)

    monkeypatch.setattr(summary_module, "summarize", model_call)
    worker = threading.Thread(target=attempt_1)
    worker.start()
    assert asked.wait(10)
    second = _reparsed(deps, kb, first.id)
    run_subtask(deps, second, "s2", planned_subtask("summary"))
    assert not worker.is_alive() and errors == []
    return second


@pytest.mark.parametrize("second_state", ["completed", "writing"])
@pytest.mark.parametrize("first_ends", ["written", "too_little_text"])
def test_a_superseded_attempts_summary_leaves_the_new_attempts_summary_alone(
    deps: Services,
    kb: KnowledgeBase,
    workflow: MemoryWorkflow,
    monkeypatch: pytest.MonkeyPatch,
    second_state: str,
    first_ends: str,
) -> None:
    """Attempt 1's late worker used to reset attempt 2's summary to pending (a refresh of attempt 1, which
    its worker skips), or fail it with attempt 1's text as the description: attempt 2's summary ended
    failed, announced after Summary Completed, or was never completed at all."""
    created = upload(deps, kb)
    drain(deps)
    first = deps.knowledge.get(created.id)
    assert first is not None
    _plan(deps, first, "p1")
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    if second_state == "writing":
        _summary_of_attempt_1_ending_in_the_middle(deps, kb, first, monkeypatch, first_ends)
    else:  # attempt 2's summary made while attempt 1's model call was out
        summarize = summary_module.summarize

        def reparsed_meanwhile(*args: Any, **kwargs: Any) -> str:
            monkeypatch.setattr(summary_module, "summarize", summarize)
            run_subtask(deps, _reparsed(deps, kb, created.id), "s2", planned_subtask("summary"))
            if first_ends == "too_little_text":
                raise summary_module.SummaryNotMade("too little text", "summary_input_too_short")
            return summarize(*args, **kwargs)

        monkeypatch.setattr(summary_module, "summarize", reparsed_meanwhile)
        queue.send_raw("enrichment", task_body(first, "s1", subtask=planned_subtask("summary")))
        queue.deliver("enrichment", enrichment.handle, deps)
        assert not queue.waiting("enrichment")  # no refresh asked for a superseded attempt
    later = datetime.now(UTC) + timedelta(
        seconds=deps.settings.summary_stale_after_seconds + deps.settings.stale_after_seconds + 60
    )
    assert sweep(deps, now=later).summaries_failed == []
    row = deps.knowledge.get(created.id)
    assert row is not None and row.summary_status == SummaryStatus.COMPLETED and row.description
    summary_chunks = [c for c in deps.chunks.list(created.id) if c.chunk_type == ChunkType.SUMMARY]
    assert [c.content for c in summary_chunks] == [f"# Summary\n\n{row.description}"]
    assert _summary_events(deps) == [(EventType.SUMMARY_COMPLETED.value, 2)]


def test_a_summary_refresh_of_another_attempt_marks_nothing_and_queues_nothing(
    deps: Services, kb: KnowledgeBase
) -> None:
    from chalicelib.services.dispatch import request_summary_refresh

    created = upload(deps, kb)
    drain(deps)
    first = deps.knowledge.get(created.id)
    assert first is not None
    reparse(deps, kb.tenant_id, created.id, ReparseRequest())
    before = deps.knowledge.get(created.id)
    assert before is not None and before.attempt == 2
    assert not request_summary_refresh(deps, first)
    after = deps.knowledge.get(created.id)
    assert after is not None and after.summary_status == before.summary_status
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    assert not queue.waiting("enrichment")


def test_a_graph_window_delivered_twice_asks_the_model_once_and_keeps_one_answer(
    deps: Services,
    tenant: Tenant,
    workflow: MemoryWorkflow,
    llm: ReplyingLLM,  # noqa: F811
) -> None:
    kb = llm_kb(deps, tenant, indexing_strategy={"graph_enabled": True})
    knowledge = finalizing(deps, kb, count=2)  # another subtask still out: the row stays finalizing
    subtask = planned_subtask("graph.0")
    llm.replies["graph"] = json.dumps([{"passage": 1, "entity": "Keeper", "entity_attributes": "x"}])
    run_subtask(deps, knowledge, "g", subtask)
    llm.replies["graph"] = json.dumps([{"passage": 1, "entity": "Lamp", "entity_attributes": "y"}])
    run_subtask(deps, knowledge, "g", subtask)  # the same message again, its answer already sent
    assert llm.kinds().count("graph") == 1
    assert deps.graph.neighbourhood(kb.id, "Keeper").entity is not None
    assert deps.graph.neighbourhood(kb.id, "Lamp").entity is None
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.pending_subtasks_count == 1  # the slot counted once
    run_subtask(deps, knowledge, "w", planned_subtask("questions.0"))  # the other slot: promoted
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.pending_subtasks_count == 0 and row.parse_status.value == "completed"
