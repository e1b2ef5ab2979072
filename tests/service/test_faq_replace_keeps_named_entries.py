"""A replace import never deletes the entry a row that failed was sent for (in-memory adapters): the entry
with that row's standard question (as the import normalises it) stays as it was; a file with no valid row
deletes nothing and fails with `replace_without_valid_rows`; a dry run reports the same plan."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase

from .test_faq import entries_of, entry, index_count, run_import
from .test_faq_storage_counting import near_quota

LONG_TAG = "t" * 65  # over the 64 characters a tag holds: the row fails `invalid`


def _seed(deps: Services, kb: KnowledgeBase) -> dict[str, Any]:
    run_import(
        deps,
        kb,
        [
            entry("Opening hours", "9 to 5", similar_questions=["when are you open"], tags=["hours"]),
            entry("Returns", "30 days"),
            entry("Parking", "behind the building"),
        ],
    )
    return {q: (e.id, e.updated_at, e.answers, e.tags) for q, e in entries_of(deps, kb).items()}


@pytest.mark.parametrize("dry_run", [False, True])
def test_an_entry_named_by_a_failed_row_is_kept_as_it_was(
    deps: Services, faq_kb: KnowledgeBase, dry_run: bool
) -> None:
    before = _seed(deps, faq_kb)
    rows = [
        # the same standard question spelled otherwise (case, edge punctuation), a tag over the limit
        entry("OPENING HOURS?", "8 to 6", tags=[LONG_TAG]),
        entry("Returns", "30 days"),  # unchanged: kept by its content
        entry("Delivery", "two days"),  # new
    ]  # "Parking" is named by no row: a replace deletes it
    view = run_import(deps, faq_kb, rows, mode="replace", dry_run=dry_run)
    progress = view["progress"]
    assert (progress["failed"], progress["skipped"], progress["added"]) == (1, 1, 1)
    assert progress["deleted"] == 1 and progress["kept_for_failed_rows"] == 1
    after = entries_of(deps, faq_kb)
    if dry_run:
        assert {q: (e.id, e.updated_at, e.answers, e.tags) for q, e in after.items()} == before
        return
    assert view["status"] == "partial"
    assert set(after) == {"Opening hours", "Returns", "Delivery"}
    hours = after["Opening hours"]
    assert (hours.id, hours.updated_at, hours.answers, hours.tags) == before["Opening hours"]  # not updated
    assert index_count(deps, faq_kb, hours.id) == 2  # its vectors stay too
    assert deps.faq.tags(faq_kb.id) == ["hours"]  # a kept entry's tag is a used one


def test_a_valid_row_naming_the_same_entry_still_replaces_it(deps: Services, faq_kb: KnowledgeBase) -> None:
    before = _seed(deps, faq_kb)
    rows = [
        entry("Opening hours", "8 to 6", tags=[LONG_TAG]),  # fails
        entry("opening hours", "8 to 6"),  # names the same entry and is valid: the file's word
        entry("Returns", "30 days"),
        entry("Parking", "behind the building"),
    ]
    view = run_import(deps, faq_kb, rows, mode="replace")
    assert view["progress"].get("kept_for_failed_rows", 0) == 0 and view["progress"]["deleted"] == 1
    hours = entries_of(deps, faq_kb)["opening hours"]
    assert hours.answers == ["8 to 6"] and hours.id != before["Opening hours"][0]


@pytest.mark.parametrize("dry_run", [False, True])
@pytest.mark.parametrize("body", ["header only", "every row fails"])
def test_a_replace_with_no_valid_row_deletes_nothing_and_fails(
    deps: Services, faq_kb: KnowledgeBase, body: str, dry_run: bool
) -> None:
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import last_result, start_import

    from .test_faq import BASE_URL, _upload, download, drain, task_view

    before = _seed(deps, faq_kb)
    text = "category,question,answers\n"
    if body == "every row fails":  # a tag over the limit, no question, no answer
        text += f"{LONG_TAG},Opening hours,8 to 6\n,,no question\n,Brand new,\n"
    key = _upload(deps, faq_kb, "faq.csv", text.encode())
    request = FaqImportRequest(object_key=key, mode="replace", dry_run=dry_run)
    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, request)
    drain(deps)
    view = task_view(deps, task.id)
    progress = view["progress"]
    assert view["status"] == "failed", progress
    assert progress["error_code"] == "replace_without_valid_rows"
    assert "no valid row" in progress["error"] and progress["success"] == 0
    assert progress.get("deleted", 0) == 0
    after = entries_of(deps, faq_kb)
    assert {q: (e.id, e.updated_at, e.answers, e.tags) for q, e in after.items()} == before
    assert all(index_count(deps, faq_kb, e.id) > 0 for e in after.values())
    assert deps.faq.tags(faq_kb.id) == ["hours"] and deps.faq.get_lease(faq_kb.id) is None
    if body == "every row fails":
        assert progress["failed"] == 3
        assert b"reason," in download(deps, progress["failed_rows_download"])
    if not dry_run:
        assert last_result(deps, faq_kb.tenant_id, faq_kb.id, BASE_URL)["error_code"] == (
            "replace_without_valid_rows"
        )


def test_a_row_over_the_quota_keeps_the_entry_it_was_sent_for(deps: Services, faq_kb: KnowledgeBase) -> None:
    before = _seed(deps, faq_kb)
    near_quota(deps, faq_kb, 50)  # the new answer does not fit, even with the old entry's bytes back
    rows = [
        entry("Opening hours", "a much longer answer " * 20),
        entry("Returns", "30 days"),
        entry("Parking", "behind the building"),
    ]
    view = run_import(deps, faq_kb, rows, mode="replace")
    progress = view["progress"]
    assert progress["failed"] == 1 and progress["failures"][0]["category"] == "quota"
    assert progress.get("deleted", 0) == 0 and progress["kept_for_failed_rows"] == 1
    hours = entries_of(deps, faq_kb)["Opening hours"]
    assert (hours.id, hours.updated_at, hours.answers, hours.tags) == before["Opening hours"]
