"""Housekeeping audit (issues 11-13): a backlog of spared rows cannot hide a stuck row behind it (a sweep
goes on where the last one stopped), a delete still queued is driven again once per threshold (not every
sweep), and an unanswered execution check spares the row until the next sweep instead of failing it."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.ids import execution_name
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus
from chalicelib.ports import ServiceUnreachable
from chalicelib.stages import housekeeping
from chalicelib.tasks import delete_task_id

from .conftest import drain, upload

LATER = timedelta(hours=3)  # past the 2h10m threshold
UNANSWERED = "its state machine execution did not answer: looked at again next sweep"


class RowBudget:
    """`out_of_time()` of a sweep that has time for `rows` rows, then says its time is up."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        self.left = rows

    def __call__(self) -> bool:
        if self.left == 0:
            return True
        self.left -= 1
        return False

    def next_run(self) -> None:
        self.left = self.rows


# ---------------------------------------------------------------- 11: the sweep goes on where it stopped


def test_a_backlog_of_spared_rows_does_not_hide_a_stuck_row_behind_it(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten documents wait in a busy queue (spared) ahead of one whose message is gone; each sweep has time
    for four rows. Each sweep goes on after the last row the previous one looked at, so the third reaches
    the stuck row; one that got to the end makes the next start at the oldest again."""
    waiting = []
    for n in range(10):  # a millisecond apart: rows of one millisecond would be ordered by their random ids
        waiting.append(upload(deps, kb, f"w{n}.md", f"# W{n}\n\nEntry {n}.\n".encode()))
        time.sleep(0.002)
    stuck = upload(deps, kb, "stuck.md", b"# Stuck\n\nIts message was lost.\n")
    rows.write_fields(stuck.id, queued_stage="")  # nothing queued for it: stuck for good
    deps.settings = replace(deps.settings, stale_after_seconds=-60)  # every row is already stale
    budget = RowBudget(4)
    monkeypatch.setattr(housekeeping, "out_of_time", budget)
    reports = []
    for _ in range(4):
        budget.next_run()
        reports.append(housekeeping.sweep(deps))
    first, second, third, fourth = reports
    assert [r.cut_short for r in reports] == [True, True, False, True]
    assert third.recovered == [stuck.id]
    current = rows.get(stuck.id)
    assert current is not None and current.parse_status == ParseStatus.FAILED
    # one pass over the backlog: every waiting row looked at once, each sweep after the previous one
    looked_at = [list(r.spared) for r in (first, second, third)]
    assert [len(ids) for ids in looked_at] == [4, 4, 2]
    assert sorted(i for ids in looked_at for i in ids) == sorted(k.id for k in waiting)
    assert list(fourth.spared) == looked_at[0]  # the third got to the end: the fourth starts at the oldest


def test_a_sweep_cut_short_before_any_row_keeps_its_place(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep whose time went on the deletes and summaries looked at no row: the next goes on where the
    one before it stopped, not at the oldest."""
    for n in range(6):
        upload(deps, kb, f"w{n}.md", f"# W{n}\n\nEntry {n}.\n".encode())
    deps.settings = replace(deps.settings, stale_after_seconds=-60)
    budget = RowBudget(3)
    monkeypatch.setattr(housekeeping, "out_of_time", budget)
    first = housekeeping.sweep(deps)
    budget.rows = 0
    budget.next_run()
    assert housekeeping.sweep(deps).spared == {}
    budget.rows = 3
    budget.next_run()
    third = housekeeping.sweep(deps)
    assert len(third.spared) == 3 and not set(third.spared) & set(first.spared)


# ---------------------------------------------------------------- 12: a delete is driven again once per threshold


def _deleting_for_hours(deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo) -> list[Knowledge]:
    """Three documents in one batch delete whose task still waits in the lifecycle queue, marked three
    hours ago."""
    from chalicelib.commands import BatchDeleteRequest
    from chalicelib.operations.knowledge_changes import batch_delete

    docs = [upload(deps, kb, f"d{n}.md", f"# D{n}\n\nEntry {n}.\n".encode()) for n in range(3)]
    batch_delete(deps, kb.tenant_id, BatchDeleteRequest(kb_id=kb.id, ids=[d.id for d in docs]))
    for doc in docs:
        rows.write_fields(doc.id, updated_at=datetime.now(UTC) - LATER)
    return docs


def test_a_delete_still_queued_is_driven_again_once_per_threshold_not_every_sweep(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, rows: MemoryKnowledgeRepo
) -> None:
    docs = _deleting_for_hours(deps, kb, rows)
    assert len(queue.waiting("lifecycle")) == 1
    now = datetime.now(UTC)
    assert sorted(housekeeping.sweep(deps, now).deletes_redriven) == sorted(d.id for d in docs)
    assert len(queue.waiting("lifecycle")) == 1 + 3
    for minutes in (5, 10, 60):  # the next sweeps: each row's wait started again when it was redriven
        assert housekeeping.sweep(deps, now + timedelta(minutes=minutes)).deletes_redriven == []
    assert len(queue.waiting("lifecycle")) == 1 + 3
    # still there a whole threshold later: each row's own task, open, is sent again (the lost-task
    # backstop), and no second task is written beside it (rev_alo2 4)
    later = housekeeping.sweep(deps, now + LATER)
    assert later.deletes_redriven == []
    assert {delete_task_id(d.id) for d in docs} <= set(later.tasks_resent)
    assert len(queue.waiting("lifecycle")) == 1 + 3 + len(later.tasks_resent)


def test_a_deleting_row_written_since_the_sweep_read_it_is_not_driven_again(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, rows: MemoryKnowledgeRepo
) -> None:
    """The redrive is conditional on the row as read: a delete try that touched it meanwhile (or another
    sweep that redrove it) wins, and no second task is sent."""
    docs = _deleting_for_hours(deps, kb, rows)
    real = rows.deleting_older_than

    def read_then_a_delete_try(cutoff: str) -> list[Knowledge]:
        found = real(cutoff)
        time.sleep(0.002)  # the write lands in a later millisecond than the row as read
        for doc in docs:
            assert rows.mark_deleting(doc.id) is not None  # a delete task took it up
        return found

    rows.deleting_older_than = read_then_a_delete_try  # type: ignore[method-assign,assignment]
    assert housekeeping.sweep(deps).deletes_redriven == []
    assert len(queue.waiting("lifecycle")) == 1


def test_a_sweep_out_of_time_drives_no_delete_and_the_next_one_does(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, rows: MemoryKnowledgeRepo
) -> None:
    from chalicelib.local.pollers import make_context

    docs = _deleting_for_hours(deps, kb, rows)
    almost_over = make_context("housekeeping", region="us-east-1", timeout_seconds=20)  # < the margin
    result = housekeeping.handle(deps, {}, almost_over)
    assert result["cut_short"] and result["deletes_redriven"] == []
    assert len(queue.waiting("lifecycle")) == 1
    result = housekeeping.handle(
        deps, {}, make_context("housekeeping", region="us-east-1", timeout_seconds=300)
    )
    assert not result["cut_short"] and sorted(result["deletes_redriven"]) == sorted(d.id for d in docs)


# ---------------------------------------------------------------- 13: an unanswered execution check spares the row


def _finalizing_with_its_execution_running(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo, workflow: MemoryWorkflow
) -> Knowledge:
    doc = upload(deps, kb)
    drain(deps)  # indexed; its execution runs the enrichment
    rows.write_fields(doc.id, parse_status=ParseStatus.FINALIZING, pending_subtasks_count=3)
    assert workflow.is_running(execution_name(doc.id, 1))
    return doc


def test_an_unanswered_execution_check_spares_the_row_until_the_next_sweep(
    deps: Services,
    kb: KnowledgeBase,
    rows: MemoryKnowledgeRepo,
    workflow: MemoryWorkflow,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """DescribeExecution throttled past its retries: the execution may well run, so the row is neither
    failed nor given up on; the next sweep, answered, decides."""
    doc = _finalizing_with_its_execution_running(deps, kb, rows, workflow)
    answered = workflow.is_running

    def throttled(name: str) -> bool:
        raise ServiceUnreachable("Step Functions did not answer (ClientError)")

    monkeypatch.setattr(workflow, "is_running", throttled)
    report = housekeeping.sweep(deps, datetime.now(UTC) + LATER)
    assert report.recovered == [] and report.spared == {doc.id: UNANSWERED}
    current = rows.get(doc.id)
    assert current is not None and current.parse_status == ParseStatus.FINALIZING
    assert current.error_code == "" and current.pending_subtasks_count == 3
    monkeypatch.setattr(workflow, "is_running", answered)
    workflow.finish(execution_name(doc.id, 1), "FAILED")  # answered next time: it has ended
    assert housekeeping.sweep(deps, datetime.now(UTC) + LATER).recovered == [doc.id]
    failed = rows.get(doc.id)
    assert failed is not None and failed.error_code == SpanErrorCode.TASK_TIMEOUT


def test_a_refused_execution_check_surfaces_instead_of_deciding_on_the_row(
    deps: Services,
    kb: KnowledgeBase,
    rows: MemoryKnowledgeRepo,
    workflow: MemoryWorkflow,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refused DescribeExecution (a role without the grant) is a bug: the sweep stops with it."""
    doc = _finalizing_with_its_execution_running(deps, kb, rows, workflow)

    def refused(name: str) -> bool:
        raise PermissionError(f"AccessDenied: DescribeExecution on {name}")

    monkeypatch.setattr(workflow, "is_running", refused)
    with pytest.raises(PermissionError, match="AccessDenied"):
        housekeeping.sweep(deps, datetime.now(UTC) + LATER)
    current = rows.get(doc.id)
    assert current is not None and current.parse_status == ParseStatus.FINALIZING
