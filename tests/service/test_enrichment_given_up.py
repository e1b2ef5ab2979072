"""Enrichment subtasks whose tries run out, a provider's rate limit below a window's size, the invocation's
deadline and a redelivery after the slot was released: the failure is recorded on the subtask's span (a
summary gets its failure rule), a window's progress is kept chunk by chunk, a window stops at the deadline
and carries on in a fresh message of the same token, and a released window asks nothing again."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from scripted_llm import use_models

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import (
    ChunkType,
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    SpanStatus,
    SummaryStatus,
    Tenant,
)
from chalicelib.stages import enrichment

from .conftest import drain, failed_ids, task_body, upload
from .test_enrichment_replies import ReplyingLLM, finalizing, llm_kb, run_subtask
from .test_enrichment_replies import llm as llm

LONG = "\n\n".join(
    f"## Section {i}\n\n" + " ".join(f"Keeper{i} logs weather word{j} at dawn." for j in range(60))
    for i in range(30)
)
OVERLOADED = (503, {"error": {"message": "SERVERWORDS overloaded"}})


def _few_deferrals(deps: Services) -> None:
    deps.settings = replace(deps.settings, max_throttle_deferrals=1)


def _long_finalizing(deps: Services, kb: Any) -> Knowledge:
    created = upload(deps, kb, "long.md", LONG.encode())
    drain(deps)
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    return rows.write_fields(
        created.id,
        parse_status=ParseStatus.FINALIZING,
        pending_subtasks_count=2,
        summary_status=SummaryStatus.PENDING,
    )


def _text_chunks(deps: Services, knowledge: Knowledge) -> list[Any]:
    return sorted(
        (c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.TEXT),
        key=lambda c: c.start_at,
    )


def _last_try_again(deps: Services, knowledge: Knowledge, token: str, subtask: dict[str, Any]) -> None:
    """A copy of the message on its last receive, as SQS may hand it out again."""
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    body = json.dumps(task_body(knowledge, token, subtask=subtask))
    enrichment.handle(
        deps, queue.event("enrichment", [body], receive_count=deps.settings.stage_max_receives), None
    )


# ---------------------------------------------------------------- tries run out


def test_a_questions_window_whose_tries_run_out_says_so_on_its_span(
    deps: Services, tenant: Tenant, workflow: MemoryWorkflow, llm: ReplyingLLM
) -> None:
    _few_deferrals(deps)
    llm.responses["questions"] = OVERLOADED
    kb = llm_kb(deps, tenant, enrichment={"questions_enabled": True})
    knowledge = finalizing(deps, kb, count=2)
    run_subtask(deps, knowledge, "q", planned_subtask("questions.0"))
    [answer] = workflow.answers_to("q")
    assert not answer.succeeded
    span = deps.spans.get(knowledge.id, knowledge.attempt, "postprocess.questions.0")
    assert span is not None and span.status == SpanStatus.FAILED
    assert span.error_code == "unknown"  # ModelUnavailable has no code of its own
    assert "SERVERWORDS" not in json.dumps([span.error_message, answer.cause, answer.error])
    # a redelivered last try writes nothing twice
    _last_try_again(deps, knowledge, "q-again", planned_subtask("questions.0"))
    assert deps.spans.get(knowledge.id, knowledge.attempt, "postprocess.questions.0") == span


def test_a_summary_whose_tries_run_out_fails_with_its_fallback_description(
    deps: Services, tenant: Tenant, workflow: MemoryWorkflow, llm: ReplyingLLM
) -> None:
    """Spec §1.13: terminal → description = the first 500 runes of the first chunk, status failed (it used to
    stay `processing`, with no span, until housekeeping's one-hour sweep)."""
    _few_deferrals(deps)
    llm.responses["summary"] = OVERLOADED
    kb = llm_kb(deps, tenant)
    knowledge = _long_finalizing(deps, kb)
    run_subtask(deps, knowledge, "s", planned_subtask("summary"))
    [answer] = workflow.answers_to("s")
    assert not answer.succeeded
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.FAILED
    first = _text_chunks(deps, knowledge)[0].content
    assert row.description == first[:500] and row.description
    span = deps.spans.get(knowledge.id, knowledge.attempt, "postprocess.summary")
    assert span is not None and span.status == SpanStatus.FAILED and span.error_code == "unknown"
    _last_try_again(deps, knowledge, "s-again", planned_subtask("summary"))
    assert deps.spans.get(knowledge.id, knowledge.attempt, "postprocess.summary") == span
    again = deps.knowledge.get(knowledge.id)
    assert again is not None and again.summary_status == SummaryStatus.FAILED
    assert again.description == row.description


def test_a_model_that_refuses_the_summary_leaves_the_same_fallback_description(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    """One failure rule for a summary, whatever made it fail for good."""
    llm.responses["summary"] = (400, {"error": {"message": "bad request", "code": "invalid_request"}})
    kb = llm_kb(deps, tenant)
    knowledge = _long_finalizing(deps, kb)
    run_subtask(deps, knowledge, "s", planned_subtask("summary"))
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.FAILED
    assert row.description == _text_chunks(deps, knowledge)[0].content[:500]


# ---------------------------------------------------------------- a rate limit below a window's size


class PerMinuteLimit(ReplyingLLM):
    """10 questions calls a 'minute'; the 11th is answered 429 and the minute starts over (the deferral
    waits it out)."""

    def __init__(self) -> None:
        super().__init__()
        self.used = 0
        self.throttled = 0

    def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        status, payload = super().answer(body)
        if self.requests[-1]["kind"] == "questions":
            if self.used >= 10:
                self.used = 0
                self.throttled += 1
                return 429, {"error": {"message": "rate limited", "code": "rate_limit_exceeded"}}
            self.used += 1
        return status, payload


def test_a_rate_limited_window_keeps_each_chunks_questions_and_asks_each_chunk_once(
    deps: Services, tenant: Tenant, workflow: MemoryWorkflow
) -> None:
    with PerMinuteLimit() as limited:
        use_models(deps, limited)
        kb = llm_kb(deps, tenant, enrichment={"questions_enabled": True})
        knowledge = _long_finalizing(deps, kb)
        texts = _text_chunks(deps, knowledge)
        assert len(texts) >= 20
        run_subtask(deps, knowledge, "q", planned_subtask("questions.0"))
        calls = limited.kinds().count("questions")
    assert limited.throttled >= 1
    assert calls == 20 + limited.throttled  # each chunk asked once, plus the calls refused
    [answer] = workflow.answers_to("q")
    assert answer.succeeded and answer.output["chunks"] == 20
    window = _text_chunks(deps, knowledge)[:20]
    assert all(c.metadata.get("questions") for c in window)
    span = deps.spans.get(knowledge.id, knowledge.attempt, "postprocess.questions.0")
    assert span is not None and span.status == SpanStatus.DONE


# ---------------------------------------------------------------- the invocation's deadline


class NoTimeLeft:
    """A Lambda context whose invocation is within the hand-over margin of its end."""

    aws_request_id = "req"
    function_name = "enrichment"

    def get_remaining_time_in_millis(self) -> int:
        return 3_000


def test_a_questions_window_stops_at_the_deadline_and_carries_on_under_the_same_token(
    deps: Services, tenant: Tenant, workflow: MemoryWorkflow, llm: ReplyingLLM
) -> None:
    kb = llm_kb(deps, tenant, enrichment={"questions_enabled": True})
    knowledge = _long_finalizing(deps, kb)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw("enrichment", task_body(knowledge, "q", subtask=planned_subtask("questions.0")))
    failures = failed_ids(
        queue.deliver("enrichment", lambda d, e, _c: enrichment.handle(d, e, NoTimeLeft()), deps)
    )
    assert failures == []
    assert llm.kinds().count("questions") == 1  # one call, stored, then a fresh message
    assert workflow.answers_to("q") == []
    [continued] = queue.bodies("enrichment")
    assert continued["task_token"] == "q" and continued.get("deferrals", 0) == 0
    deliveries = 1
    while queue.waiting("enrichment"):
        assert (
            failed_ids(
                queue.deliver("enrichment", lambda d, e, _c: enrichment.handle(d, e, NoTimeLeft()), deps)
            )
            == []
        )
        deliveries += 1
    assert deliveries == 20 and llm.kinds().count("questions") == 20
    [answer] = workflow.answers_to("q")
    assert answer.succeeded and answer.output["chunks"] == 20


# ---------------------------------------------------------------- a redelivery after the slot's release


def test_a_questions_window_redelivered_after_its_slot_was_released_is_skipped(
    deps: Services, tenant: Tenant, workflow: MemoryWorkflow, llm: ReplyingLLM
) -> None:
    kb = llm_kb(deps, tenant, enrichment={"questions_enabled": True})
    knowledge = finalizing(deps, kb, count=2)
    run_subtask(deps, knowledge, "q", planned_subtask("questions.0"))
    assert deps.knowledge.slot_released(knowledge.id, knowledge.attempt, "questions.0")
    run_subtask(deps, knowledge, "q-again", planned_subtask("questions.0"))
    assert llm.kinds().count("questions") == 1
    [answer] = workflow.answers_to("q-again")
    assert answer.succeeded and answer.output.get("skipped") is True


def test_an_image_task_whose_tries_run_out_says_so_on_its_span_with_the_errors_code(
    deps: Services, kb: KnowledgeBase, workflow: MemoryWorkflow, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.ports.storage import StorageUnavailable
    from chalicelib.stages import multimodal

    knowledge = upload(deps, kb)
    drain(deps)

    def unavailable(url: str) -> bytes:
        raise StorageUnavailable(operation="get_object", http_status=503)

    monkeypatch.setattr(deps.files, "read", unavailable)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw(
        "multimodal", task_body(knowledge, "img", image={"index": 0, "url": "s3://b/x.png", "original": True})
    )
    receives = 0
    while queue.waiting("multimodal"):
        queue.deliver("multimodal", multimodal.handle, deps)
        receives += 1
    assert receives == deps.settings.stage_max_receives
    [answer] = workflow.answers_to("img")
    assert not answer.succeeded
    span = deps.spans.get(knowledge.id, knowledge.attempt, "multimodal.image[0]")
    assert span is not None and span.status == SpanStatus.FAILED
    assert span.error_code == "storage_unavailable"
