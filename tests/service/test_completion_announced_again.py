"""A document's completion is announced even when the worker that completed it died before it announced:
a redelivered copy (the last subtask's, or the plan's when nothing was planned) finds the attempt completed
and announces it under the same event id, which consumers drop when it was a repeat."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryEventPublisher, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.events import Event
from chalicelib.domain.types import KnowledgeBase, ParseStatus
from chalicelib.stages import enrichment, postprocess

from .conftest import drain, task_body, upload

COMPLETED = "Knowledge Completed"


class DiesAtTheFirstCompletion(MemoryEventPublisher):
    """The function times out right after the write that completed the row, before its announcement."""

    def __init__(self) -> None:
        super().__init__()
        self.died = False

    def publish(self, events: Any) -> None:
        if not self.died and any(e.type.value == COMPLETED for e in events):
            self.died = True
            raise TimeoutError("the function timed out right after the promotion")
        super().publish(events)


def _run(deps: Services, name: str, handler: Any, body: dict[str, Any]) -> dict[str, Any]:
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw(name, body)
    return queue.deliver(name, handler, deps)


def _completions(bus: MemoryEventPublisher, knowledge_id: str) -> list[Event]:
    return [
        e for e in bus.published if e.type.value == COMPLETED and e.detail["knowledge_id"] == knowledge_id
    ]


def test_the_last_subtasks_redelivery_announces_a_completion_its_first_run_did_not(
    deps: Services, kb: KnowledgeBase
) -> None:
    bus = DiesAtTheFirstCompletion()
    deps.events = bus
    knowledge = upload(deps, kb)
    drain(deps)
    _run(deps, "postprocess", postprocess.handle, task_body(knowledge, "plan"))
    summary = {"id": "summary", "kind": "summary", "id_set": ["summary"]}
    _run(deps, "enrichment", enrichment.handle, task_body(knowledge, "sum", subtask=summary))
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.parse_status == ParseStatus.COMPLETED and bus.died
    assert _completions(bus, knowledge.id) == []

    _run(deps, "enrichment", enrichment.handle, task_body(knowledge, "sum", subtask=summary))
    [told] = _completions(bus, knowledge.id)
    assert told.detail["attempt"] == knowledge.attempt
    # told again by another copy: the same event, which a consumer drops by its id
    _run(deps, "enrichment", enrichment.handle, task_body(knowledge, "sum", subtask=summary))
    assert len({e.event_id for e in _completions(bus, knowledge.id)}) == 1


def test_a_plan_that_completed_the_row_is_announced_by_its_redelivery(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    bus = DiesAtTheFirstCompletion()
    deps.events = bus
    knowledge = upload(deps, kb, "plain.md", b"# Plain\n\nNothing to plan for.\n")
    drain(deps)
    original = postprocess.plan
    monkeypatch.setattr(postprocess, "plan", lambda *args: ([], original(*args)[1]))  # nothing planned
    _run(deps, "postprocess", postprocess.handle, task_body(knowledge, "plan"))
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.parse_status == ParseStatus.COMPLETED and bus.died
    assert _completions(bus, knowledge.id) == []
    _run(deps, "postprocess", postprocess.handle, task_body(knowledge, "plan"))
    assert len(_completions(bus, knowledge.id)) == 1
