"""Housekeeping on the fakes: a stuck row is recovered; one with a recent heartbeat, a running execution or
a message still queued is spared. Rows are aged by sweeping at a later `now`, not by rewriting them."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.ids import execution_name
from chalicelib.domain.types import KnowledgeBase, ParseStatus, Span, SpanKind, SpanStatus, SummaryStatus
from chalicelib.stages import housekeeping

from .conftest import deliver, drain, upload

LATER = timedelta(hours=3)  # past the 2h10m threshold


def sweep_later(deps: Services) -> housekeeping.SweepReport:
    return housekeeping.sweep(deps, datetime.now(UTC) + LATER)


def test_a_row_whose_message_was_lost_is_recovered_with_the_reason(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, rows: MemoryKnowledgeRepo
) -> None:
    stuck = upload(deps, kb)
    queue.purge("docreader")  # the message is lost
    report = sweep_later(deps)
    assert report.recovered == [stuck.id]
    failed = rows.get(stuck.id)
    assert failed is not None and failed.parse_status == ParseStatus.FAILED
    assert failed.error_code == SpanErrorCode.TASK_TIMEOUT and failed.pending_subtasks_count == 0
    assert failed.error_message == "task stuck in pending > 2h10m0s, recovered by housekeeping"
    root = deps.spans.get(stuck.id, 1, "root")
    assert root is not None and root.status == SpanStatus.FAILED
    assert sweep_later(deps).recovered == []  # failed rows are no longer in flight


def test_fresh_rows_are_left_alone(deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo) -> None:
    created = upload(deps, kb)
    report = housekeeping.sweep(deps)
    assert report.recovered == [] and report.spared == {}
    current = rows.get(created.id)
    assert current is not None and current.parse_status == ParseStatus.PENDING


def test_a_row_with_a_recent_span_heartbeat_is_spared(
    deps: Services, kb: KnowledgeBase, workflow: MemoryWorkflow, rows: MemoryKnowledgeRepo
) -> None:
    created = upload(deps, kb)
    drain(deps)
    workflow.finish(execution_name(created.id, 1), "FAILED")  # nothing else keeps it alive
    now = datetime.now(UTC) + LATER
    # a long stage reporting progress at the sweep's `now`
    deps.spans.put(
        Span(created.id, 1, "embedding", "embedding", SpanKind.STAGE, SpanStatus.RUNNING, updated_at=now)
    )
    report = housekeeping.sweep(deps, now)
    assert report.spared == {created.id: "span heartbeat is recent"}
    current = rows.get(created.id)
    assert current is not None and current.parse_status == ParseStatus.PROCESSING


def test_a_row_whose_execution_is_running_is_spared_until_it_ends(
    deps: Services, kb: KnowledgeBase, workflow: MemoryWorkflow, rows: MemoryKnowledgeRepo
) -> None:
    created = upload(deps, kb)
    drain(deps)  # processing, enabled, its execution started
    assert sweep_later(deps).spared == {created.id: "state machine execution is running"}
    workflow.finish(execution_name(created.id, 1), "FAILED")
    assert sweep_later(deps).recovered == [created.id]
    failed = rows.get(created.id)
    assert failed is not None and "task stuck in processing" in failed.error_message


def test_a_row_whose_message_may_still_be_queued_is_spared(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    created = upload(deps, kb)
    report = sweep_later(deps)
    assert report.spared == {created.id: "its docreader message is waiting in a busy queue"}
    deliver(deps, "docreader")
    deliver(deps, "chunking")
    queue.purge("embedding")  # lost between stages
    assert sweep_later(deps).recovered == [created.id]


def test_rows_waiting_in_one_queue_read_its_backlog_once(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    created = [upload(deps, kb, f"n{n}.md", f"# N{n}\n\nEntry {n}.\n".encode()) for n in range(5)]
    reads: list[str] = []
    real_backlog = queue.backlog

    def counted(name: str) -> int:
        reads.append(name)
        return real_backlog(name)

    queue.backlog = counted  # type: ignore[method-assign]
    report = sweep_later(deps)
    assert sorted(report.spared) == sorted(k.id for k in created)
    assert reads == ["docreader"]


def test_a_sweep_out_of_time_leaves_the_summaries_and_stuck_rows_to_the_next_one(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, rows: MemoryKnowledgeRepo
) -> None:
    """Every part of the sweep goes on only while there is time: the handler's Lambda context bounds the
    sweep and the next one goes on."""
    from chalicelib.local.pollers import make_context

    stuck = upload(deps, kb)
    queue.purge("docreader")
    summary = upload(deps, kb, "s.md", b"# S\n\nSummarised.\n")
    queue.purge("docreader")
    rows.write_fields(summary.id, parse_status=ParseStatus.COMPLETED)
    rows.set_summary_status(summary.id, SummaryStatus.PROCESSING.value)
    almost_over = make_context("housekeeping", region="us-east-1", timeout_seconds=20)  # < the margin
    deps.settings = replace(deps.settings, stale_after_seconds=-60, summary_stale_after_seconds=-60)
    result = housekeeping.handle(deps, {}, almost_over)
    assert result["cut_short"] and result["recovered"] == [] and result["summaries_failed"] == []
    result = housekeeping.handle(
        deps, {}, make_context("housekeeping", region="us-east-1", timeout_seconds=300)
    )
    assert not result["cut_short"] and result["recovered"] == [stuck.id]
    assert result["summaries_failed"] == [summary.id]


def test_a_backlog_of_unsettled_summaries_stops_when_the_time_is_up(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The summaries are failed oldest first while there is time: one out of time stops there (the stuck
    rows are not starved by them for ever) and the next sweep goes on with the rest."""
    made = [upload(deps, kb, f"s{n}.md", f"# S{n}\n\nSummarised {n}.\n".encode()) for n in range(3)]
    drain(deps)
    for doc in made:
        rows.write_fields(doc.id, parse_status=ParseStatus.COMPLETED)
        time.sleep(0.002)  # each claimed in a later millisecond: the first is the oldest
        rows.set_summary_status(doc.id, SummaryStatus.PROCESSING.value)
    asked: list[bool] = []

    def out_after_one_summary() -> bool:
        asked.append(True)
        return len(asked) > 1

    monkeypatch.setattr(housekeeping, "out_of_time", out_after_one_summary)
    report = housekeeping.sweep(deps, datetime.now(UTC) + timedelta(hours=2))
    assert report.cut_short and report.summaries_failed == [made[0].id]
    monkeypatch.setattr(housekeeping, "out_of_time", lambda: False)
    report = housekeeping.sweep(deps, datetime.now(UTC) + timedelta(hours=2))
    assert not report.cut_short and report.summaries_failed == [made[1].id, made[2].id]


def test_a_queue_that_does_not_answer_spares_nothing(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """Fail safe: an unanswered backlog read cannot keep a stuck row alive for ever."""
    created = upload(deps, kb)
    queue.make_unavailable("docreader")
    assert sweep_later(deps).recovered == [created.id]


def test_a_refused_backlog_read_surfaces_instead_of_failing_the_row(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, rows: MemoryKnowledgeRepo
) -> None:
    """A refused read (a role without the grant) is a bug: the sweep stops with it, the row is untouched."""
    created = upload(deps, kb)

    def refused(name: str) -> int:
        raise PermissionError(f"AccessDenied: GetQueueAttributes on {name}")

    queue.backlog = refused  # type: ignore[method-assign]
    with pytest.raises(PermissionError, match="AccessDenied"):
        sweep_later(deps)
    current = rows.get(created.id)
    assert current is not None and current.parse_status == ParseStatus.PENDING


@pytest.mark.parametrize("move_on", ["reparse", "stage_begins"])
def test_a_row_that_moves_on_during_the_sweep_is_not_failed(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, rows: MemoryKnowledgeRepo, move_on: str
) -> None:
    """The sweep's write is conditional on the row as read: a reparse (a new attempt) or a stage taking the
    row (the same attempt, told by its `updated_at`) between the read and the write wins."""
    created = upload(deps, kb)
    queue.purge("docreader")
    real = rows.in_flight_older_than

    def read_then_move_on(cutoff: str) -> list[object]:
        found = real(cutoff)
        time.sleep(0.002)  # the write lands in a later millisecond than the row as read
        if move_on == "reparse":
            rows.reset_for_reparse(created.id, None)
        else:
            assert rows.begin_processing(created.id, created.attempt) is not None
        return found  # type: ignore[return-value]

    rows.in_flight_older_than = read_then_move_on  # type: ignore[method-assign,assignment]
    report = sweep_later(deps)
    assert report.recovered == []
    current = rows.get(created.id)
    assert current is not None
    if move_on == "reparse":
        assert current.parse_status == ParseStatus.PENDING and current.attempt == 2
    else:
        assert current.parse_status == ParseStatus.PROCESSING and current.attempt == 1


def test_a_summary_stuck_in_processing_fails_and_leaves_the_document_alone(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo
) -> None:
    created = upload(deps, kb)
    rows.write_fields(created.id, parse_status=ParseStatus.COMPLETED)
    rows.set_summary_status(created.id, SummaryStatus.PROCESSING.value)
    report = housekeeping.sweep(deps, datetime.now(UTC) + timedelta(hours=2))
    assert report.summaries_failed == [created.id]
    current = rows.get(created.id)
    assert current is not None and current.summary_status == SummaryStatus.FAILED
    assert current.parse_status == ParseStatus.COMPLETED


def test_a_summary_left_pending_on_a_settled_row_fails_after_the_rows_threshold(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo
) -> None:
    """The machine gave up on the summary subtask (its Catch released the slot and promoted the row), or a
    refresh's message died: no message will move the pending summary, so housekeeping fails it, but only
    past the rows' threshold (a subtask or a refresh may wait that long in a busy queue)."""
    created = upload(deps, kb)
    rows.write_fields(created.id, parse_status=ParseStatus.COMPLETED)
    rows.set_summary_status(created.id, SummaryStatus.PENDING.value)
    in_flight = upload(deps, kb, "other.md", b"# Other\n\nStill queued.\n")
    rows.set_summary_status(in_flight.id, SummaryStatus.PENDING.value)
    assert housekeeping.sweep(deps, datetime.now(UTC) + timedelta(hours=2)).summaries_failed == []
    report = sweep_later(deps)
    assert report.summaries_failed == [created.id]  # the in-flight row's own sweep decides for it
    current = rows.get(created.id)
    assert current is not None and current.summary_status == SummaryStatus.FAILED
    assert current.parse_status == ParseStatus.COMPLETED


def test_the_handler_reports_what_it_did(deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue) -> None:
    created = upload(deps, kb)
    queue.purge("docreader")
    deps.settings = replace(deps.settings, stale_after_seconds=-60)  # everything is already stale
    assert housekeeping.handle(deps, {}) == {
        "cut_short": False,
        "recovered": [created.id],
        "spared": {},
        "summaries_failed": [],
        "deletes_redriven": [],
    }
