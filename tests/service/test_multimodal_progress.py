"""The multimodal stage's progress through GET /knowledge/{id}/spans: the hand-over that fans a document's
images out writes images_total, and each image task that finishes (read, or given up) counts once in
images_done, however often its message is delivered. The state machine is not run: each test sends the
image tasks its Map would send, from the execution's input."""

from __future__ import annotations

import base64
import io
from datetime import UTC, datetime
from typing import Any
from unittest.mock import patch

import pytest
from chalice.test import Client
from PIL import Image

from chalicelib.adapters.memory import MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, EnrichmentBody
from chalicelib.domain.errors import PermanentStageError
from chalicelib.domain.ids import execution_name
from chalicelib.domain.types import SpanStatus, Stage
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.services import stage_spans
from chalicelib.services.storage import image_manifest
from chalicelib.stages import embedding, multimodal, postprocess

from .conftest import MAIN_STAGES, deliver, drain, failed_ids, task_body, upload

V1 = "/api/v1"
IMAGES = 3


class FailingOnOneImage:
    """An OCR engine that reads every image but the one of a given colour (that one never fails its document)."""

    name = "fake-ocr"

    def __init__(self, unreadable: bytes) -> None:
        self.unreadable = unreadable

    def available(self) -> bool:
        return True

    def recognize(self, image: bytes) -> str:
        if image == self.unreadable:
            raise PermanentStageError("not an image")
        return "Berth numbers and crane limits"


def _png(colour: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (64, 48), colour).save(out, format="PNG")
    return out.getvalue()


COLOURS = [(200, 80, 20), (20, 80, 200), (20, 200, 80)]


def _document() -> bytes:
    parts = ["# Harbour\n\nThe Northgate harbour has three berths and two cranes."]
    parts += [
        f"![figure {n}](data:image/png;base64,{base64.b64encode(_png(colour)).decode()})"
        for n, colour in enumerate(COLOURS)
    ]
    return "\n\n".join(parts).encode()


def _multimodal(client: Client, key: str, knowledge_id: str) -> dict[str, Any]:
    response = client.http.get(f"{V1}/knowledge/{knowledge_id}/spans", headers={"X-API-Key": key})
    assert response.status_code == 200, response.body
    trace = response.json_body["data"]["trace"]
    return dict(next(s for s in trace if s["span_id"] == "multimodal"))


def _run(deps: Services, queue: MemoryTaskQueue, name: str, handler: Any, body: dict[str, Any]) -> None:
    queue.send_raw(name, body)
    assert queue.deliver(name, handler, deps)["batchItemFailures"] == []


def test_images_total_is_planned_and_each_image_counts_once_in_images_done(
    deps: Services, client: Client, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    tenant, key = create_tenant_with_key(deps, "harbour")
    deps.replace_ocr_asr(FailingOnOneImage(_png(COLOURS[1])), None)
    kb = create_kb(
        deps, tenant.id, CreateKnowledgeBase(name="docs", enrichment=EnrichmentBody(enable_multimodel=True))
    )
    knowledge = upload(deps, kb, "harbour.md", _document())
    drain(deps)
    images = workflow.executions[execution_name(knowledge.id, knowledge.attempt)].payload["images"]
    assert len(images) == IMAGES

    planned = _multimodal(client, key, knowledge.id)
    assert planned["outputs"]["images_total"] == IMAGES
    assert planned["progress"] is not None
    assert (planned["progress"]["done"], planned["progress"]["total"]) == (0, IMAGES)
    assert planned["progress"]["unit"] == "images"

    bodies = [task_body(knowledge, f"token-{i}", image=image) for i, image in enumerate(images)]
    # the first copy of image 0 dies after its work, before it answers: its token stays open
    with patch.object(workflow, "task_success", side_effect=ConnectionError("lost")):
        queue.send_raw("multimodal", bodies[0])
        assert failed_ids(queue.deliver("multimodal", multimodal.handle, deps))
    assert _multimodal(client, key, knowledge.id)["progress"]["done"] == 1
    _run(deps, queue, "multimodal", multimodal.handle, bodies[0])  # redelivered: runs again, counted once
    assert len(workflow.answers_to("token-0")) == 1
    assert _multimodal(client, key, knowledge.id)["progress"]["done"] == 1

    _run(deps, queue, "multimodal", multimodal.handle, bodies[1])  # unreadable: given up, still done
    _run(deps, queue, "multimodal", multimodal.handle, bodies[2])
    running = _multimodal(client, key, knowledge.id)
    assert running["status"] == "running"
    assert (running["progress"]["done"], running["progress"]["total"]) == (IMAGES, IMAGES)
    assert running["progress"]["percent"] == 100.0
    assert sorted(c["status"] for c in running["children"]) == ["done", "done", "failed"]

    for body in bodies:  # every image delivered once more: images_done never passes the total
        _run(deps, queue, "multimodal", multimodal.handle, body)
    assert _multimodal(client, key, knowledge.id)["progress"]["done"] == IMAGES

    # the Map is over: the plan closes the stage, its progress stays whole
    _run(deps, queue, "postprocess", postprocess.handle, task_body(knowledge, "plan"))
    closed = _multimodal(client, key, knowledge.id)
    assert closed["status"] == "done"
    assert (closed["progress"]["done"], closed["progress"]["total"]) == (IMAGES, IMAGES)


def test_a_document_without_images_reports_no_image_progress(
    deps: Services, client: Client, workflow: MemoryWorkflow
) -> None:
    tenant, key = create_tenant_with_key(deps, "harbour")
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="docs"))
    knowledge = upload(deps, kb, "plain.md", b"# Plain\n\nNo figures in this one.\n")
    drain(deps)
    stage = _multimodal(client, key, knowledge.id)
    assert stage["status"] == "skipped" and stage["progress"] is None


def test_a_hand_over_that_died_after_marking_the_row_indexed_still_plans_images_total(
    deps: Services, client: Client, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    tenant, key = create_tenant_with_key(deps, "harbour")
    deps.replace_ocr_asr(FailingOnOneImage(b""), None)
    kb = create_kb(
        deps, tenant.id, CreateKnowledgeBase(name="docs", enrichment=EnrichmentBody(enable_multimodel=True))
    )
    knowledge = upload(deps, kb, "harbour.md", _document())
    # the first hand-over dies right after the row is marked indexed, before anything after it
    with patch("chalicelib.stages.embedding.leave_pipeline", side_effect=[ConnectionError("lost")]):
        deliver_until_embedding_fails(deps, queue)
    drain(deps)  # the embedding message again: the row is indexed, the hand-over's rest is done
    assert workflow.executions[execution_name(knowledge.id, knowledge.attempt)].payload["images"]
    planned = _multimodal(client, key, knowledge.id)
    assert planned["outputs"]["images_total"] == IMAGES
    assert (planned["progress"]["done"], planned["progress"]["total"]) == (0, IMAGES)

    # a delivery after the stage closed writes the same total without reopening it
    _run(deps, queue, "postprocess", postprocess.handle, task_body(knowledge, "plan"))
    assert _multimodal(client, key, knowledge.id)["status"] == "done"
    indexed = deps.knowledge.get(knowledge.id)
    assert indexed is not None and indexed.processed_at is not None
    embedding.after_indexed(deps, indexed, kb, image_manifest(deps, indexed), None)
    again = _multimodal(client, key, knowledge.id)
    assert again["status"] == "done" and again["outputs"]["images_total"] == IMAGES


def deliver_until_embedding_fails(deps: Services, queue: MemoryTaskQueue) -> None:
    for _ in range(20):
        busy = [name for name in MAIN_STAGES if queue.waiting(name)]
        assert busy, "the embedding message never failed"
        response = deliver(deps, busy[0])
        if busy[0] == "embedding" and failed_ids(response):
            return
    raise AssertionError("the embedding message never failed")


def test_totals_planned_again_on_a_closed_stage_keep_when_it_ended(
    deps: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    tenant, _ = create_tenant_with_key(deps, "harbour")
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="docs"))
    knowledge = upload(deps, kb, "plain.md", b"# Plain\n\nSome text.\n")
    closed_at = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    monkeypatch.setattr(stage_spans, "_now", lambda: closed_at)
    deps.tracker.begin_stage(knowledge, Stage.MULTIMODAL)
    deps.tracker.end_stage(knowledge, Stage.MULTIMODAL)
    monkeypatch.setattr(stage_spans, "_now", lambda: datetime(2026, 1, 1, 13, 0, tzinfo=UTC))
    deps.tracker.planned(knowledge, Stage.MULTIMODAL, {"images_total": 3})  # a late redelivery
    span = deps.spans.get(knowledge.id, knowledge.attempt, Stage.MULTIMODAL.value)
    assert span is not None and span.status == SpanStatus.DONE
    assert span.ended_at == closed_at
