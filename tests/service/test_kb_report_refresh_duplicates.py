"""Duplicate deliveries of a sliced report refresh (operations/kb_report_refresh.py): a KB_REPORT task's
`done` stays 0 over its slices, so the task's save never refused the copy of a slice's message (an SQS
duplicate): each copy walked the slice, re-sent itself, and the copies never merged (one duplicate doubled
every later slice); a copy ending after the other stored the report left its checkpoint for good. The
refresh's book numbers the slices: of the copies of a slice the one that claims it goes on, the others
stop with nothing sent, and no checkpoint outlives the refresh whichever order the copies end in."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain import metering
from chalicelib.domain.clock import now_iso
from chalicelib.domain.errors import ServiceUnavailable
from chalicelib.domain.types import OPEN_TASK_STATUSES, KnowledgeBase, ParseStatus, Task, TaskKind, Tenant
from chalicelib.operations import cost, kb_report_refresh, kb_reports
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.ports import UsageEntry
from chalicelib.stages import lifecycle
from chalicelib.tasks import reembed

from .repo_contract import row

STAGES = ("chunking", "docreader", "embedding", "workflow")


class LambdaTimedOut(BaseException):
    """The delivery is gone (the function's time or memory ran out): nothing after it ran, SQS redelivers."""


def doc(deps: Services, kb: KnowledgeBase, n: int) -> None:
    """A completed document and its four usage entries."""
    knowledge_id = f"{n:08d}-0000-4000-8000-000000000000"
    deps.knowledge.insert(
        row(
            id=knowledge_id,
            tenant_id=kb.tenant_id,
            kb_id=kb.id,
            parse_status=ParseStatus.COMPLETED,
            attempt=1,
        )
    )
    for stage in STAGES:
        counts = {metering.LAMBDA_REQUESTS: 1.0, metering.LAMBDA_GB_SECONDS: 1.0 + n}
        deps.usage.put(
            UsageEntry(knowledge_id, f"000001#{stage}#m-{n}", kb.id, kb.tenant_id, counts, now_iso())
        )


def report_task(kb: KnowledgeBase, kind: str = "cost") -> Task:
    return Task(
        id=kb_reports.report_task_id(kb.id, kind, 0),
        tenant_id=kb.tenant_id,
        kind=TaskKind.KB_REPORT,
        kb_id=kb.id,
        items=[kb.id],
        params={"report": kind, "generation": 0},
    )


@pytest.fixture
def two(
    deps: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch
) -> tuple[KnowledgeBase, KnowledgeBase]:
    """Two knowledge bases of 10 documents (40 entries: 14 pages of 3), a page a slice."""
    monkeypatch.setattr(kb_report_refresh, "SLICE_SECONDS", 0)
    monkeypatch.setattr(cost, "USAGE_PAGE", 3)
    a = create_kb(deps, tenant.id, CreateKnowledgeBase(name="a"))
    b = create_kb(deps, tenant.id, CreateKnowledgeBase(name="b"))
    for n in range(10):
        doc(deps, a, n)
        doc(deps, b, 100 + n)
    return a, b


def count_pages(deps: Services, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    pages = [0]
    real_page = deps.usage.kb_page

    def counted(kb_id: str, cursor: str | None, limit: int) -> Any:
        pages[0] += 1
        return real_page(kb_id, cursor, limit)

    monkeypatch.setattr(deps.usage, "kb_page", counted)
    return pages


def capture_sends(deps: Services, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    sent: list[str] = []
    monkeypatch.setattr(deps.queue, "send_raw", lambda queue, body, **_: sent.append(body["task_id"]))
    return sent


def one_go(deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    with monkeypatch.context() as m:
        m.setattr(deps.usage, "kb_page", type(deps.usage).kb_page.__get__(deps.usage))
        return kb_report_refresh.whole_report(deps, kb.id, "cost")


def assert_ended_clean(deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch) -> None:
    """The task ended, its report is the one-go report, no checkpoint is left."""
    task = deps.tasks.get(report_task(kb).id)
    assert task is not None and task.status not in OPEN_TASK_STATUSES
    stored = deps.usage.report(kb.id, "cost")
    assert stored is not None and dict(stored.body) == one_go(deps, kb, monkeypatch)
    assert deps.files.list_keys(f"reports/{kb.id}/", 10) == [], "a checkpoint left behind"


def pages_read_with_copies(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, copies: int
) -> int:
    """Delivers the refresh in rounds, every message of a round at once (Lambda pollers run them in
    parallel: each read the book and its checkpoint before any of them claimed); returns the pages read."""
    task = report_task(kb)
    deps.tasks.put(task)
    pending = [task.id] * copies  # the first message and `copies - 1` SQS duplicates of it
    sent = capture_sends(deps, monkeypatch)
    pages = count_pages(deps, monkeypatch)
    real_resume = kb_report_refresh._resume
    barrier: list[threading.Barrier] = []

    def resume_together(*args: Any) -> Any:
        state = real_resume(*args)
        barrier[0].wait(timeout=10)
        return state

    monkeypatch.setattr(kb_report_refresh, "_resume", resume_together)
    for _ in range(200):
        if not pending:
            break
        barrier[:] = [threading.Barrier(len(pending))]
        threads = [threading.Thread(target=lifecycle.run, args=(deps, t)) for t in pending]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        pending, sent[:] = list(sent), []
        if deps.tasks.get(task.id).status not in OPEN_TASK_STATUSES:  # type: ignore[union-attr]
            monkeypatch.setattr(kb_report_refresh, "_resume", real_resume)  # a round reads no checkpoint
    monkeypatch.setattr(kb_report_refresh, "_resume", real_resume)
    assert not pending, "the refresh never ended"
    assert_ended_clean(deps, kb, monkeypatch)
    return pages[0]


def test_a_duplicate_of_a_slice_message_merges_into_one_chain(
    deps: Services, two: tuple[KnowledgeBase, KnowledgeBase], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two copies of the first message run together: both read the first page, one claims the slice and
    goes on, the other stops with nothing sent; the walk reads each page once after that (HEAD: 28 pages
    for the 14, every later slice walked twice)."""
    a, b = two
    single = pages_read_with_copies(deps, a, monkeypatch, 1)
    duplicated = pages_read_with_copies(deps, b, monkeypatch, 2)
    assert single == 14
    assert duplicated <= single + 1, f"pages read: {single} with one message, {duplicated} with a duplicate"


def test_three_copies_merge_as_well(
    deps: Services, two: tuple[KnowledgeBase, KnowledgeBase], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, b = two
    assert pages_read_with_copies(deps, b, monkeypatch, 3) <= 14 + 2


def test_a_copy_that_walks_while_the_other_stores_the_report_leaves_no_checkpoint(
    deps: Services, two: tuple[KnowledgeBase, KnowledgeBase], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Copy Y reads its slice; copy X meanwhile runs the refresh to the end (report stored, checkpoints
    deleted, task completed). Y then keeps its checkpoint: its claim finds the refresh ended, so it deletes
    what it wrote and stops (HEAD: Y's checkpoint stayed for good, the task ended, nothing came back)."""
    a, _ = two
    task = report_task(a)
    deps.tasks.put(task)
    sent = capture_sends(deps, monkeypatch)
    lifecycle.run(deps, task.id)  # the first slice: the checkpoint of slice 1
    assert sent == [task.id] and deps.files.list_keys(f"reports/{a.id}/", 10) != []
    real_page = deps.usage.kb_page
    nested = [False]

    def page_then_the_other_copy_ends(kb_id: str, cursor: str | None, limit: int) -> Any:
        page = real_page(kb_id, cursor, limit)
        if not nested[0]:
            nested[0] = True
            for _ in range(100):  # copy X
                lifecycle.run(deps, task.id)
                if deps.tasks.get(task.id).status not in OPEN_TASK_STATUSES:  # type: ignore[union-attr]
                    break
        return page

    monkeypatch.setattr(deps.usage, "kb_page", page_then_the_other_copy_ends)
    sent.clear()
    lifecycle.run(deps, task.id)  # copy Y
    assert sent.count(task.id) <= 13  # X's slices (Y's copy sent nothing back)
    assert_ended_clean(deps, a, monkeypatch)


def test_a_copy_that_ends_the_walk_while_the_other_is_mid_slice_leaves_no_checkpoint(
    deps: Services, two: tuple[KnowledgeBase, KnowledgeBase], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The other order: copy Y (given time to walk to the end) stores the report while copy X is in the
    middle of its slice; X then keeps its checkpoint, loses its claim to the ended refresh, deletes it
    and stops, sending nothing."""
    a, _ = two
    task = report_task(a)
    deps.tasks.put(task)
    sent = capture_sends(deps, monkeypatch)
    lifecycle.run(deps, task.id)  # the first slice
    real_page = deps.usage.kb_page
    nested = [False]

    def page_then_the_other_copy_ends(kb_id: str, cursor: str | None, limit: int) -> Any:
        page = real_page(kb_id, cursor, limit)
        if not nested[0]:
            nested[0] = True
            monkeypatch.setattr(kb_report_refresh, "SLICE_SECONDS", 1000)
            lifecycle.run(deps, task.id)  # copy Y: to the end in one delivery
            monkeypatch.setattr(kb_report_refresh, "SLICE_SECONDS", 0)
            assert deps.usage.report(a.id, "cost") is not None
        return page

    monkeypatch.setattr(deps.usage, "kb_page", page_then_the_other_copy_ends)
    sent.clear()
    lifecycle.run(deps, task.id)  # copy X: its deadline is its first page
    assert sent == []
    assert_ended_clean(deps, a, monkeypatch)


def test_a_delivery_that_dies_after_its_claim_is_redelivered_and_goes_on_from_the_next_slice(
    deps: Services, two: tuple[KnowledgeBase, KnowledgeBase], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dying after the claim (before the old checkpoint's delete and the task's send): SQS delivers the
    message again, which reads the claimed slice and goes on (no page read twice); the old checkpoint
    goes when the refresh ends."""
    a, _ = two
    task = report_task(a)
    deps.tasks.put(task)
    sent = capture_sends(deps, monkeypatch)
    pages = count_pages(deps, monkeypatch)
    lifecycle.run(deps, task.id)  # slice 0 -> 1
    lifecycle.run(deps, task.id)  # slice 1 -> 2
    real_delete = deps.files.delete
    died: list[str] = []

    def die_at_the_first_delete(url: str) -> None:
        if not died:
            died.append(url)
            raise LambdaTimedOut
        real_delete(url)

    monkeypatch.setattr(deps.files, "delete", die_at_the_first_delete)
    with pytest.raises(LambdaTimedOut):
        lifecycle.run(deps, task.id)  # slice 2 -> 3 claimed, then gone
    assert died and died[0].endswith("/2.json.gz")
    sent.clear()
    for _ in range(100):  # the redelivery, then the chain
        lifecycle.run(deps, task.id)
        if deps.tasks.get(task.id).status not in OPEN_TASK_STATUSES:  # type: ignore[union-attr]
            break
    assert pages[0] == 14  # the redelivery went on from slice 3: no page read twice
    assert_ended_clean(deps, a, monkeypatch)


def test_a_delivery_that_dies_before_its_claim_walks_its_slice_again(
    deps: Services, two: tuple[KnowledgeBase, KnowledgeBase], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Dying between keeping the next checkpoint and claiming the slice: the redelivery reads the same
    slice, walks it again (one page twice) and writes the same checkpoint; the report is the one-go one."""
    a, _ = two
    task = report_task(a)
    deps.tasks.put(task)
    capture_sends(deps, monkeypatch)
    pages = count_pages(deps, monkeypatch)
    lifecycle.run(deps, task.id)
    real_change = deps.turns.change
    calls = [0]

    def die_at_the_claim(name: str, change: Any) -> Any:
        calls[0] += 1
        if calls[0] == 2:  # the delivery's book read, then its claim
            raise LambdaTimedOut
        return real_change(name, change)

    monkeypatch.setattr(deps.turns, "change", die_at_the_claim)
    with pytest.raises(LambdaTimedOut):
        lifecycle.run(deps, task.id)
    monkeypatch.setattr(deps.turns, "change", real_change)
    for _ in range(100):
        lifecycle.run(deps, task.id)
        if deps.tasks.get(task.id).status not in OPEN_TASK_STATUSES:  # type: ignore[union-attr]
            break
    assert pages[0] == 15  # the slice walked twice, nothing else
    assert_ended_clean(deps, a, monkeypatch)


def test_a_refresh_that_fails_mid_walk_leaves_no_checkpoint(
    deps: Services, two: tuple[KnowledgeBase, KnowledgeBase], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A provider down in a later slice (an AppError: the item fails, the task ends FAILED, its
    generation with it): the refresh's checkpoints go with it, and a copy still walking stops."""
    a, _ = two
    task = report_task(a)
    deps.tasks.put(task)
    sent = capture_sends(deps, monkeypatch)
    lifecycle.run(deps, task.id)
    assert deps.files.list_keys(f"reports/{a.id}/", 10) != []

    def down(*_: Any, **__: Any) -> Any:
        raise ServiceUnavailable("the usage table is throttled")

    with monkeypatch.context() as m:
        m.setattr(deps.usage, "kb_page", down)
        lifecycle.run(deps, task.id)
    assert deps.tasks.get(task.id).status not in OPEN_TASK_STATUSES  # type: ignore[union-attr]
    assert deps.files.list_keys(f"reports/{a.id}/", 10) == [], "a failed refresh's checkpoint left behind"
    sent.clear()
    with pytest.raises(reembed.AnotherDeliveryCarriesOn):  # a copy that read slice 1 before the failure
        kb_report_refresh._walk_slice(deps, task, 1, now_iso(), cost.CostWalk(a.id))
    assert deps.files.list_keys(f"reports/{a.id}/", 10) == [] and sent == []


def test_entries_written_while_the_refresh_walks_are_left_out(
    deps: Services, two: tuple[KnowledgeBase, KnowledgeBase], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refresh's report says it holds what was there when it began (`as_of`), but its walk counted any
    entry written meanwhile that sorted after where it had got to, its own slices' usage among them (a bench
    of 100,000 documents found the stored stats $0.00027 over the one-go report). Such entries are left out
    now: the report equals the one-go report of the moment it began."""
    a, _ = two
    expected = one_go(deps, a, monkeypatch)
    task = report_task(a)
    deps.tasks.put(task)
    sent = capture_sends(deps, monkeypatch)
    lifecycle.run(deps, task.id)  # the first slice: the walk began
    assert sent == [task.id]
    time.sleep(0.002)  # (ISO times in milliseconds)
    late = UsageEntry(
        f"{9:08d}-0000-4000-8000-000000000000",
        "000001#workflow#zz-late",  # (sorts after where the walk has got to)
        a.id,
        a.tenant_id,
        {metering.LAMBDA_REQUESTS: 1.0, metering.LAMBDA_GB_SECONDS: 50.0},
        now_iso(),
    )
    deps.usage.put(late)
    pending, sent[:] = list(sent), []
    while pending:
        for task_id in pending:
            lifecycle.run(deps, task_id)
        pending, sent[:] = list(sent), []
    stored = deps.usage.report(a.id, "cost")
    assert stored is not None and dict(stored.body) == expected
    assert one_go(deps, a, monkeypatch) != expected  # counted by a report that begins after it
