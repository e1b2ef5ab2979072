"""A knowledge base's cost and stats reports do bounded work per request (operations/kb_reports.py): past the
inline bound a request answers the last report a refresh stored (`fresh: false`, `as_of`) and makes sure one
refresh task is under way, however many GETs come; with none stored yet, a 202-shaped `report_pending` naming
that task. The refresh reads the whole history with the same functions, so its report is the inline one."""

from __future__ import annotations

import copy
import random
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chalicelib.bootstrap import Services, memory_deps
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain import metering
from chalicelib.domain.clock import now_iso
from chalicelib.domain.types import KnowledgeBase, ParseStatus, Task, TaskKind, TaskStatus, Tenant
from chalicelib.operations import kb_reports
from chalicelib.operations.cost import kb_cost
from chalicelib.operations.kb_report_refresh import refresh_report
from chalicelib.operations.kb_reports import REPORT_PENDING, report_task_id, save_refreshed, status_of
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.stats import kb_stats
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.ports import UsageEntry
from chalicelib.services.usage import kb_usage_id

from .conftest import drain
from .repo_contract import row
from .report_store_contract import check_kb_pages, check_report_store

STAGES = ("docreader", "chunking", "embedding", "postprocess", "enrichment")
#: what a report says of when and how it was read, beside the report itself
META = ("as_of", "fresh", "refreshing", "task_id")


def populate(
    deps: Services, kb: KnowledgeBase, other: KnowledgeBase, rng: random.Random, documents: int
) -> None:
    """Documents of every fate with one or two attempts of entries (some written twice: one entry kept),
    most attempts with their workflow entry, and the knowledge base's own work."""
    for _ in range(documents):
        knowledge_id = str(uuid.UUID(int=rng.getrandbits(128)))
        attempts = rng.randint(1, 2)
        fate = rng.choice(("live", "live", "deleted", "moved"))
        if fate != "deleted":
            where = other.id if fate == "moved" else kb.id  # moved: its entries still say kb (not carried)
            status = rng.choice((ParseStatus.COMPLETED, ParseStatus.FAILED))
            deps.knowledge.insert(
                row(
                    id=knowledge_id,
                    tenant_id=kb.tenant_id,
                    kb_id=where,
                    parse_status=status,
                    attempt=attempts,
                    chunk_count=rng.randint(0, 9),
                    file_size=rng.randint(1, 999),
                )
            )
        for attempt in range(1, attempts + 1):
            for n, stage in enumerate(rng.sample(STAGES, rng.randint(1, len(STAGES)))):
                counts = {
                    metering.LAMBDA_REQUESTS: 1.0,
                    metering.LAMBDA_GB_SECONDS: round(rng.random(), 6),
                    metering.SQS_REQUESTS: float(rng.randint(1, 3)),
                }
                entry = UsageEntry(
                    knowledge_id, f"{attempt:06d}#{stage}#m-{n}", kb.id, kb.tenant_id, counts, now_iso()
                )
                deps.usage.put(entry)
                if rng.random() < 0.3:
                    deps.usage.put(entry)  # a redelivered stage wrote it again: the same key, one entry
            if rng.random() < 0.7:
                deps.usage.put(
                    UsageEntry(
                        knowledge_id,
                        f"{attempt:06d}#workflow#execution",
                        kb.id,
                        kb.tenant_id,
                        {metering.SFN_TRANSITIONS: float(rng.randint(3, 9))},
                        now_iso(),
                    )
                )
    for n in range(rng.randint(0, 3)):
        deps.usage.put(
            UsageEntry(
                kb_usage_id(kb.id),
                f"000000#wiki#own-{n}",
                kb.id,
                kb.tenant_id,
                {metering.LAMBDA_REQUESTS: 1.0, metering.LAMBDA_GB_SECONDS: 0.25},
                now_iso(),
            )
        )


def without_meta(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k not in META}


def report_tasks(deps: Services) -> list[Any]:
    return [t for t in deps.tasks._rows.values() if t.kind == TaskKind.KB_REPORT]  # type: ignore[attr-defined]


def lifecycle_messages(deps: Services) -> int:
    return len(deps.queue.waiting("lifecycle"))  # type: ignore[attr-defined]


@pytest.fixture
def big(deps: Services, tenant: Tenant, monkeypatch: pytest.MonkeyPatch) -> KnowledgeBase:
    """A knowledge base past the inline bounds (patched small)."""
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="big"))
    other = create_kb(deps, tenant.id, CreateKnowledgeBase(name="other"))
    populate(deps, kb, other, random.Random(7), 12)
    monkeypatch.setattr(kb_reports, "INLINE_USAGE_ENTRIES", 5)
    monkeypatch.setattr(kb_reports, "INLINE_ROWS", 3)
    return kb


def test_a_small_knowledge_base_is_read_inline_and_says_so(deps: Services, kb: KnowledgeBase) -> None:
    for report in (kb_cost(deps, kb.tenant_id, kb.id), kb_stats(deps, kb.tenant_id, kb.id)):
        assert report["fresh"] is True and report["refreshing"] is False and report["as_of"]
        assert status_of(report) == 200
    assert report_tasks(deps) == [] and lifecycle_messages(deps) == 0


@pytest.mark.parametrize("which", [kb_cost, kb_stats], ids=["cost", "stats"])
def test_past_the_bound_every_get_finds_one_refresh_then_its_report(
    deps: Services, big: KnowledgeBase, which: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = [which(deps, big.tenant_id, big.id) for _ in range(5)]
    (task,) = report_tasks(deps)
    assert lifecycle_messages(deps) == 1  # sent once, by the GET that wrote it
    for answer in answers:
        assert status_of(answer) == 202
        assert answer["code"] == REPORT_PENDING and answer["task_id"] == task.id
        assert (answer["fresh"], answer["refreshing"], answer["as_of"]) == (False, True, None)

    drain(deps, ("lifecycle",))
    assert deps.tasks.get(task.id).status == TaskStatus.COMPLETED  # type: ignore[union-attr]
    stored = which(deps, big.tenant_id, big.id)
    assert status_of(stored) == 200 and stored["kb_id"] == big.id
    assert (stored["fresh"], stored["refreshing"]) == (False, False) and stored["as_of"]
    assert "task_id" not in stored and len(report_tasks(deps)) == 1  # a recent report starts none

    monkeypatch.setattr(kb_reports, "REFRESH_AFTER_SECONDS", 0)  # the stored report is old now
    again = [which(deps, big.tenant_id, big.id) for _ in range(4)]
    assert len(report_tasks(deps)) == 2 and lifecycle_messages(deps) == 1
    assert {a["task_id"] for a in again} == {report_task_id(big.id, task.params["report"], 1)}
    assert all(a["refreshing"] and a["as_of"] == stored["as_of"] for a in again)
    assert all(without_meta(a) == without_meta(stored) for a in again)
    drain(deps, ("lifecycle",))
    assert which(deps, big.tenant_id, big.id)["as_of"] > stored["as_of"]


def test_a_refresh_delivered_twice_counts_nothing_twice(deps: Services, big: KnowledgeBase) -> None:
    kb_cost(deps, big.tenant_id, big.id)
    (task,) = report_tasks(deps)
    refresh_report(deps, task)
    first = deps.usage.report(big.id, "cost")
    entries = sorted((e.knowledge_id, e.entry, e.kb_id) for e in deps.usage.for_kb(big.id))
    refresh_report(deps, task)  # a redelivery: reads again, fills and carries rewrite the same entries
    second = deps.usage.report(big.id, "cost")
    assert first is not None and second is not None
    assert sorted((e.knowledge_id, e.entry, e.kb_id) for e in deps.usage.for_kb(big.id)) == entries
    assert second.body == first.body and second.as_of >= first.as_of
    # a late delivery of an older read never replaces a newer report
    assert not save_refreshed(deps, task, "2000-01-01T00:00:00.000Z", {"aws_dollars": 1e9})
    assert deps.usage.report(big.id, "cost") == second


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32), documents=st.integers(0, 20))
def test_the_refreshs_report_is_the_inline_one(seed: int, documents: int) -> None:
    """Over random documents (live, deleted, moved before their entries were carried, entries written twice,
    attempts with and without their workflow entry) and own work: the task's stored report is what a request
    computes inline on the same entries and rows."""
    deps = memory_deps()
    tenant, _ = create_tenant_with_key(deps, "acme")
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="kb"))
    other = create_kb(deps, tenant.id, CreateKnowledgeBase(name="other"))
    populate(deps, kb, other, random.Random(seed), documents)
    before = copy.deepcopy(deps.usage._rows)  # type: ignore[attr-defined]
    inline = {"cost": kb_cost(deps, tenant.id, kb.id), "stats": kb_stats(deps, tenant.id, kb.id)}
    assert all(r["fresh"] for r in inline.values())
    for kind in ("cost", "stats"):
        deps.usage._rows = copy.deepcopy(before)  # type: ignore[attr-defined]
        refresh_report(deps, refresh_task(kb, kind))  # the task a GET past the bound would write
        stored = deps.usage.report(kb.id, kind)
        assert stored is not None
        assert dict(stored.body) == without_meta(inline[kind]), kind


def refresh_task(kb: KnowledgeBase, kind: str) -> Task:
    return Task(
        id=report_task_id(kb.id, kind, 0),
        tenant_id=kb.tenant_id,
        kind=TaskKind.KB_REPORT,
        kb_id=kb.id,
        items=[kb.id],
        params={"report": kind, "generation": 0},
    )


def test_the_in_memory_report_store_keeps_the_contract(deps: Services) -> None:
    check_report_store(deps.usage)
    check_kb_pages(deps.usage)


def test_a_refresh_whose_send_was_lost_is_sent_again_by_housekeeping(
    deps: Services, big: KnowledgeBase
) -> None:
    from chalicelib.stages import housekeeping

    queue: Any = deps.queue
    queue.make_unavailable("lifecycle")
    pending = kb_stats(deps, big.tenant_id, big.id)  # answers all the same: the task is written
    queue.make_unavailable("lifecycle", False)
    assert pending["code"] == REPORT_PENDING and lifecycle_messages(deps) == 0
    assert kb_stats(deps, big.tenant_id, big.id)["task_id"] == pending["task_id"]  # still the one task
    assert housekeeping.sweep(deps, datetime.now(UTC) + timedelta(hours=3)).tasks_resent == [
        pending["task_id"]
    ]
    drain(deps, ("lifecycle",))
    stored = kb_stats(deps, big.tenant_id, big.id)
    assert stored["fresh"] is False and stored["as_of"] and stored["documents"] > 0
