"""A failure the state machine decides (FailDocument, a raw DynamoDB write) reaches the services through its
announcement on the webhooks queue (stages/webhooks.py `announced`): the event says what the row says, and
the attempt's root and open spans end with the failure, as housekeeping's failures end them. The row write
and the announcement are built from the real definition (the plan's failure: PlanNotMade's values)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, ParseStatus, Stage
from chalicelib.stages import webhooks

from .conftest import drain, upload

ASL = Path(__file__).resolve().parents[2] / "infra" / "statemachine" / "knowledge.asl.json"


def _plan_failure() -> tuple[dict[str, str], dict[str, Any]]:
    """(what the row write after PlanPostProcess's Catch writes, what AnnounceFailed sends): literal values,
    or `$.failure` paths into what a Pass state on the way set."""
    states = json.loads(ASL.read_text(encoding="utf-8"))["States"]
    name = states["PlanPostProcess"]["Catch"][0]["Next"]
    failure: dict[str, Any] = {}
    while states[name]["Type"] == "Pass":
        failure = states[name]["Result"]
        name = states[name]["Next"]
    write = states[name]

    def value(given: Any) -> Any:
        return failure[given.removeprefix("$.failure.")]

    values = write["Parameters"]["ExpressionAttributeValues"]
    row = {
        name: values[f":{name}"]["S"] if "S" in values[f":{name}"] else value(values[f":{name}"]["S.$"])
        for name in ("code", "message")
    }
    body: dict[str, Any] = {}
    for key, given in states[write["Next"]]["Parameters"]["MessageBody"].items():
        if not key.endswith(".$"):
            body[key] = given
        elif given.startswith("$.failure."):
            body[key[:-2]] = value(given)
    return row, body


def _announce(deps: Services, queue: MemoryTaskQueue, body: dict[str, Any]) -> None:
    queue.send_raw("webhooks", body)
    assert queue.deliver("webhooks", webhooks.handle, deps)["batchItemFailures"] == []


def test_a_failure_the_machine_announces_matches_the_row_and_ends_the_attempts_spans(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, rows: MemoryKnowledgeRepo
) -> None:
    knowledge = upload(deps, kb)
    drain(deps)
    row = deps.knowledge.get(knowledge.id)
    assert row is not None
    deps.tracker.begin_stage(row, Stage.POSTPROCESS)  # the planning worker began, then died for good
    written, body = _plan_failure()
    rows.write_fields(
        knowledge.id,
        parse_status=ParseStatus.FAILED,
        error_code=written["code"],
        error_message=written["message"],
        pending_subtasks_count=0,
    )
    body.update(knowledge_id=knowledge.id, attempt=knowledge.attempt)
    _announce(deps, queue, body)

    failed = deps.knowledge.get(knowledge.id)
    assert failed is not None
    event = deps.events.published[-1]  # type: ignore[attr-defined]
    assert event.type.value == "Knowledge Failed"
    assert event.detail["error"] == {"code": failed.error_code, "message": failed.error_message}
    view = deps.tracker.view(failed)
    assert view["root"]["status"] == "failed" and view["root"]["error_code"] == failed.error_code
    stages = {s["span_id"]: s["status"] for s in view["trace"]}
    assert stages["postprocess"] == "cancelled" and "running" not in stages.values()
    assert view["current_stage"] == "postprocess"  # the stage that was stopped

    _announce(deps, queue, body)  # at least once: a second copy ends nothing differently
    again = deps.tracker.view(failed)
    assert {s["span_id"]: s["status"] for s in again["trace"]} == stages
    assert again["root"]["status"] == "failed"


def test_an_announcement_for_a_row_that_moved_on_ends_no_span(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """A copy of the announcement that arrives after a reparse began a new attempt (or for a row the write
    did not fail) leaves the running attempt's spans alone."""
    knowledge = upload(deps, kb)
    drain(deps)
    _, body = _plan_failure()
    body.update(knowledge_id=knowledge.id, attempt=knowledge.attempt)
    _announce(deps, queue, body)
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.parse_status == ParseStatus.PROCESSING
    assert deps.tracker.view(row)["root"]["status"] == "running"
