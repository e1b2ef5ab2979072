"""A sweep that dies (its time or memory ran out) or meets a store that does not answer between a decision
and its announcement lost the event for good: no message brings a sweep back, and the next sweep no longer
sees the decided row, summary or task. What a decision owes is now written down before it is made and paid
by the next sweep: the event (under the same id), and for a row its span, its place at the door and its
uncounted outputs. Each decision has its own entry, paid only once its sweep has surely ended (two sweeps at
once never settle each other's: a review proved the deciding sweep's entry settled by the other before it
died), and an entry whose payment keeps failing is dropped after a few tries instead of stopping every later
sweep at its first step."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.adapters.memory.events import MemoryEventPublisher
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateTagRequest
from chalicelib.domain.clock import iso_before
from chalicelib.domain.types import KnowledgeBase, ParseStatus, SpanStatus, SummaryStatus, TaskKind, Tenant
from chalicelib.ports import ServiceUnreachable
from chalicelib.stages import housekeeping

from . import conftest
from .test_enrichment_replies import ReplyingLLM
from .test_enrichment_replies import llm as llm
from .test_housekeeping_summary_liveness import _throttled_summary
from .test_task_resend import _only_task, _unsent

LATER = timedelta(hours=3)  # past the 2h10m threshold
#: a sweep pays an entry once the sweep that wrote it has surely ended
PAID = timedelta(seconds=housekeeping.OWED_AFTER_SECONDS + 60)


class SweepDied(BaseException):
    """The sweep's invocation is gone (Lambda's time or memory ran out): nothing after it ran."""


@pytest.fixture
def events(deps: Services) -> Iterator[MemoryEventPublisher]:
    assert isinstance(deps.events, MemoryEventPublisher)
    yield deps.events


def _a_sweep_that_dies_at_its_first_announcement(
    deps: Services, now: datetime, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        _dies_at_its_first_announcement(deps, m)
        with pytest.raises(SweepDied):
            housekeeping.sweep(deps, now)


def _dies_at_its_first_announcement(deps: Services, monkeypatch: pytest.MonkeyPatch) -> None:
    def died(events: object) -> None:
        raise SweepDied

    monkeypatch.setattr(deps.events, "publish", died)


def test_a_row_failed_by_a_sweep_that_died_before_announcing_is_announced_by_the_next(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    events: MemoryEventPublisher,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stuck = conftest.upload(deps, kb)
    queue.purge("docreader")
    now = datetime.now(UTC) + LATER
    _a_sweep_that_dies_at_its_first_announcement(deps, now, monkeypatch)
    row = deps.knowledge.get(stuck.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED
    assert "Knowledge Failed" not in events.types_of(stuck.id)
    housekeeping.sweep(deps, now + PAID)
    assert events.types_of(stuck.id).count("Knowledge Failed") == 1
    failed = next(
        e
        for e in events.published
        if e.detail.get("knowledge_id") == stuck.id and e.type.value == "Knowledge Failed"
    )
    assert failed.detail["error"]["code"] == "task_timeout"
    assert "recovered by housekeeping" in failed.detail["error"]["message"]
    root = [s for s in deps.spans.list(stuck.id, row.attempt) if s.parent_id in ("", None)]
    assert root and root[0].status == SpanStatus.FAILED
    # paid once: a third sweep owes nothing
    housekeeping.sweep(deps, now + 2 * PAID)
    assert events.types_of(stuck.id).count("Knowledge Failed") == 1


def test_a_row_whose_place_could_not_be_given_back_gets_it_back_at_the_next_sweep(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    events: MemoryEventPublisher,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The give-back met a tenants table that did not answer: the place freed itself only when its lease
    ran out (and the row's uncounted outputs stayed); the next sweep gives it back."""
    stuck = conftest.upload(deps, kb)
    queue.purge("docreader")
    given_back: list[str] = []
    real = housekeeping.leave_pipeline

    def unanswered(*args: object) -> None:
        raise ServiceUnreachable("the tenants table did not answer")

    def recorded(deps_: Services, tenant_id: str, knowledge_id: str) -> None:
        given_back.append(knowledge_id)
        real(deps_, tenant_id, knowledge_id)

    now = datetime.now(UTC) + LATER
    monkeypatch.setattr(housekeeping, "leave_pipeline", unanswered)
    with pytest.raises(ServiceUnreachable):
        housekeeping.sweep(deps, now)
    monkeypatch.setattr(housekeeping, "leave_pipeline", recorded)
    housekeeping.sweep(deps, now + PAID)
    assert given_back == [stuck.id]


def test_a_summary_failed_by_a_sweep_that_died_before_announcing_is_announced_by_the_next(
    deps: Services,
    tenant: Tenant,
    llm: ReplyingLLM,
    events: MemoryEventPublisher,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    knowledge = _throttled_summary(deps, tenant, llm)
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.purge("enrichment")  # its message is lost: nothing moves the summary any more
    now = datetime.now(UTC) + timedelta(hours=2)
    _a_sweep_that_dies_at_its_first_announcement(deps, now, monkeypatch)
    row = deps.knowledge.get(knowledge.id)
    assert row is not None and row.summary_status == SummaryStatus.FAILED
    assert "Summary Failed" not in events.types_of(knowledge.id)
    housekeeping.sweep(deps, now + PAID)
    assert events.types_of(knowledge.id).count("Summary Failed") == 1


def test_a_task_failed_by_a_sweep_that_died_before_announcing_is_announced_by_the_next(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    events: MemoryEventPublisher,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.operations.tags import create_tag, delete_tag

    tag = create_tag(deps, kb.tenant_id, kb.id, CreateTagRequest(name="Red"))
    _unsent(queue, lambda: delete_tag(deps, kb.tenant_id, kb.id, tag.id))
    task = _only_task(deps, TaskKind.DELETE_TAG)
    now = datetime.now(UTC)
    for _ in range(housekeeping.MAX_TASK_RESENDS):  # each re-send lost again
        now += LATER
        housekeeping.sweep(deps, now)
        queue.purge("lifecycle")
    now += LATER
    _a_sweep_that_dies_at_its_first_announcement(deps, now, monkeypatch)
    assert "Task Failed" not in events.types_of(task.id)
    housekeeping.sweep(deps, now + PAID)
    assert events.types_of(task.id) == ["Task Failed"]


@pytest.mark.parametrize("other_sweep", ["pays", "loses"])
def test_a_sweep_at_the_same_time_does_not_settle_the_deciding_sweeps_entry(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    events: MemoryEventPublisher,
    monkeypatch: pytest.MonkeyPatch,
    other_sweep: str,
) -> None:
    """Sweep B runs while sweep A decides (EventBridge's sweep and a retried one): B pays what is owed
    between A's entry and A's write, or reads the same stuck row and loses the write; then A dies before
    announcing. A later sweep still announces the failure, once."""
    stuck = conftest.upload(deps, kb)
    queue.purge("docreader")
    as_read_by_b = deps.knowledge.get(stuck.id)
    assert as_read_by_b is not None
    now = datetime.now(UTC) + LATER
    real_mark_failed = deps.knowledge.mark_failed
    calls: list[int] = []

    def sweep_a_marks_failed(*args: Any, **kwargs: Any) -> bool:
        calls.append(1)
        if len(calls) > 1:
            return real_mark_failed(*args, **kwargs)
        if other_sweep == "pays":
            housekeeping._pay_what_is_owed(deps, now, housekeeping.SweepReport())
            return real_mark_failed(*args, **kwargs)
        won = real_mark_failed(*args, **kwargs)
        cutoff = iso_before(deps.settings.stale_after_seconds, now)
        wait_limit = iso_before(deps.settings.queue_wait_limit_seconds, now)
        report = housekeeping.SweepReport()
        housekeeping._recover_if_stuck(deps, now, as_read_by_b, cutoff, wait_limit, {}, report)
        return won

    with monkeypatch.context() as m:
        m.setattr(deps.knowledge, "mark_failed", sweep_a_marks_failed)
        _dies_at_its_first_announcement(deps, m)
        with pytest.raises(SweepDied):
            housekeeping.sweep(deps, now)
    for later in (PAID, 2 * PAID):
        housekeeping.sweep(deps, now + later)
    assert events.types_of(stuck.id).count("Knowledge Failed") == 1


class SpansRefused(Exception):
    """One row's follow-up that fails every time (its span store refuses the write)."""


def test_a_follow_up_that_always_fails_is_dropped_and_the_sweeps_go_on(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    poisoned = conftest.upload(deps, kb, name="a.md")
    queue.purge("docreader")
    real_close_root = deps.tracker.close_root

    def close_root(knowledge_id: str, *args: Any, **kwargs: Any) -> None:
        if knowledge_id == poisoned.id:
            raise SpansRefused(knowledge_id)
        real_close_root(knowledge_id, *args, **kwargs)

    monkeypatch.setattr(deps.tracker, "close_root", close_root)
    now = datetime.now(UTC) + LATER
    with pytest.raises(SpansRefused):
        housekeeping.sweep(deps, now)  # the sweep that decides meets it
    other = conftest.upload(deps, kb, name="b.md", data=b"# Other\n\nAnother document, stuck too.\n")
    queue.purge("docreader")
    raised = 0
    for n in range(1, 8):
        try:
            housekeeping.sweep(deps, now + n * PAID + LATER)
        except SpansRefused:
            raised += 1
    assert raised <= housekeeping.OWED_TRIES
    row = deps.knowledge.get(other.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED
    assert deps.turns.change(housekeeping.OWED_BOOK, lambda book: (dict(book), book)) == {}


def test_an_entry_of_the_books_first_version_is_paid_and_the_sweeps_go_on(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    """The book's first version kept `<kind>:<id>` -> attempt: such an entry, left by a sweep that died, is
    paid (a review found it raising at the first step of every later sweep)."""
    stuck = conftest.upload(deps, kb)
    queue.purge("docreader")
    deps.turns.change(housekeeping.OWED_BOOK, lambda book: (None, {**book, "knowledge:gone-row": 1}))
    now = datetime.now(UTC) + LATER
    housekeeping.sweep(deps, now)
    row = deps.knowledge.get(stuck.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED
    assert deps.turns.change(housekeeping.OWED_BOOK, lambda book: (dict(book), book)) == {}
