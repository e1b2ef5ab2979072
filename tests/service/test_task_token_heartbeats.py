"""State machine tasks and their tokens' clocks (runner.run_task): a worker sends SendTaskHeartbeat when it
takes a task message and before it defers one; a heartbeat answered "closed" (the state machine stopped
waiting: HeartbeatSeconds or TimeoutSeconds ran out, or the execution ended) drops the message without
doing the work, and a planned subtask or image that never ran says so on its span (`task_timeout`).

The memory workflow stands in for Step Functions: `close_task` is the machine's timeout."""

from __future__ import annotations

import io
import random
from typing import Any

from PIL import Image

from chalicelib.adapters.memory import MemoryFileStore, MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.types import ChunkType, KnowledgeBase, ParseStatus, Tenant
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.ports import ModelThrottled
from chalicelib.stages import enrichment, multimodal, postprocess
from chalicelib.stages.messages import TaskMessageModel
from chalicelib.stages.runner import run_task

from .conftest import drain, task_body, upload


def _children(deps: Services, knowledge_id: str, stage: str) -> dict[str, dict[str, Any]]:
    row = deps.knowledge.get(knowledge_id)
    assert row is not None
    trace = deps.tracker.view(row)["trace"]
    return {c["span_id"]: c for c in next(s for s in trace if s["span_id"] == stage)["children"]}


def test_a_worker_heartbeats_its_token_before_the_work(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    seen: list[list[str]] = []

    def work(_: Any, body: TaskMessageModel) -> dict[str, Any]:
        seen.append(list(workflow.heartbeats))
        return {"ok": True}

    knowledge = upload(deps, kb)
    queue.send_raw("enrichment", task_body(knowledge, "tok"))
    queue.deliver("enrichment", lambda d, e, c: run_task(d, e, c, TaskMessageModel, work, "enrichment"), deps)
    assert seen == [["tok"]]
    assert [a.succeeded for a in workflow.answers_to("tok")] == [True]


def test_a_subtask_whose_token_closed_in_the_queue_is_not_run_and_its_span_says_so(
    deps: Services, tenant: Tenant, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    """The machine stopped waiting for questions.0 (it sat in the queue past HeartbeatSeconds), released its
    slot and promoted the row; the late worker drops the message and the trace names the subtask."""
    from scripted_llm import CHAT, ScriptedLLM, use_models

    with ScriptedLLM() as llm:
        use_models(deps, llm)
        kb = create_kb(
            deps,
            tenant.id,
            CreateKnowledgeBase(
                name="q",
                summary_model_id=CHAT,
                chunking_config={"chunk_size": 60, "chunk_overlap": 0},
                enrichment={"questions_enabled": True},
            ),
        )
        knowledge = upload(
            deps, kb, data=b"# Ferry\n\n" + b"The North ferry leaves Harbourside at eight.\n\n" * 30
        )
        drain(deps)
        queue.send_raw("postprocess", task_body(knowledge, "plan"))
        queue.deliver("postprocess", postprocess.handle, deps)
        [plan] = workflow.answers_to("plan")
        subtasks = plan.output["subtasks"]
        late = next(s for s in subtasks if s["id"] == "questions.0")
        for subtask in subtasks:
            if subtask is not late:
                queue.send_raw("enrichment", task_body(knowledge, f"tok-{subtask['id']}", subtask=subtask))
                queue.deliver("enrichment", enrichment.handle, deps)
        # RunSubtask's States.HeartbeatTimeout -> ReleaseSlot -> PromoteIfLast
        workflow.close_task("tok-questions.0")
        assert deps.knowledge.release_slot(knowledge.id, knowledge.attempt, "questions.0") == 0
        assert deps.knowledge.promote(knowledge.id, knowledge.attempt)
        asked_before = len(llm.requests)
        queue.send_raw("enrichment", task_body(knowledge, "tok-questions.0", subtask=late))
        response = queue.deliver("enrichment", enrichment.handle, deps)
        assert len(llm.requests) == asked_before  # the model is not asked for a closed token
    assert response["batchItemFailures"] == [] and queue.waiting("enrichment") == []
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.parse_status == ParseStatus.COMPLETED
    children = _children(deps, knowledge.id, "postprocess")
    lost = children["postprocess.questions.0"]
    assert lost["status"] == "failed" and lost["error_code"] == SpanErrorCode.TASK_TIMEOUT
    assert "stopped waiting" in lost["error_message"]
    # the subtasks that ran keep their own outcome
    assert all(
        c["status"] == "done" for span_id, c in children.items() if span_id != "postprocess.questions.0"
    )


def test_a_redelivered_answered_subtask_keeps_its_span(
    deps: Services, tenant: Tenant, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    """SQS delivers at least once: a copy of a task whose token its first delivery answered finds the token
    closed too, and must not relabel the finished span."""
    from scripted_llm import CHAT, ScriptedLLM, use_models

    with ScriptedLLM() as llm:
        use_models(deps, llm)
        kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="s", summary_model_id=CHAT))
        knowledge = upload(deps, kb)
        drain(deps)
        queue.send_raw("postprocess", task_body(knowledge, "plan"))
        queue.deliver("postprocess", postprocess.handle, deps)
        [summary] = [s for s in workflow.answers_to("plan")[0].output["subtasks"] if s["id"] == "summary"]
        for _ in range(2):
            queue.send_raw("enrichment", task_body(knowledge, "tok-summary", subtask=summary))
            queue.deliver("enrichment", enrichment.handle, deps)
    assert _children(deps, knowledge.id, "postprocess")["postprocess.summary"]["status"] == "done"
    assert len(workflow.answers_to("tok-summary")) == 1


def test_an_image_task_whose_token_closed_is_not_read_and_its_span_says_so(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
) -> None:
    class CountingOcr:
        name = "counting-ocr"
        calls = 0

        def available(self) -> bool:
            return True

        def recognize(self, image: bytes) -> str:
            CountingOcr.calls += 1
            return "Tide table"

    deps.replace_ocr_asr(CountingOcr(), None)
    knowledge = upload(deps, kb)
    drain(deps)
    out = io.BytesIO()
    Image.new("RGB", (60, 60), (0, 90, 160)).save(out, format="PNG")
    url = files.save("t/exports/late.png", out.getvalue(), "image/png")
    workflow.close_task("img")  # DescribeImage timed out -> ImageFailed; the machine went on
    queue.send_raw(
        "multimodal", task_body(knowledge, "img", image={"index": 0, "url": url, "original": True})
    )
    assert queue.deliver("multimodal", multimodal.handle, deps)["batchItemFailures"] == []
    assert CountingOcr.calls == 0
    assert not [c for c in deps.chunks.list(knowledge.id) if c.chunk_type == ChunkType.IMAGE_OCR]
    span = _children(deps, knowledge.id, "multimodal")["multimodal.image[0]"]
    assert span["status"] == "failed" and span["error_code"] == SpanErrorCode.TASK_TIMEOUT


def test_a_throttled_task_stops_once_its_token_is_closed(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    """The model keeps throttling: each deferral heartbeats first, so once the machine stops waiting the
    worker neither calls the model again nor sends the task back to the queue."""
    random.seed(1)
    calls_after_close = 0
    closed = False

    def work(_: Any, body: TaskMessageModel) -> dict[str, Any]:
        nonlocal calls_after_close
        calls_after_close += closed
        raise ModelThrottled("429")

    def handle(d: Any, e: dict[str, Any], c: Any) -> dict[str, Any]:
        return run_task(d, e, c, TaskMessageModel, work, "enrichment")

    knowledge = upload(deps, kb)
    queue.send_raw("enrichment", task_body(knowledge, "tok"))
    for delivery in range(20):
        if not queue.waiting("enrichment"):
            break
        if delivery == 3:
            workflow.close_task("tok")  # States.Timeout while the task waited out a deferral
            closed = True
        queue.deliver("enrichment", handle, deps)
    assert closed and calls_after_close == 0
    assert queue.waiting("enrichment") == []
    assert workflow.answers_to("tok") == []


def test_a_throttled_task_is_dropped_when_its_token_closes_during_the_work(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    """The heartbeat before a deferral: the token closed while the model was being asked (TimeoutSeconds
    ran out), so the task is not sent back for a later try nobody waits for."""

    def work(_: Any, body: TaskMessageModel) -> dict[str, Any]:
        workflow.close_task("tok")
        raise ModelThrottled("429")

    knowledge = upload(deps, kb)
    queue.send_raw("enrichment", task_body(knowledge, "tok"))
    response = queue.deliver(
        "enrichment", lambda d, e, c: run_task(d, e, c, TaskMessageModel, work, "enrichment"), deps
    )
    assert response["batchItemFailures"] == []
    assert queue.waiting("enrichment") == []
    assert workflow.heartbeats == ["tok"]  # the pickup's; the second one was refused
