"""A summary's completion or failure is announced at least once, under one id per summary run (helper alo3,
item 1 of the at-least-once holes). It used to be announced under a nonce of its own that nothing kept: a
worker that died between the write that decided the summary and its announcement lost the event for good (the
redelivered subtask found the summary decided and announced nothing), and a duplicate delivery after the
announcement could not repeat it under the same id. The deciding write now keeps its nonce on the row; a
redelivery announces again from the row under the same id, and a refresh is a new run with a new id."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

import chalicelib.enrich.summary as summary_module
from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.events import Event
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import Knowledge, KnowledgeBase, SummaryStatus
from chalicelib.services.dispatch import request_summary_refresh
from chalicelib.stages import enrichment, postprocess

from .conftest import drain, task_body, upload
from .test_event_redelivery import WorkerDied, published
from .test_webhooks import Receiver, drain_webhooks, hook_on


def _planned(deps: Services, kb: KnowledgeBase) -> Knowledge:
    """A document through its pipeline and its plan: finalizing, its summary pending."""
    created = upload(deps, kb)
    drain(deps)
    row = deps.knowledge.get(created.id)
    assert row is not None
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw("postprocess", task_body(row, "plan"))
    while queue.waiting("postprocess"):
        queue.deliver("postprocess", postprocess.handle, deps)
    planned = deps.knowledge.get(created.id)
    assert planned is not None and planned.summary_status == SummaryStatus.PENDING
    return planned


def _deliver_summary(deps: Services, knowledge: Knowledge, copies: int = 1) -> None:
    """The summary subtask's message, `copies` times (SQS may hand it over twice), delivered until none
    is left (a delivery that dies is delivered again)."""
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    for _ in range(copies):
        queue.send_raw("enrichment", task_body(knowledge, "s", subtask=planned_subtask("summary")))
    while queue.waiting("enrichment"):
        queue.deliver("enrichment", enrichment.handle, deps)


def dies_announcing(deps: Services, monkeypatch: pytest.MonkeyPatch, event_type: str) -> None:
    """The first announcement of `event_type` dies before anything is published or sent (the function
    stopped between its write and its announcement)."""
    real, died = deps.events.publish, []

    def publish(events: Sequence[Event]) -> None:
        if not died and any(e.type.value == event_type for e in events):
            died.append(event_type)
            raise WorkerDied(event_type)
        real(events)

    monkeypatch.setattr(deps.events, "publish", publish)


def _ids(events: list[Event]) -> list[str]:
    return [e.event_id for e in events]


def test_a_summary_whose_worker_died_before_announcing_it_is_announced_by_the_redelivery(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The completion is written, the worker dies before it announces: the redelivered subtask finds the
    summary completed. It announced nothing (the event was lost); it announces it, once."""
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    hook_on(deps, kb, "Summary Completed")
    knowledge = _planned(deps, kb)
    dies_announcing(deps, monkeypatch, "Summary Completed")
    _deliver_summary(deps, knowledge)
    drain_webhooks(deps)

    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.COMPLETED
    completed = published(deps, "Summary Completed")
    assert len(completed) == 1 and completed[0].detail["attempt"] == knowledge.attempt
    assert len(receiver.posts) == 1


def test_a_refresh_is_a_new_event_and_a_copy_of_it_delivered_again_announces_the_same_id(
    deps: Services, kb: KnowledgeBase
) -> None:
    """A refresh (outside the count: no token to answer) is a new run of the summary, under a new id. Its
    message handed over twice (the first worker announced, then died before the message was deleted): the
    second copy announces the same event again, which the consumer drops by its id, and the webhook gets it
    once (its delivery id follows from the event id)."""
    receiver = Receiver(204)
    deps.webhook_sender = receiver
    hook_on(deps, kb, "Summary Completed")
    knowledge = _planned(deps, kb)
    _deliver_summary(deps, knowledge)
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.COMPLETED
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    assert request_summary_refresh(deps, row)
    refresh = queue.bodies("enrichment")
    assert len(refresh) == 1
    queue.send_raw("enrichment", refresh[0])  # SQS hands the same message over twice
    while queue.waiting("enrichment"):
        queue.deliver("enrichment", enrichment.handle, deps)
    drain_webhooks(deps)

    first, refreshed, again = _ids(published(deps, "Summary Completed"))
    assert first != refreshed == again
    assert [json.loads(body)["event_id"] for _, body, _ in receiver.posts] == [first, refreshed]


def test_a_failed_summary_whose_worker_died_before_announcing_it_is_announced_by_the_redelivery(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    def too_little(*args: Any, **kwargs: Any) -> str:
        raise summary_module.SummaryNotMade("too little text", "summary_input_too_short")

    monkeypatch.setattr(summary_module, "summarize", too_little)
    knowledge = _planned(deps, kb)
    dies_announcing(deps, monkeypatch, "Summary Failed")
    _deliver_summary(deps, knowledge)

    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.FAILED
    failed = published(deps, "Summary Failed")
    assert len(failed) == 1 and failed[0].detail["error"]["code"] == "summary_failed"
