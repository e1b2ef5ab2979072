"""An FAQ clone racing writers of its target.

A delete of the target: a clone takes no import lease, so the delete does not wait for it; its batches read
the target before they write, and a copy batch again after its last write, and take back what they wrote
into a target purged meanwhile. Before, the copies were written under a knowledge base that no longer
existed, counted on the tenant's storage for good, and the task said `completed`.

An API write of a kept entry after the plan: the sync writes only over the row as the plan read it. Before,
a blind put of the plan's read lost an edit (its bytes stayed counted), brought back a deleted entry (its
bytes given back already, no index entries), and a state change left the index out of step with the row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import chalicelib.faq.clone as faq_clone
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.faq import entries
from chalicelib.faq.commands import FaqEntryUpdate

from .faq_support import faq_kb_named
from .test_faq import index_count, search
from .test_faq_import_reservations import clone_into, create, holders
from .test_faq_storage_counting import used


def _delete_kb(deps: Services, kb: KnowledgeBase) -> None:
    """The knowledge base's DELETE and its task, run to the end (another Lambda, while the clone runs)."""
    from chalicelib.operations.knowledge_changes import delete_kb
    from chalicelib.stages import lifecycle

    task = delete_kb(deps, kb.tenant_id, kb.id)
    lifecycle.run(deps, task.id)
    assert deps.kbs.get(kb.id) is None


def _after_the_plan(monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], object]) -> None:
    real_plan = faq_clone.plan_faq_clone
    ran: list[bool] = []

    def plan_then(*args: Any, **kwargs: Any) -> Any:
        plan = real_plan(*args, **kwargs)
        if not ran:
            ran.append(True)
            meanwhile()
        return plan

    monkeypatch.setattr(faq_clone, "plan_faq_clone", plan_then)


def _rows_count(deps: Services, *kbs: KnowledgeBase) -> int:
    return sum(e.counted_bytes for kb in kbs for e in entries.all_entries(deps, kb.id))


def _nothing_left(deps: Services, target: KnowledgeBase, *questions: str) -> None:
    assert list(entries.all_entries(deps, target.id)) == []
    assert deps.faq.tags(target.id) == []
    assert holders(deps, target, *questions) == {}
    assert index_count(deps, target) == 0


def test_a_target_deleted_after_the_plan_gets_no_copies(
    deps: Services, tenant: Tenant, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(3):
        create(deps, faq_kb, f"How do I reset router {i}?", f"Hold button {i}.", tags=["net"])
    target = faq_kb_named(deps, tenant, "mirror")
    before = used(deps, faq_kb)
    _after_the_plan(monkeypatch, lambda: _delete_kb(deps, target))
    view = clone_into(deps, faq_kb, target)
    assert view["status"] == "partial"
    assert faq_clone.TARGET_CLOSED in " ".join(view["errors"].values())
    _nothing_left(deps, target, "How do I reset router 0?")
    assert used(deps, faq_kb) == before


def test_copies_written_after_the_targets_purge_are_taken_back(
    deps: Services, tenant: Tenant, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The delete begins and purges between the batch's check and its writes: the batch's later read finds
    the target gone and removes its rows (giving back what they counted), index entries, reservations, tags."""
    create(
        deps,
        faq_kb,
        "Where is the office?",
        "On the quay.",
        similar_questions=["office address"],
        tags=["hq"],
    )
    create(deps, faq_kb, "Is there parking?", "Behind the harbour.", tags=["car"])
    target = faq_kb_named(deps, tenant, "mirror")
    before = used(deps, faq_kb)
    real_take = faq_clone.take_storage
    deleted: list[bool] = []

    def delete_then_take(*args: Any, **kwargs: Any) -> None:
        if not deleted:
            deleted.append(True)
            _delete_kb(deps, target)
        real_take(*args, **kwargs)

    monkeypatch.setattr(faq_clone, "take_storage", delete_then_take)
    view = clone_into(deps, faq_kb, target)
    assert deleted
    assert view["status"] == "partial"
    assert faq_clone.TARGET_CLOSED in " ".join(view["errors"].values())
    _nothing_left(deps, target, "Where is the office?", "office address", "Is there parking?")
    assert used(deps, faq_kb) == before  # the copies' bytes given back, once


def test_a_sync_keeps_an_edit_made_after_the_plan(
    deps: Services, tenant: Tenant, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = faq_kb_named(deps, tenant, "mirror")
    create(deps, faq_kb, "Where is the office?", "Main street 1.", tags=["hq"])
    mine = create(deps, target, "Where is the office?", "Main street 1.")
    edit = FaqEntryUpdate(
        answers=["We moved: Harbour road 42, second floor."], similar_questions=["office address"]
    )
    _after_the_plan(monkeypatch, lambda: entries.update_entry(deps, tenant.id, target.id, mine.id, edit))
    view = clone_into(deps, faq_kb, target)
    row = deps.faq.get_entry(target.id, mine.id)
    assert row is not None
    assert (row.answers, row.similar_questions) == (edit.answers, edit.similar_questions)
    assert row.tags == []  # left as the edit saved it: it is not the source's content any more
    assert view["status"] == "partial"
    assert "edited" in " ".join(view["errors"].values())
    assert used(deps, target) == _rows_count(deps, faq_kb, target)
    assert [hit["id"] for hit in search(deps, target, "office address")] == [mine.id]


def test_a_sync_leaves_an_entry_deleted_after_the_plan_deleted(
    deps: Services, tenant: Tenant, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = faq_kb_named(deps, tenant, "mirror")
    create(deps, faq_kb, "Where is the office?", "Main street 1.", tags=["hq"])
    mine = create(deps, target, "Where is the office?", "Main street 1.")
    _after_the_plan(monkeypatch, lambda: entries.delete_entry(deps, tenant.id, target.id, mine.id))
    view = clone_into(deps, faq_kb, target)
    assert deps.faq.get_entry(target.id, mine.id) is None
    assert "deleted" in " ".join(view["errors"].values())
    assert used(deps, target) == _rows_count(deps, faq_kb, target)
    assert index_count(deps, target, mine.id) == 0


def test_a_sync_writes_over_a_state_change_made_after_the_plan(
    deps: Services, tenant: Tenant, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same content, another state (disabled through the API): synced again over the row as it is now,
    index entries enabled with it (a blind put left the row enabled and its index entries disabled)."""
    target = faq_kb_named(deps, tenant, "mirror")
    create(deps, faq_kb, "Where is the office?", "Main street 1.", tags=["hq"])
    mine = create(deps, target, "Where is the office?", "Main street 1.")
    off = FaqEntryUpdate(is_enabled=False)
    _after_the_plan(monkeypatch, lambda: entries.update_entry(deps, tenant.id, target.id, mine.id, off))
    view = clone_into(deps, faq_kb, target)
    assert view["status"] == "completed", view["errors"]
    row = deps.faq.get_entry(target.id, mine.id)
    assert row is not None and (row.is_enabled, row.tags) == (True, ["hq"])
    assert [hit["id"] for hit in search(deps, target, "Where is the office?")] == [mine.id]
    assert used(deps, target) == _rows_count(deps, faq_kb, target)
