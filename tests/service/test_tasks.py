"""The state machine's tasks on the fakes (multimodal, postprocess, enrichment): each worker answers its
token once its work is durable, answers "skipped" when the row moved on, and a failure only on its last try.
The state machine itself is not run: each test sends the task message it would send."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest
from PIL import Image

from chalicelib.adapters.memory import (
    MemoryFileStore,
    MemoryKnowledgeRepo,
    MemoryTaskQueue,
    MemoryWorkflow,
    TaskAnswer,
)
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, ReparseRequest
from chalicelib.domain.errors import PermanentStageError
from chalicelib.domain.ids import image_chunk_id
from chalicelib.domain.plan import WINDOW, planned_subtask
from chalicelib.domain.types import (
    ChunkType,
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    SpanStatus,
    Stage,
    SummaryStatus,
    Tenant,
)
from chalicelib.operations.create import FileUpload, create_from_file
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.ports import IndexSpace
from chalicelib.stages import enrichment, multimodal, postprocess
from chalicelib.tasks.reparse import reparse

from .conftest import TEXT, drain, failed_ids, task_body, upload

Handler = Callable[[Any, dict[str, Any], Any], dict[str, Any]]


class FakeOcr:
    name = "fake-ocr"

    def __init__(self, text: str = "", error: Exception | None = None) -> None:
        self.text, self.error = text, error
        self.seen: list[bytes] = []

    def available(self) -> bool:
        return True

    def recognize(self, image: bytes) -> str:
        self.seen.append(image)
        if self.error is not None:
            raise self.error
        return self.text


def indexed(deps: Services, kb: KnowledgeBase) -> Knowledge:
    """A document through the three main stages: processing, enabled, its workflow started."""
    created = upload(deps, kb)
    drain(deps)
    return created


def run_task(
    deps: Services, queue: MemoryTaskQueue, name: str, handler: Handler, body: dict[str, Any]
) -> Any:
    queue.send_raw(name, body)
    return queue.deliver(name, handler, deps)


def stored_png(files: MemoryFileStore) -> str:
    out = io.BytesIO()
    Image.new("RGB", (100, 100), (0, 90, 160)).save(out, format="PNG")
    return files.save("t/exports/chart.png", out.getvalue(), "image/png")


# ---------------------------------------------------------------- multimodal


def test_an_image_task_writes_its_ocr_chunk_and_answers_its_token_once(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
) -> None:
    ocr = FakeOcr("Tide table for March")
    deps.replace_ocr_asr(ocr, None)
    knowledge = indexed(deps, kb)
    url = stored_png(files)
    body = task_body(knowledge, "token-1", image={"index": 0, "url": url, "original": True})
    run_task(deps, queue, "multimodal", multimodal.handle, body)

    assert workflow.answers_to("token-1") == [
        TaskAnswer("token-1", True, {"ocr_chars": 20, "caption_chars": 0})
    ]
    chunk_id = image_chunk_id(knowledge.id, 1, 0, "ocr")
    image_chunk = deps.chunks.get_many([(knowledge.id, chunk_id)])[(knowledge.id, chunk_id)]
    assert image_chunk.chunk_type == ChunkType.IMAGE_OCR and image_chunk.content == "Tide table for March"
    assert image_chunk.parent_chunk_id == deps.chunks.list(knowledge.id)[0].id
    space = IndexSpace.of(deps.embedding_model())
    entries = deps.engine().count(space, kb.id, knowledge.id)

    redelivered = run_task(deps, queue, "multimodal", multimodal.handle, body)  # at-least-once
    assert redelivered["batchItemFailures"] == []  # a closed token is not an error
    assert len(workflow.answers_to("token-1")) == 1
    assert [c.id for c in deps.chunks.list(knowledge.id)].count(chunk_id) == 1
    assert deps.engine().count(space, kb.id, knowledge.id) == entries


@pytest.mark.parametrize(
    ("image", "ocr", "reason"),
    [
        (
            {"index": 1, "url": "mem://files/x.png", "ocr_done": True, "original": True},
            FakeOcr("unused"),
            "already in the document",
        ),
        ({"index": 1, "url": "mem://files/x.png", "original": True}, None, "no OCR engine"),
    ],
)
def test_an_image_with_nothing_to_do_is_skipped_and_answered(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    image: dict[str, Any],
    ocr: FakeOcr | None,
    reason: str,
) -> None:
    deps.replace_ocr_asr(ocr, None)
    knowledge = indexed(deps, kb)
    image = image | {"url": stored_png(files)}
    run_task(deps, queue, "multimodal", multimodal.handle, task_body(knowledge, "t", image=image))
    assert workflow.answers_to("t") == [TaskAnswer("t", True, {"ocr_chars": 0, "caption_chars": 0})]
    subspan = deps.spans.get(knowledge.id, 1, "multimodal.image[1]")
    assert subspan is not None and subspan.status == SpanStatus.DONE
    assert reason in subspan.outputs["image_ocr_skipped"]
    assert ocr is None or ocr.seen == []


def test_an_unreadable_image_never_fails_its_document(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
) -> None:
    deps.replace_ocr_asr(FakeOcr(error=PermanentStageError("not an image")), None)
    knowledge = indexed(deps, kb)
    body = task_body(knowledge, "t", image={"index": 2, "url": stored_png(files), "original": True})
    run_task(deps, queue, "multimodal", multimodal.handle, body)
    assert workflow.answers_to("t") == [TaskAnswer("t", True, {"ocr_chars": 0, "caption_chars": 0})]
    subspan = deps.spans.get(knowledge.id, 1, "multimodal.image[2]")
    assert subspan is not None and subspan.status == SpanStatus.FAILED
    assert "not an image" in subspan.error_message
    current = deps.knowledge.get(knowledge.id)
    assert current is not None and current.parse_status == ParseStatus.PROCESSING


def test_a_task_of_a_superseded_attempt_is_answered_skipped_without_work(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
) -> None:
    ocr = FakeOcr("text")
    deps.replace_ocr_asr(ocr, None)
    knowledge = indexed(deps, kb)
    reparse(deps, kb.tenant_id, knowledge.id, ReparseRequest())
    run_task(
        deps,
        queue,
        "multimodal",
        multimodal.handle,
        task_body(knowledge, "old", image={"index": 0, "url": stored_png(files), "original": True}),
    )
    (answer,) = workflow.answers_to("old")
    assert answer.succeeded and answer.output["skipped"] is True
    assert ocr.seen == [] and deps.chunks.list(knowledge.id) == []


def test_a_crashing_task_is_retried_and_answers_a_failure_once_on_its_last_try(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
) -> None:
    deps.replace_ocr_asr(FakeOcr(error=RuntimeError("driver crashed")), None)
    knowledge = indexed(deps, kb)
    queue.send_raw(
        "multimodal",
        task_body(knowledge, "t", image={"index": 0, "url": stored_png(files), "original": True}),
    )
    for receive in range(1, 4):
        assert len(failed_ids(queue.deliver("multimodal", multimodal.handle, deps))) == 1, receive
        assert workflow.answers_to("t") == []
    assert queue.deliver("multimodal", multimodal.handle, deps)["batchItemFailures"] == []
    assert workflow.answers_to("t") == [
        TaskAnswer("t", False, error="multimodal.failed", cause="RuntimeError")
    ]
    assert queue.waiting("multimodal") == [] and queue.dead_letters("multimodal") == []


def test_a_malformed_task_is_parked_and_its_token_left_alone(
    deps: Services, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    body = '{"task_token": "t", "knowledge_id": "k", "attempt": 1}'  # no image
    response = multimodal.handle(deps, queue.event("multimodal", [body]), None)
    assert response["batchItemFailures"] == [] and workflow.answers == []
    assert [m.body for m in queue.dead_letters("multimodal")] == [body]


# ---------------------------------------------------------------- postprocess


def summarising_kb(deps: Services, tenant: Tenant) -> KnowledgeBase:
    return create_kb(
        deps, tenant.id, CreateKnowledgeBase(name="summaries", summary_model_id="local/extractive")
    )


def test_without_a_summary_model_the_extractive_summary_is_planned(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    knowledge = indexed(deps, kb)
    deps.tracker.begin_stage(knowledge, Stage.MULTIMODAL)  # an image task left the stage running
    run_task(deps, queue, "postprocess", postprocess.handle, task_body(knowledge, "plan"))
    summary = {"id": "summary", "kind": "summary", "id_set": ["summary"]}
    assert workflow.answers_to("plan") == [
        TaskAnswer("plan", True, {"skipped": False, "subtasks": [summary], "count": 1})
    ]
    statuses = {s.span_id: s.status for s in deps.spans.list(knowledge.id, 1)}
    assert statuses["postprocess"] == SpanStatus.DONE and statuses["multimodal"] == SpanStatus.DONE


def test_a_summary_model_plans_one_summary_subtask(
    deps: Services,
    tenant: Tenant,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    rows: MemoryKnowledgeRepo,
) -> None:
    knowledge = indexed(deps, summarising_kb(deps, tenant))
    run_task(deps, queue, "postprocess", postprocess.handle, task_body(knowledge, "plan"))
    (answer,) = workflow.answers_to("plan")
    assert answer.output["subtasks"] == [{"id": "summary", "kind": "summary", "id_set": ["summary"]}]
    assert answer.output["count"] == 1
    current = rows.get(knowledge.id)
    assert current is not None and current.summary_status == SummaryStatus.PENDING


def test_the_planner_sets_finalizing_with_the_exact_count_before_it_answers(
    deps: Services,
    tenant: Tenant,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    rows: MemoryKnowledgeRepo,
) -> None:
    """The state machine's SetFinalizing state is folded into the planning worker: the row is finalizing,
    with the count of the subtasks answered, by the time the answer leaves."""
    knowledge = indexed(deps, summarising_kb(deps, tenant))
    seen: list[tuple[ParseStatus, int]] = []
    answer_task = workflow.task_success

    def observed(token: str, output: Any) -> bool:
        row = rows.get(knowledge.id)
        assert row is not None
        seen.append((row.parse_status, row.pending_subtasks_count))
        return answer_task(token, output)

    workflow.task_success = observed  # type: ignore[method-assign]
    run_task(deps, queue, "postprocess", postprocess.handle, task_body(knowledge, "plan"))
    assert seen == [(ParseStatus.FINALIZING, 1)]
    row = rows.get(knowledge.id)
    assert row is not None and row.enrichment["planned"] == ["summary"]


def test_a_second_copy_of_the_plan_answers_the_plan_on_the_row_and_redoes_nothing(
    deps: Services,
    tenant: Tenant,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    rows: MemoryKnowledgeRepo,
) -> None:
    """A plan whose answer was lost (or a duplicate delivery) finds the row finalizing: it answers the plan
    stored on the row, or the machine would end without running the counted subtasks and leave the row
    finalizing for ever; it does not plan again (the summary status and spans stay as they are)."""
    knowledge = indexed(deps, summarising_kb(deps, tenant))
    run_task(deps, queue, "postprocess", postprocess.handle, task_body(knowledge, "plan"))
    rows.set_summary_status(knowledge.id, SummaryStatus.COMPLETED.value)
    run_task(deps, queue, "postprocess", postprocess.handle, task_body(knowledge, "again"))
    (first,) = workflow.answers_to("plan")
    (second,) = workflow.answers_to("again")
    assert second.output == first.output and first.output["count"] >= 1
    row = rows.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.COMPLETED
    assert (row.parse_status, row.pending_subtasks_count) == (ParseStatus.FINALIZING, first.output["count"])


def test_a_copy_that_loses_the_race_to_settle_answers_the_winners_plan(
    deps: Services,
    tenant: Tenant,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    rows: MemoryKnowledgeRepo,
) -> None:
    """Two copies plan at once; the second one's conditional write fails because the first settled the row:
    it must answer that plan, not "skipped" (which could reach the machine first and end it)."""
    knowledge = indexed(deps, summarising_kb(deps, tenant))
    settle = rows.settle_plan
    winner = {"planned": ["summary"], "not_planned": {}}

    def raced(knowledge_id: str, attempt: int, count: int, plan: Any, **kw: Any) -> Knowledge | None:
        assert settle(knowledge_id, attempt, 1, winner, **kw) is not None  # the other copy, just before
        return settle(knowledge_id, attempt, count, plan, **kw)

    rows.settle_plan = raced  # type: ignore[method-assign]
    run_task(deps, queue, "postprocess", postprocess.handle, task_body(knowledge, "plan"))
    (answer,) = workflow.answers_to("plan")
    assert answer.output["skipped"] is False
    assert answer.output["subtasks"] == [{"id": "summary", "kind": "summary", "id_set": ["summary"]}]


def test_an_upload_can_turn_the_summary_off(
    deps: Services, tenant: Tenant, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    kb = summarising_kb(deps, tenant)
    knowledge = create_from_file(
        deps, tenant.id, kb.id, FileUpload(data=TEXT, file_name="n.md", overrides={"summary_enabled": False})
    )
    drain(deps)
    run_task(deps, queue, "postprocess", postprocess.handle, task_body(knowledge, "plan"))
    assert workflow.answers_to("plan")[0].output["subtasks"] == []
    row = deps.knowledge.get(knowledge.id)  # nothing planned: the planner completes the row itself
    assert row is not None and (row.parse_status, row.pending_subtasks_count) == (ParseStatus.COMPLETED, 0)


def test_postprocess_of_a_row_that_moved_on_is_skipped(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    rows: MemoryKnowledgeRepo,
) -> None:
    knowledge = indexed(deps, kb)
    rows.mark_failed(knowledge.id, 1, "housekeeping", "task_timeout")
    run_task(deps, queue, "postprocess", postprocess.handle, task_body(knowledge, "plan"))
    (answer,) = workflow.answers_to("plan")
    assert answer.output["skipped"] is True and deps.spans.get(knowledge.id, 1, "postprocess") is None
    assert answer.output["subtasks"] == []  # the machine's Map fans out nothing
    row = rows.get(knowledge.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED


# ---------------------------------------------------------------- enrichment


def finalizing(deps: Services, rows: MemoryKnowledgeRepo, kb: KnowledgeBase) -> Knowledge:
    """What the planner leaves after a plan of one subtask (a summary's asked for: pending)."""
    knowledge = indexed(deps, kb)
    return rows.write_fields(
        knowledge.id,
        parse_status=ParseStatus.FINALIZING,
        pending_subtasks_count=1,
        summary_status=SummaryStatus.PENDING,
    )


def test_the_summary_subtask_writes_the_description_and_answers_once(
    deps: Services,
    tenant: Tenant,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    rows: MemoryKnowledgeRepo,
) -> None:
    knowledge = finalizing(deps, rows, summarising_kb(deps, tenant))
    subtask = {"id": "summary", "kind": "summary", "id_set": ["summary"]}
    run_task(deps, queue, "enrichment", enrichment.handle, task_body(knowledge, "sum", subtask=subtask))
    done = rows.get(knowledge.id)
    assert done is not None and done.summary_status == SummaryStatus.COMPLETED
    assert "keeper" in done.description and len(done.description) > 20
    assert workflow.answers_to("sum") == [
        TaskAnswer("sum", True, {"summary_chars": len(done.description), "model": "local/extractive"})
    ]
    subspan = deps.spans.get(knowledge.id, 1, "postprocess.summary")
    assert subspan is not None and subspan.status == SpanStatus.DONE


def test_a_redelivered_summary_subtask_does_not_make_it_again_and_announces_it_under_the_same_id(
    deps: Services,
    tenant: Tenant,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    rows: MemoryKnowledgeRepo,
) -> None:
    from chalicelib.adapters.memory import MemoryEventPublisher

    knowledge = finalizing(deps, rows, summarising_kb(deps, tenant))
    rows.write_fields(knowledge.id, pending_subtasks_count=2)  # another subtask still runs: the row waits
    subtask = {"id": "summary", "kind": "summary", "id_set": ["summary"]}
    for token in ("sum", "sum-again"):  # SQS delivers the message twice
        run_task(deps, queue, "enrichment", enrichment.handle, task_body(knowledge, token, subtask=subtask))
    events = deps.events
    assert isinstance(events, MemoryEventPublisher)
    # announced again (its first worker may have died before it announced), under the same id
    completed = [e.event_id for e in events.published if e.type.value == "Summary Completed"]
    assert len(completed) == 2 and len(set(completed)) == 1
    again = [answer.output for answer in workflow.answers_to("sum-again")]
    assert again == [{"summary_chars": 0, "reason": "no summary is asked for now (made already, or failed)"}]
    done = rows.get(knowledge.id)
    assert (
        done is not None and done.summary_status == SummaryStatus.COMPLETED and "keeper" in done.description
    )


def test_a_summary_written_while_the_title_changed_is_dropped_and_made_again(
    deps: Services,
    tenant: Tenant,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    rows: MemoryKnowledgeRepo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.enrich import summary as summary_module

    knowledge = finalizing(deps, rows, summarising_kb(deps, tenant))
    summarize = summary_module.summarize

    def renamed_meanwhile(*args: Any, **kwargs: Any) -> str:
        rows.write_fields(knowledge.id, title="A new title")  # an edit lands while the model writes
        return summarize(*args, **kwargs)

    monkeypatch.setattr(summary_module, "summarize", renamed_meanwhile)
    subtask = {"id": "summary", "kind": "summary", "id_set": ["summary"]}
    run_task(deps, queue, "enrichment", enrichment.handle, task_body(knowledge, "sum", subtask=subtask))
    row = rows.get(knowledge.id)
    assert row is not None and row.description == "" and row.summary_status == SummaryStatus.PENDING
    assert not any(c.chunk_type == ChunkType.SUMMARY for c in deps.chunks.list(knowledge.id))
    refresh = [json.loads(m.body) for m in queue.sent if m.queue == "enrichment"][-1]
    assert refresh["subtask"]["id"] == "summary_refresh"
    assert workflow.answers_to("sum")[0].output["summary_chars"] == 0


def test_a_subtask_for_a_row_not_finalizing_is_skipped(
    deps: Services,
    tenant: Tenant,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    rows: MemoryKnowledgeRepo,
) -> None:
    knowledge = indexed(deps, summarising_kb(deps, tenant))  # still processing: not this subtask's turn
    subtask = {"id": "summary", "kind": "summary"}
    run_task(deps, queue, "enrichment", enrichment.handle, task_body(knowledge, "sum", subtask=subtask))
    assert workflow.answers_to("sum")[0].output["skipped"] is True
    current = rows.get(knowledge.id)
    assert current is not None and current.description == ""


def test_an_unknown_subtask_kind_answers_a_failure_on_its_last_try(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    rows: MemoryKnowledgeRepo,
) -> None:
    knowledge = finalizing(deps, rows, kb)
    queue.send_raw("enrichment", task_body(knowledge, "x", subtask={"id": "odd", "kind": "odd"}))
    for _ in range(3):
        queue.deliver("enrichment", enrichment.handle, deps)
    assert workflow.answers_to("x") == []
    queue.deliver("enrichment", enrichment.handle, deps)
    assert workflow.answers_to("x") == [
        TaskAnswer("x", False, error="enrichment.failed", cause="UnknownSubtask")
    ]
    row = rows.get(knowledge.id)  # a failure answer leaves the slot to the machine's Catch
    assert row is not None and (row.parse_status, row.pending_subtasks_count) == (ParseStatus.FINALIZING, 1)


def test_each_subtask_releases_its_slot_once_before_it_answers_and_the_last_promotes(
    deps: Services,
    tenant: Tenant,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    rows: MemoryKnowledgeRepo,
) -> None:
    """The state machine's ReleaseSlot and Promote states are folded into the subtask worker: the count is
    down by the time the answer leaves, a redelivered subtask is counted once, and the answer of the last
    slot finds the row completed."""
    knowledge = indexed(deps, summarising_kb(deps, tenant))
    plan = {"planned": ["summary", "questions.0"], "not_planned": {}}
    assert rows.settle_plan(knowledge.id, 1, 2, plan) is not None
    seen: list[tuple[str, ParseStatus, int]] = []
    answer_task = workflow.task_success

    def observed(token: str, output: Any) -> bool:
        row = rows.get(knowledge.id)
        assert row is not None
        seen.append((token, row.parse_status, row.pending_subtasks_count))
        return answer_task(token, output)

    workflow.task_success = observed  # type: ignore[method-assign]
    summary = planned_subtask("summary")
    questions = planned_subtask("questions.0")
    for token, subtask in (("s", summary), ("s-redelivered", summary), ("q", questions)):
        run_task(deps, queue, "enrichment", enrichment.handle, task_body(knowledge, token, subtask=subtask))
    assert seen == [
        ("s", ParseStatus.FINALIZING, 1),
        ("s-redelivered", ParseStatus.FINALIZING, 1),
        ("q", ParseStatus.COMPLETED, 0),
    ]
    # a copy of the last subtask after the promotion: skipped, and nothing changes
    run_task(deps, queue, "enrichment", enrichment.handle, task_body(knowledge, "q2", subtask=questions))
    assert seen[-1] == ("q2", ParseStatus.COMPLETED, 0)
    assert workflow.answers_to("q2")[0].output["skipped"] is True


def test_a_subtask_outside_the_count_releases_nothing(
    deps: Services,
    tenant: Tenant,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    rows: MemoryKnowledgeRepo,
) -> None:
    knowledge = finalizing(deps, rows, summarising_kb(deps, tenant))
    refresh = {"id": "summary_refresh", "kind": "summary"}  # no token: a refresh owns no slot
    run_task(deps, queue, "enrichment", enrichment.handle, task_body(knowledge, "", subtask=refresh))
    row = rows.get(knowledge.id)
    assert row is not None and (row.parse_status, row.pending_subtasks_count) == (ParseStatus.FINALIZING, 1)


def test_a_late_copy_of_the_plan_keeps_the_graph_facts_its_attempt_already_wrote(
    deps: Services, tenant: Tenant, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    """At-least-once: a second copy of the plan message can run after the first settled the row and its
    graph subtasks began to write. Its clean-up drops only earlier attempts' facts."""
    from scripted_llm import CHAT, ScriptedLLM, use_models

    from chalicelib.domain.ids import chunk_id

    with ScriptedLLM() as llm:
        use_models(deps, llm)
        kb = create_kb(
            deps,
            tenant.id,
            CreateKnowledgeBase(
                name="graphs", summary_model_id=CHAT, indexing_strategy={"graph_enabled": True}
            ),
        )
        knowledge = indexed(deps, kb)
        earlier, own = chunk_id(knowledge.id, 0, 0), chunk_id(knowledge.id, knowledge.attempt, 0)
        deps.graph.add(kb.id, knowledge.id, [("Crane", [], earlier)], [])  # a stale attempt's fact
        deps.graph.add(kb.id, knowledge.id, [("Berth", [], own)], [])  # written by this attempt's subtask
        run_task(deps, queue, "postprocess", postprocess.handle, task_body(knowledge, "plan"))
    (answer,) = workflow.answers_to("plan")
    assert any(s["kind"] == "graph" for s in answer.output["subtasks"])
    berth = deps.graph.neighbourhood(kb.id, "Berth").entity
    assert berth is not None and berth.chunk_ids == [own]
    assert deps.graph.neighbourhood(kb.id, "Crane").entity is None


def test_graph_facts_a_superseded_attempt_writes_late_do_not_stay(
    deps: Services,
    tenant: Tenant,
    queue: MemoryTaskQueue,
    rows: MemoryKnowledgeRepo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reparse moved the row on while the old attempt's graph subtask waited on the model; the new
    attempt's plan had cleared older facts, so the old subtask's late write would stay for good."""
    from scripted_llm import CHAT, ScriptedLLM, use_models

    from chalicelib.enrich import graph as graph_module
    from chalicelib.enrich.graph import Entity, Extraction

    with ScriptedLLM() as llm:
        use_models(deps, llm)
        kb = create_kb(
            deps,
            tenant.id,
            CreateKnowledgeBase(
                name="graphs", summary_model_id=CHAT, indexing_strategy={"graph_enabled": True}
            ),
        )
        knowledge = finalizing(deps, rows, kb)

        def extract_while_a_reparse_lands(chat: Any, passages: Any, relation_types: Any) -> list[Extraction]:
            rows.write_fields(knowledge.id, attempt=knowledge.attempt + 1, parse_status=ParseStatus.PENDING)
            return [Extraction(entities=[Entity("Lighthouse")]) for _ in passages]

        monkeypatch.setattr(graph_module, "extract", extract_while_a_reparse_lands)
        subtask = {"id": "graph-0", "kind": "graph", "params": {"window": 0}, "id_set": ["graph-0"]}
        run_task(deps, queue, "enrichment", enrichment.handle, task_body(knowledge, "g", subtask=subtask))
    assert deps.graph.neighbourhood(kb.id, "Lighthouse").entity is None


def test_a_grown_window_reads_every_chunk_of_it_with_its_model_calls_in_parallel(
    deps: Services,
    tenant: Tenant,
    queue: MemoryTaskQueue,
    rows: MemoryKnowledgeRepo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A very large document's plan grows its windows (domain/plan.py): one subtask then asks about
    size / WINDOW times as many chunks in the same Lambda timeout, so its calls overlap (bounded)."""
    import threading
    import time

    from scripted_llm import CHAT, ScriptedLLM, use_models

    from chalicelib.enrich import questions as questions_module

    with ScriptedLLM() as llm:
        use_models(deps, llm)
        kb = create_kb(
            deps,
            tenant.id,
            CreateKnowledgeBase(
                name="questions",
                summary_model_id=CHAT,
                chunking_config={"chunk_size": 60, "chunk_overlap": 0},
                enrichment={"questions_enabled": True},
            ),
        )
        created = upload(
            deps, kb, data=b"# Ferry\n\n" + b"The North ferry leaves Harbourside at eight.\n\n" * 80
        )
        drain(deps)
        texts = [c for c in deps.chunks.list(created.id) if c.chunk_type == ChunkType.TEXT]
        assert len(texts) > 2 * WINDOW
        active, peak, lock = [0], [0], threading.Lock()

        def generate(chat: Any, *, passage: str, **_: Any) -> list[str]:
            with lock:
                active[0] += 1
                peak[0] = max(peak[0], active[0])
            time.sleep(0.01)
            with lock:
                active[0] -= 1
            return [f"What about {passage[:20]}?"]

        monkeypatch.setattr(questions_module, "generate", generate)
        size = len(texts)
        subtask = {"id": f"questions.0x{size}", "kind": "questions", "window": 0, "size": size}
        knowledge = rows.write_fields(
            created.id, parse_status=ParseStatus.FINALIZING, pending_subtasks_count=1
        )
        run_task(deps, queue, "enrichment", enrichment.handle, task_body(knowledge, "q", subtask=subtask))
    asked = [c for c in deps.chunks.list(created.id) if c.chunk_type == ChunkType.TEXT]
    assert len(asked) == size
    assert all(c.metadata["questions"][0].startswith("What about") for c in asked)
    assert 1 < peak[0] <= enrichment.MAX_PARALLEL_CALLS


def test_a_task_whose_model_asks_to_wait_comes_back_later_without_spending_a_try(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    """A throttled (or briefly unavailable) chat model had spent one of the task's four tries per throttle,
    and failed a summary or a caption under sustained throttling: the task is sent back with the delay the
    model asked for, as a stage's deferral is, up to `max_throttle_deferrals` times."""
    from chalicelib.ports import ModelThrottled
    from chalicelib.stages.messages import TaskMessageModel
    from chalicelib.stages.runner import run_task as answer_task

    seen: list[int] = []

    def work(_: Services, body: TaskMessageModel) -> dict[str, Any] | None:
        seen.append(body.deferrals)
        if len(seen) == 1:
            raise ModelThrottled("slow down", retry_after=7)
        return {"done": True}

    knowledge = upload(deps, kb)
    queue.send_raw("postprocess", task_body(knowledge, "token"))
    event = queue.receive("postprocess")
    event["Records"][0]["attributes"]["ApproximateReceiveCount"] = str(deps.settings.stage_max_receives)
    assert answer_task(deps, event, None, TaskMessageModel, work, "postprocess")["batchItemFailures"] == []
    queue.settle(event, {"batchItemFailures": []})
    [again] = queue.waiting("postprocess")
    assert again.delay_seconds == 7 and json.loads(again.body)["deferrals"] == 1
    assert workflow.answers_to("token") == []  # its last try was not spent: not failed
    event = queue.receive("postprocess")
    assert answer_task(deps, event, None, TaskMessageModel, work, "postprocess")["batchItemFailures"] == []
    [answer] = workflow.answers_to("token")
    assert answer.succeeded and answer.output == {"done": True} and seen == [0, 1]
