"""Replacing rows of one batch near the quota. The plan counts each replaced entry's bytes as free for the
row that replaces it, adding the rows up one after another (validation.plan_replace). The worker deletes
the old entries only once the batch is written, so it checks each new entry on what the batch adds so far:
its growth over its own old entry, less the old bytes of the rows counted before it in the batch. Before,
the second growing row of a batch was checked against a usage that still held the first one's old bytes,
and failed `quota` although the plan (and the dry run) said it fit; a redelivered batch counts the old bytes
of the rows an earlier delivery wrote too. A batch that really does not fit still fails the row that
overruns, and the quota holds once the batch is done."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase

from .test_faq import entries_of, entry, run_import
from .test_faq_storage_counting import near_quota, used

OLD = [entry("Alpha", "a" * 100), entry("Beta", "b" * 100)]
NEW = [entry("Alpha", "a" * 105), entry("Beta", "b" * 105)]  # each 5 bytes more than its old entry


def _quota(deps: Services, kb: KnowledgeBase) -> int:
    tenant = deps.tenants.get(kb.tenant_id)
    assert tenant is not None
    return tenant.storage_quota


def test_growing_replacements_of_one_batch_fit_as_the_plan_counted_them(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    run_import(deps, faq_kb, OLD)
    near_quota(deps, faq_kb, 10)  # room for both growths, not for a second copy of an old entry
    dry = run_import(deps, faq_kb, NEW, mode="replace", dry_run=True)
    assert dry["status"] == "completed", dry["progress"]

    view = run_import(deps, faq_kb, NEW, mode="replace")

    assert view["status"] == "completed", view["progress"].get("failures")
    assert (view["progress"]["added"], view["progress"]["deleted"]) == (2, 2)
    stored = entries_of(deps, faq_kb)
    assert [len(stored[q].answers[0]) for q in ("Alpha", "Beta")] == [105, 105]
    assert used(deps, faq_kb) == sum(e.counted_bytes for e in stored.values()) == _quota(deps, faq_kb)


def test_a_batch_the_room_left_does_not_hold_fails_the_row_that_overruns(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan saw room for both; another writer took 4 of its 10 bytes before the rows were written:
    "Alpha" (5 bytes more) still fits, "Beta" does not, and keeps its old entry."""
    from chalicelib.faq import importing

    run_import(deps, faq_kb, OLD)
    near_quota(deps, faq_kb, 10)
    real_plan = importing._plan

    def planned_then_taken(*args: Any) -> Any:
        plan = real_plan(*args)
        deps.tenants.add_usage(faq_kb.tenant_id, 4)  # another import of the tenant, meanwhile
        return plan

    monkeypatch.setattr(importing, "_plan", planned_then_taken)
    view = run_import(deps, faq_kb, NEW, mode="replace")

    progress = view["progress"]
    assert view["status"] == "partial", str(progress)
    assert [(f["question"], f["category"]) for f in progress["failures"]] == [("Beta", "quota")]
    assert (progress["added"], progress["deleted"], progress["kept_for_failed_rows"]) == (1, 1, 1)
    stored = entries_of(deps, faq_kb)
    assert (stored["Alpha"].answers, stored["Beta"].answers) == (["a" * 105], ["b" * 100])
    assert used(deps, faq_kb) == sum(e.counted_bytes for e in stored.values()) + 4 <= _quota(deps, faq_kb)


def test_a_redelivered_batch_counts_the_old_bytes_of_the_rows_it_wrote_before(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    """The worker died after "Alpha"'s replacement was written and indexed, before "Beta"'s was: the batch
    is redone, and "Beta" is checked in a usage that still counts the old "Alpha" (it goes with the batch)."""
    from .test_faq_replace_crash_points import _fail_once

    run_import(deps, faq_kb, OLD)
    near_quota(deps, faq_kb, 10)
    failed = _fail_once(
        deps, "put_entry", lambda entry, expected=None: entry.standard_question == "Beta" and entry.indexed
    )

    view = run_import(deps, faq_kb, NEW, mode="replace")

    assert failed and view["status"] == "completed", view["progress"].get("failures")
    stored = entries_of(deps, faq_kb)
    assert [len(stored[q].answers[0]) for q in ("Alpha", "Beta")] == [105, 105]
    assert used(deps, faq_kb) == sum(e.counted_bytes for e in stored.values()) == _quota(deps, faq_kb)
