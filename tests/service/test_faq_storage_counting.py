"""FAQ entries' bytes on the tenant's storage quota, counted exactly once (in-memory adapters): an entry
saved before entries counted (`counted_bytes` 0) is charged its real growth, not its whole size, so a
tenant near its quota can still disable, re-tag or shorten it (through the API and an import merge), and
it counts from that write on; two deletes racing for one entry give its bytes back once; an import batch
that fails between counting and writing its rows counts them once when redelivered."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.faq import FaqEntry
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.faq import entries as faq
from chalicelib.faq.commands import FaqEntryRequest, FaqEntryUpdate

from .test_faq import entries_of, run_import


def used(deps: Services, kb: KnowledgeBase) -> int:
    tenant = deps.tenants.get(kb.tenant_id)
    assert tenant is not None
    return tenant.storage_used


def legacy(deps: Services, kb: KnowledgeBase, question: str, answer: str) -> FaqEntry:
    """An entry as saved before entries counted: `counted_bytes` 0, nothing on `storage_used`."""
    made = faq.create_entry(
        deps, kb.tenant_id, kb.id, FaqEntryRequest(standard_question=question, answers=[answer])
    )
    stored = deps.faq.get_entry(kb.id, made.id)
    assert stored is not None
    old = replace(stored, counted_bytes=0)
    deps.faq.put_entry(old, stored)
    deps.tenants.add_usage(kb.tenant_id, -made.counted_bytes)
    return old


def near_quota(deps: Services, kb: KnowledgeBase, left: int) -> None:
    deps.tenants.set_quotas(kb.tenant_id, used(deps, kb) + left, 0)


def test_a_legacy_entry_near_the_quota_can_be_disabled_retagged_and_shortened(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    old = legacy(deps, faq_kb, "old question", "a" * 200)
    near_quota(deps, faq_kb, 10)
    before = used(deps, faq_kb)
    update = lambda **change: faq.update_entry(  # noqa: E731
        deps, faq_kb.tenant_id, faq_kb.id, old.id, FaqEntryUpdate(**change)
    )
    disabled = update(is_enabled=False)
    assert disabled.is_enabled is False
    size = old.content_bytes()
    assert used(deps, faq_kb) == before + size  # counted from its first write on
    stored = deps.faq.get_entry(faq_kb.id, old.id)
    assert stored is not None and stored.counted_bytes == size
    update(tags=["kept"])
    update(answers=["a" * 100])
    assert used(deps, faq_kb) == before + size - 100
    faq.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, old.id)
    assert used(deps, faq_kb) == before  # it gives back what it counts


def test_a_legacy_entry_still_cannot_grow_past_the_quota(deps: Services, faq_kb: KnowledgeBase) -> None:
    from chalicelib.domain.errors import AppError

    old = legacy(deps, faq_kb, "old question", "a" * 200)
    near_quota(deps, faq_kb, 10)
    before = used(deps, faq_kb)
    with pytest.raises(AppError) as raised:
        faq.update_entry(deps, faq_kb.tenant_id, faq_kb.id, old.id, FaqEntryUpdate(answers=["a" * 211]))
    assert raised.value.code == "storage_quota_exceeded" and used(deps, faq_kb) == before
    stored = deps.faq.get_entry(faq_kb.id, old.id)
    assert stored is not None and stored.counted_bytes == 0 and stored.answers == ["a" * 200]


@pytest.mark.parametrize("mode", ["append", "replace"])
def test_an_import_merges_into_a_legacy_entry_near_the_quota(
    deps: Services, faq_kb: KnowledgeBase, mode: str
) -> None:
    old = legacy(deps, faq_kb, "old question", "a" * 200)
    near_quota(deps, faq_kb, 10)
    before = used(deps, faq_kb)
    row: dict[str, Any] = {"standard_question": "old question", "answers": ["a" * 200], "tags": ["new tag"]}
    view = run_import(deps, faq_kb, [row], mode=mode)
    assert (view["progress"]["merged"], view["progress"]["failed"]) == (1, 0), view["progress"]
    merged = entries_of(deps, faq_kb)["old question"]
    assert merged.tags == ["new tag"] and merged.counted_bytes == old.content_bytes()
    assert used(deps, faq_kb) == before + old.content_bytes()


def test_two_deletes_racing_for_an_entry_give_its_bytes_back_once(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    made = faq.create_entry(
        deps, faq_kb.tenant_id, faq_kb.id, FaqEntryRequest(standard_question="q", answers=["a" * 500])
    )
    before = used(deps, faq_kb)
    real = deps.faq.delete_entries
    calls = {"n": 0}

    def racing(kb_id: str, ids: Any) -> list[FaqEntry]:
        calls["n"] += 1
        if calls["n"] == 1:  # a second DELETE read the row too, and deletes it now
            faq.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, made.id)
        return real(kb_id, ids)

    deps.faq.delete_entries = racing  # type: ignore[method-assign]
    faq.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, made.id)
    assert used(deps, faq_kb) == before - made.counted_bytes == 0


def test_a_delete_racing_a_kb_purge_gives_the_bytes_back_once(deps: Services, faq_kb: KnowledgeBase) -> None:
    made = faq.create_entry(
        deps, faq_kb.tenant_id, faq_kb.id, FaqEntryRequest(standard_question="q", answers=["a" * 500])
    )
    real = deps.faq.delete_entries
    calls = {"n": 0}

    def racing(kb_id: str, ids: Any) -> list[FaqEntry]:
        calls["n"] += 1
        if calls["n"] == 1:  # the knowledge base's purge read the page too, and deletes it now
            real(kb_id, ids)
            deps.tenants.add_usage(faq_kb.tenant_id, -made.counted_bytes)
        return real(kb_id, ids)

    deps.faq.delete_entries = racing  # type: ignore[method-assign]
    assert faq.purge_kb(deps, faq_kb.id) == 1
    assert used(deps, faq_kb) == 0


def test_an_import_batch_that_fails_before_its_rows_are_written_counts_them_once(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    real = deps.faq.put_entries
    calls = {"n": 0}

    def throttled_once(entries: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("the table throttled the batch write")
        real(entries)

    deps.faq.put_entries = throttled_once  # type: ignore[method-assign]
    rows = [{"standard_question": f"q{i}", "answers": ["a" * 28]} for i in range(3)]  # 30 bytes each
    view = run_import(deps, faq_kb, rows)
    assert calls["n"] == 2 and view["progress"]["added"] == 3, view["progress"]
    assert used(deps, faq_kb) == 90
    assert sum(e.counted_bytes for e in entries_of(deps, faq_kb).values()) == 90


def test_a_batch_redelivered_after_its_rows_were_written_unindexed_counts_them_once(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    """A delivery that wrote its rows and died before indexing them: the redelivery purges them (they
    counted nothing) and counts what it writes."""
    engine = deps.engine(faq_kb.retrieval_engine)
    real = engine.batch_index
    calls = {"n": 0}

    def dies_once(space: Any, items: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("the worker died")
        real(space, items)

    engine.batch_index = dies_once  # type: ignore[method-assign]
    rows = [{"standard_question": f"q{i}", "answers": ["a" * 28]} for i in range(3)]
    view = run_import(deps, faq_kb, rows)
    assert view["progress"]["added"] == 3 and view["progress"].get("purged") == 3, view["progress"]
    assert used(deps, faq_kb) == 90


def test_a_clone_that_deletes_a_target_entry_gives_its_bytes_back(
    deps: Services, tenant: Tenant, faq_kb: KnowledgeBase
) -> None:
    from chalicelib.commands import CreateKnowledgeBase
    from chalicelib.operations.knowledge_bases import create_kb

    from .test_faq_import_reservations import clone_into

    source = create_kb(deps, tenant.id, CreateKnowledgeBase(name="source", type="faq"))
    faq.create_entry(
        deps, tenant.id, faq_kb.id, FaqEntryRequest(standard_question="Only here?", answers=["Yes."])
    )
    assert used(deps, faq_kb) > 0

    clone_into(deps, source, faq_kb)  # the target takes the source's entries: its own one goes

    assert entries_of(deps, faq_kb) == {}
    assert used(deps, faq_kb) == 0  # was the deleted entry's bytes, counted for ever
