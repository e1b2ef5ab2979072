"""Every writer of stored bytes stays within the tenant's storage quota, each checked in its own add (one
conditional write, services/quotas.take_storage), not against a `storage_left` read earlier: two FAQ imports
(one per FAQ knowledge base, each planned against the same room), an FAQ clone's copies, two entry creates
racing for the last bytes; and written text is checked at the door as a file of the same bytes is."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, ManualRequest
from chalicelib.domain.errors import AppError, Forbidden
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.faq import entries as faq
from chalicelib.faq import importing
from chalicelib.faq.commands import FaqEntryRequest
from chalicelib.operations.knowledge_bases import create_kb

from .conftest import upload
from .test_faq import entry, run_import
from .test_faq_import_reservations import clone_into


def used(deps: Services, tenant_id: str) -> int:
    tenant = deps.tenants.get(tenant_id)
    assert tenant is not None
    return tenant.storage_used


def stored_entry_bytes(deps: Services, *kbs: KnowledgeBase) -> int:
    return sum(e.content_bytes() for kb in kbs for e in faq.all_entries(deps, kb.id))


def counted_entry_bytes(deps: Services, *kbs: KnowledgeBase) -> int:
    return sum(e.counted_bytes for kb in kbs for e in faq.all_entries(deps, kb.id))


def new_faq_kb(deps: Services, tenant: Tenant, name: str) -> KnowledgeBase:
    return create_kb(deps, tenant.id, CreateKnowledgeBase(name=name, type="faq"))


def test_two_imports_planned_against_the_same_room_do_not_both_fill_the_quota(
    deps: Services, tenant: Tenant, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Import A plans, then import B (another FAQ knowledge base: its own lease) runs to the end before A
    writes: A's rows that no longer fit fail (`quota`) and the tenant never stores more than its quota."""
    other = new_faq_kb(deps, tenant, "faq2")
    rows_a = [entry(f"A question {i}?", "x" * 400) for i in range(10)]
    rows_b = [entry(f"B question {i}?", "y" * 400) for i in range(10)]
    probe = new_faq_kb(deps, tenant, "probe")
    run_import(deps, probe, rows_a)
    one_import = used(deps, tenant.id)
    for made in list(faq.all_entries(deps, probe.id)):
        faq.delete_entry(deps, tenant.id, probe.id, made.id)
    assert used(deps, tenant.id) == 0
    quota = one_import + 100  # room for one import, not two
    deps.tenants.set_quotas(tenant.id, quota, 0)
    real_left = importing.storage_left
    views: dict[str, Any] = {}

    def left_then_the_other_import(d: Any, tenant_id: str) -> int | None:
        room = real_left(d, tenant_id)
        if not views:  # A has read the room; B runs through before A writes a row
            views["b"] = {}
            views["b"] = run_import(deps, other, rows_b)
        return room

    monkeypatch.setattr(importing, "storage_left", left_then_the_other_import)
    view_a = run_import(deps, faq_kb, rows_a)
    assert views["b"]["progress"]["added"] == 10
    assert used(deps, tenant.id) <= quota
    assert view_a["progress"]["added"] == 0 and view_a["progress"]["failed"] == 10
    reasons = {f["category"] for f in view_a["progress"]["failures"]}
    assert reasons == {"quota"}
    assert "storage quota" in view_a["progress"]["failures"][0]["reason"]
    # what is counted is what the rows hold, and A's failed rows left no entry and no question behind
    assert (
        used(deps, tenant.id) == counted_entry_bytes(deps, faq_kb, other) == stored_entry_bytes(deps, other)
    )
    assert not list(faq.all_entries(deps, faq_kb.id))
    deps.tenants.set_quotas(tenant.id, 0, 0)
    again = faq.create_entry(
        deps, tenant.id, faq_kb.id, FaqEntryRequest(standard_question="A question 0?", answers=["z"])
    )
    assert again.standard_question == "A question 0?"  # the failed row's question was given back


def test_an_import_merge_past_the_quota_taken_since_the_plan_fails_and_counts_nothing(
    deps: Services, tenant: Tenant, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = faq.create_entry(
        deps, tenant.id, faq_kb.id, FaqEntryRequest(standard_question="Hours?", answers=["9-5"])
    )
    other = new_faq_kb(deps, tenant, "other")
    deps.tenants.set_quotas(tenant.id, used(deps, tenant.id) + 500, 0)
    real_left = importing.storage_left

    def left_then_taken(d: Any, tenant_id: str) -> int | None:
        room = real_left(d, tenant_id)
        faq.create_entry(
            deps, tenant.id, other.id, FaqEntryRequest(standard_question="Other?", answers=["o" * 450])
        )
        return room

    monkeypatch.setattr(importing, "storage_left", left_then_taken)
    view = run_import(deps, faq_kb, [entry("Hours?", "a much longer answer " * 20)])
    assert view["progress"]["failed"] == 1 and view["progress"]["failures"][0]["category"] == "quota"
    stored = deps.faq.get_entry(faq_kb.id, base.id)
    assert stored is not None and stored.answers == ["9-5"]
    assert used(deps, tenant.id) == counted_entry_bytes(deps, faq_kb, other)
    assert used(deps, tenant.id) <= deps.tenants.get(tenant.id).storage_quota  # type: ignore[union-attr]


def test_an_faq_clone_counts_its_copies_within_the_quota(
    deps: Services, tenant: Tenant, faq_kb: KnowledgeBase
) -> None:
    for i in range(5):
        faq.create_entry(
            deps, tenant.id, faq_kb.id, FaqEntryRequest(standard_question=f"q{i}?", answers=["a" * 1000])
        )
    one_copy = used(deps, tenant.id)
    deps.tenants.set_quotas(tenant.id, one_copy * 2 + 10, 0)  # room for the source and one whole copy
    first, second = new_faq_kb(deps, tenant, "copy1"), new_faq_kb(deps, tenant, "copy2")
    view = clone_into(deps, faq_kb, first)
    assert view["status"] == "completed"
    assert used(deps, tenant.id) == 2 * one_copy == counted_entry_bytes(deps, faq_kb, first)
    refused = clone_into(deps, faq_kb, second)
    assert refused["status"] != "completed"
    assert "storage_quota_exceeded" in " ".join(str(v) for v in refused["errors"].values())
    assert not list(faq.all_entries(deps, second.id))
    assert used(deps, tenant.id) == stored_entry_bytes(deps, faq_kb, first, second) <= one_copy * 2 + 10
    for copy in list(faq.all_entries(deps, first.id)):  # a copy's delete gives back what it counted
        faq.delete_entry(deps, tenant.id, first.id, copy.id)
    assert used(deps, tenant.id) == one_copy


def test_a_create_that_read_a_stale_room_is_refused_by_the_add_itself(
    deps: Services, tenant: Tenant, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two creates racing for the last bytes: the second read the tenant before the first added (its read is
    stale), yet the quota holds, since the add checks it."""
    probe = faq.create_entry(
        deps, tenant.id, faq_kb.id, FaqEntryRequest(standard_question="q0?", answers=["a" * 600])
    )
    size = probe.counted_bytes  # every entry below is this size
    faq.delete_entry(deps, tenant.id, faq_kb.id, probe.id)
    quota = size + size // 2  # room for one entry, not two
    deps.tenants.set_quotas(tenant.id, quota, 0)
    stale = deps.tenants.get(tenant.id)  # what the racing request read: nothing used yet
    faq.create_entry(
        deps, tenant.id, faq_kb.id, FaqEntryRequest(standard_question="q1?", answers=["b" * 600])
    )
    monkeypatch.setattr(deps.tenants, "get", lambda _tenant_id: stale)
    with pytest.raises(Forbidden) as refused:
        faq.create_entry(
            deps, tenant.id, faq_kb.id, FaqEntryRequest(standard_question="q2?", answers=["c" * 600])
        )
    monkeypatch.undo()
    assert refused.value.code == "storage_quota_exceeded"
    assert used(deps, tenant.id) == size <= quota
    assert [e.standard_question for e in faq.all_entries(deps, faq_kb.id)] == ["q1?"]


def test_written_text_over_the_storage_quota_is_refused_as_the_same_file(
    deps: Services, kb: KnowledgeBase
) -> None:
    from chalicelib.operations.create import create_manual

    deps.tenants.set_quotas(kb.tenant_id, storage_quota=100, document_quota=0)
    text = "# Notes\n\n" + "word " * 100  # about 500 bytes: over the whole quota
    with pytest.raises(AppError) as as_file:
        upload(deps, kb, "notes.md", text.encode())
    for status in ("draft", "publish"):
        with pytest.raises(Forbidden) as as_text:
            create_manual(
                deps, kb.tenant_id, kb.id, ManualRequest(title="notes", content=text, status=status)
            )
        assert as_text.value.code == as_file.value.code == "storage_quota_exceeded"
    assert deps.knowledge.page_by_kb(kb.id, limit=10) == []
    deps.tenants.set_quotas(kb.tenant_id, storage_quota=1000, document_quota=0)
    made = create_manual(
        deps, kb.tenant_id, kb.id, ManualRequest(title="notes", content=text, status="draft")
    )
    assert made.file_size < 1000
