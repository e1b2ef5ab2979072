"""A big knowledge base's report refresh finishes (operations/kb_report_refresh.py): it walks in slices,
keeps a checkpoint at each slice's end and goes on from it in the next delivery, so a delivery cut off (the
lifecycle function's 300 s or 512 MB) costs one slice, not the whole walk; it keeps a few numbers per
document, not their sums and rows; the next refresh waits from when the report was stored; and a refresh
that fails costs one generation, never the report for good."""

from __future__ import annotations

import random
import tracemalloc
from datetime import datetime, timedelta
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain import metering
from chalicelib.domain.clock import now_iso, to_iso
from chalicelib.domain.errors import AppError, ServiceUnavailable
from chalicelib.domain.types import OPEN_TASK_STATUSES, KnowledgeBase, TaskStatus, Tenant
from chalicelib.operations import cost, kb_report_refresh, kb_reports
from chalicelib.operations.cost import kb_cost
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.stats import kb_stats
from chalicelib.ports import UsageEntry
from chalicelib.stages import lifecycle
from chalicelib.tasks import MAX_TASK_GENERATIONS

from .conftest import drain
from .repo_contract import row
from .test_kb_reports_bounded import populate, report_tasks, without_meta

READS = {"cost": kb_cost, "stats": kb_stats}


@pytest.fixture
def big(deps: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> KnowledgeBase:
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="big"))
    other = create_kb(deps, tenant.id, CreateKnowledgeBase(name="other"))
    populate(deps, kb, other, random.Random(11), 40)
    monkeypatch.setattr(kb_reports, "INLINE_USAGE_ENTRIES", 5)
    monkeypatch.setattr(kb_reports, "INLINE_ROWS", 3)
    return kb


class LambdaTimedOut(BaseException):
    """The lifecycle function's 300 s (or 512 MB) ran out: the delivery is gone, nothing after it ran."""


def cut_off_every(deps: Services, monkeypatch: pytest.MonkeyPatch, entries: int) -> list[int]:
    """Kills the delivery reading past each multiple of `entries` usage entries (whichever way it reads
    them); returns the count read."""
    read = [0]

    def count(n: int) -> None:
        before = read[0]
        read[0] += n
        if read[0] // entries > before // entries:
            raise LambdaTimedOut

    real_for_kb = deps.usage.for_kb

    def for_kb(kb_id: str) -> Any:
        for entry in real_for_kb(kb_id):
            count(1)
            yield entry

    monkeypatch.setattr(deps.usage, "for_kb", for_kb)
    if hasattr(deps.usage, "kb_page"):
        real_page = deps.usage.kb_page

        def kb_page(kb_id: str, cursor: str | None, limit: int) -> Any:
            page = real_page(kb_id, cursor, limit)
            count(len(page.entries))
            return page

        monkeypatch.setattr(deps.usage, "kb_page", kb_page)
    return read


def deliver_until_ended(deps: Services, task_id: str, deliveries: int = 400) -> tuple[int, int]:
    """Delivers the task (each call one delivery: a cut-off one is delivered again) until it ended;
    returns (deliveries, how many were cut off)."""
    cut = 0
    for delivery in range(1, deliveries + 1):
        try:
            lifecycle.run(deps, task_id)
        except LambdaTimedOut:
            cut += 1
        task = deps.tasks.get(task_id)
        assert task is not None
        if task.status not in OPEN_TASK_STATUSES:
            return delivery, cut
    pytest.fail(f"the refresh never ended: {deliveries} deliveries, {cut} cut off")


@pytest.mark.parametrize("kind", ["cost", "stats"])
def test_a_refresh_cut_off_mid_way_goes_on_from_its_checkpoint_to_the_uninterrupted_report(
    deps: Services, big: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    monkeypatch.setattr(kb_report_refresh, "SLICE_SECONDS", 0, raising=False)  # a page a slice
    monkeypatch.setattr(cost, "USAGE_PAGE", 7, raising=False)
    total = sum(1 for _ in deps.usage.for_kb(big.id))
    pending = READS[kind](deps, big.tenant_id, big.id)
    read = cut_off_every(deps, monkeypatch, total // 3)
    deliveries, cut = deliver_until_ended(deps, pending["task_id"])
    assert deps.tasks.get(pending["task_id"]).status == TaskStatus.COMPLETED  # type: ignore[union-attr]
    assert cut >= 2 and deliveries > cut  # cut off more than once, and went on each time
    assert read[0] < 2 * total  # each delivery went on from the last checkpoint, not the first entry
    stored = deps.usage.report(big.id, kind)
    assert stored is not None
    assert deps.files.list_keys(f"reports/{big.id}/", 10) == []  # the checkpoint is gone

    monkeypatch.undo()
    uninterrupted = kb_report_refresh.whole_report(deps, big.id, kind)  # the same entries, now filled
    assert dict(stored.body) == uninterrupted
    inline = READS[kind](deps, big.tenant_id, big.id)  # the shipped bounds: read inline, exact
    assert inline["fresh"] and without_meta(inline) == dict(stored.body)


def test_a_refresh_keeps_a_few_numbers_per_document_not_its_sums_and_row(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """~6 KB a document on the first walk (a document's Sums and its row kept to the end), so about
    70,000 documents filled the lifecycle function's 512 MB; the walk keeps its place, its tenant and its
    attempts as bit masks: a few hundred bytes."""
    documents = 3000
    for n in range(documents):
        knowledge_id = f"{n:08d}-0000-4000-8000-000000000000"
        deps.knowledge.insert(row(id=knowledge_id, tenant_id=kb.tenant_id, kb_id=kb.id, attempt=1))
        for stage in ("docreader", "chunking", "embedding", "workflow"):
            counts = {metering.LAMBDA_REQUESTS: 1.0, metering.LAMBDA_GB_SECONDS: 0.125 + n / 1e6}
            deps.usage.put(
                UsageEntry(knowledge_id, f"000001#{stage}#m-{n}", kb.id, kb.tenant_id, counts, now_iso())
            )
    monkeypatch.setattr(cost, "USAGE_PAGE", 100, raising=False)  # a page's entries: not per document
    refresh = kb_reports.report_task_id(kb.id, "cost", 0)
    task = kb_report_task(kb, refresh)
    tracemalloc.start()
    try:
        kb_report_refresh.refresh_report(deps, task)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    stored = deps.usage.report(kb.id, "cost")
    assert stored is not None and stored.body["documents"] == documents
    assert peak / documents < 1000, f"{peak / documents:.0f} bytes a document"  # ~320 here


def kb_report_task(kb: KnowledgeBase, task_id: str) -> Any:
    from chalicelib.domain.types import Task, TaskKind

    return Task(
        id=task_id,
        tenant_id=kb.tenant_id,
        kind=TaskKind.KB_REPORT,
        kb_id=kb.id,
        items=[kb.id],
        params={"report": "cost", "generation": 0},
    )


class Later(datetime):
    """datetime whose now() is `shift` seconds ahead (kb_reports reads datetime.now for its waits)."""

    shift = 0.0

    @classmethod
    def now(cls, tz: Any = None) -> Any:  # type: ignore[override]
        return datetime.now(tz) + timedelta(seconds=cls.shift)


@pytest.fixture
def later(monkeypatch: pytest.MonkeyPatch) -> type[Later]:
    monkeypatch.setattr(Later, "shift", 0.0)
    monkeypatch.setattr(kb_reports, "datetime", Later)
    return Later


def test_the_next_refresh_waits_from_when_the_report_was_stored(
    deps: Services, big: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, later: type[Later]
) -> None:
    """A refresh whose read began 290 s before it stored (most of the lifecycle's 300 s): its report's
    as_of is 290 s old when stored; the wait counts from the store, so a GET 15 s later starts none."""
    kb_cost(deps, big.tenant_id, big.id)  # 202, generation 0 written and sent
    began = datetime.now() - timedelta(seconds=290)
    monkeypatch.setattr(kb_report_refresh, "now_iso", lambda: to_iso(began))
    drain(deps, ("lifecycle",))
    assert len(report_tasks(deps)) == 1
    later.shift = 15
    answer = kb_cost(deps, big.tenant_id, big.id)
    assert not answer["refreshing"] and len(report_tasks(deps)) == 1, answer.get("task_id")
    later.shift = kb_reports.REFRESH_AFTER_SECONDS + 1  # past the wait from the store: the next one
    assert kb_cost(deps, big.tenant_id, big.id)["refreshing"] and len(report_tasks(deps)) == 2


def test_failed_refreshes_cost_a_generation_each_say_why_and_never_lock_the_report(
    deps: Services, big: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, later: type[Later]
) -> None:
    """Each refresh fails (a provider down as it stores: an AppError against the item, the task FAILED).
    The GET after it answers 503 `report_unavailable` with why, and starts the next only once the wait
    after the failure is over (no refresh a GET); more failed generations than MAX_TASK_GENERATIONS do not
    lock the report: once the cause is gone the next refresh stores it."""

    def down(*_: Any, **__: Any) -> Any:
        raise ServiceUnavailable("the report store is down")

    monkeypatch.setattr(kb_report_refresh, "save_refreshed", down)
    for n in range(MAX_TASK_GENERATIONS + 3):
        later.shift = kb_reports.REFRESH_AFTER_SECONDS + 1 if n else 0  # the wait after the last is over
        pending = kb_cost(deps, big.tenant_id, big.id)
        later.shift = 0
        assert pending["code"] == kb_reports.REPORT_PENDING, n
        assert pending["task_id"] == kb_reports.report_task_id(big.id, "cost", n)
        drain(deps, ("lifecycle",))
        for _ in range(2):  # a client polling: no new refresh while the wait runs, and why
            with pytest.raises(AppError) as failed:
                kb_cost(deps, big.tenant_id, big.id)
            assert (failed.value.status, failed.value.code) == (503, "report_unavailable")
            assert (
                "the report store is down" in failed.value.message
                and pending["task_id"] in failed.value.message
            )
        assert len(report_tasks(deps)) == n + 1
    later.shift = kb_reports.REFRESH_AFTER_SECONDS + 1
    monkeypatch.setattr(kb_report_refresh, "save_refreshed", kb_reports.save_refreshed)  # the cause is gone
    pending = kb_cost(deps, big.tenant_id, big.id)
    assert pending["code"] == kb_reports.REPORT_PENDING
    later.shift = 0
    drain(deps, ("lifecycle",))
    stored = kb_cost(deps, big.tenant_id, big.id)
    assert stored["fresh"] is False and stored["documents"] > 0 and not stored["refreshing"]


def test_a_delivery_after_the_report_was_stored_walks_nothing(
    deps: Services, big: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A delivery of a refresh whose report a delivery of it stored (one that died before the task was
    saved ended, or a second copy of the message): nothing read again, no checkpoint left behind."""
    pending = kb_cost(deps, big.tenant_id, big.id)
    drain(deps, ("lifecycle",))
    task = deps.tasks.get(pending["task_id"])
    assert task is not None and deps.usage.report(big.id, "cost") is not None
    read = cut_off_every(deps, monkeypatch, 10**9)
    kb_report_refresh.refresh_report(deps, task)
    assert read == [0] and deps.files.list_keys(f"reports/{big.id}/", 10) == []
