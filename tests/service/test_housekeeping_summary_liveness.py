"""Housekeeping's summary sweep on the fakes: a summary whose model throttles is deferred again and again,
and each deferred copy's delivery claims it again (the row is written), so the sweep leaves it be; a summary
nothing works on any more is failed with the summary stage's fallback description (spec §1.13)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.types import ChunkType, Knowledge, SummaryStatus, Tenant
from chalicelib.stages import enrichment
from chalicelib.stages.housekeeping import sweep

from .conftest import task_body
from .test_enrichment_replies import ReplyingLLM, finalizing, llm_kb
from .test_enrichment_replies import llm as llm

THROTTLED = (429, {"error": {"message": "rate limited", "code": "rate_limit_exceeded"}})


def _throttled_summary(deps: Services, tenant: Tenant, llm: ReplyingLLM) -> Knowledge:
    """A finalizing document whose summary subtask was taken (`processing`) and deferred by a throttle."""
    knowledge = finalizing(deps, llm_kb(deps, tenant))
    llm.responses["summary"] = THROTTLED
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.send_raw("enrichment", task_body(knowledge, "s", subtask=planned_subtask("summary")))
    queue.deliver("enrichment", enrichment.handle, deps)
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.PROCESSING
    assert len(queue.waiting("enrichment")) == 1  # the deferred copy
    return row


def _age(deps: Services, knowledge: Knowledge, by: timedelta) -> None:
    """Everything written about the document so far happened `by` ago (the row and its spans)."""
    rows = deps.knowledge
    assert isinstance(rows, MemoryKnowledgeRepo)
    row = rows.get(knowledge.id)
    assert row is not None
    rows.write_fields(knowledge.id, updated_at=row.updated_at - by)
    for span in deps.spans.list(knowledge.id, knowledge.attempt):
        deps.spans.put(replace(span, updated_at=span.updated_at - by))


def _first_text(deps: Services, knowledge: Knowledge) -> str:
    texts = sorted(
        (
            c
            for c in deps.chunks.list(knowledge.id)
            if c.chunk_type == ChunkType.TEXT and c.metadata.get("attempt") == knowledge.attempt
        ),
        key=lambda c: (c.start_at, c.seq),
    )
    return texts[0].content[:500]


def test_a_summary_deferred_by_a_throttled_model_is_not_failed_by_the_sweep(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    """70 minutes of deferrals (each at most 900 s): past the summary's hour since it was first claimed."""
    knowledge = _throttled_summary(deps, tenant, llm)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    for _ in range(5):
        _age(deps, knowledge, timedelta(minutes=14))  # the deferred copy's delay
        queue.deliver("enrichment", enrichment.handle, deps)  # still throttled: deferred once more
    assert sweep(deps).summaries_failed == []
    del llm.responses["summary"]  # the provider answers again
    while queue.waiting("enrichment"):
        queue.deliver("enrichment", enrichment.handle, deps)
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.COMPLETED
    assert row.description and row.description != _first_text(deps, knowledge)


def test_a_summary_stuck_without_activity_is_failed_with_its_fallback_description(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    knowledge = _throttled_summary(deps, tenant, llm)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.purge("enrichment")  # its message is lost: nothing moves the summary any more
    report = sweep(deps, datetime.now(UTC) + timedelta(hours=2))
    assert report.summaries_failed == [knowledge.id]
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.FAILED
    assert row.description == _first_text(deps, knowledge) != ""


def test_a_stuck_summary_failed_by_the_sweep_keeps_a_description_a_person_wrote(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    knowledge = _throttled_summary(deps, tenant, llm)
    queue = deps.queue
    rows = deps.knowledge
    assert isinstance(queue, MemoryTaskQueue) and isinstance(rows, MemoryKnowledgeRepo)
    queue.purge("enrichment")
    rows.write_fields(knowledge.id, description="Written by hand.", description_by_user=True)
    assert sweep(deps, datetime.now(UTC) + timedelta(hours=2)).summaries_failed == [knowledge.id]
    row = rows.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.FAILED
    assert row.description == "Written by hand."


def test_a_summary_claimed_again_after_the_sweep_read_it_is_not_failed(
    deps: Services, tenant: Tenant, llm: ReplyingLLM
) -> None:
    """The sweep fails a summary on the row as it read it: the deferred copy delivered between that read and
    the sweep's write claims the summary again (processing from processing, the row written), and wins."""
    knowledge = _throttled_summary(deps, tenant, llm)
    queue, rows = deps.queue, deps.knowledge
    assert isinstance(queue, MemoryTaskQueue) and isinstance(rows, MemoryKnowledgeRepo)
    real = rows.summaries_unsettled_older_than

    def read_then_claimed_again(cutoff: str) -> Iterator[Knowledge]:
        for found in real(cutoff):
            time.sleep(0.002)  # the claim lands in a later millisecond than the row as read
            queue.deliver("enrichment", enrichment.handle, deps)  # still throttled: claimed, deferred again
            yield found

    rows.summaries_unsettled_older_than = read_then_claimed_again  # type: ignore[method-assign]
    assert sweep(deps, datetime.now(UTC) + timedelta(hours=2)).summaries_failed == []
    row = rows.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.PROCESSING
    assert len(queue.waiting("enrichment")) == 1  # the summary task goes on
