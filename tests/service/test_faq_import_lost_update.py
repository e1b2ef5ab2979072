"""An FAQ import never writes over an entry changed through the API while it ran (the in-memory adapters).
It plans its merges from a read of the entries and writes them later: an entry updated between the plan
and its batch is merged again as it is now; one updated while the batch embedded keeps the update and the
row fails (`conflict`); a new entry updated between its two writes keeps the update."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.faq import FaqEntry
from chalicelib.domain.types import KnowledgeBase
from chalicelib.faq import entries
from chalicelib.faq.commands import FaqEntryRequest, FaqEntryUpdate

from .test_faq import entries_of, entry, index_count, run_import
from .test_faq_import_reservations import holders


def hours(deps: Services, kb: KnowledgeBase) -> FaqEntry:
    request = FaqEntryRequest(standard_question="Opening hours", answers=["9 to 5"])
    return entries.create_entry(deps, kb.tenant_id, kb.id, request)


def api_update(deps: Services, kb: KnowledgeBase, entry_id: str, **changes: Any) -> None:
    entries.update_entry(deps, kb.tenant_id, kb.id, entry_id, FaqEntryUpdate(**changes))


def once(monkeypatch: pytest.MonkeyPatch, owner: Any, name: str, meanwhile: Callable[[], object]) -> None:
    """`meanwhile` runs once, right after the first call of `owner.name` returns."""
    real = getattr(owner, name)
    done: list[bool] = []

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if not done:
            done.append(True)
            meanwhile()
        return result

    monkeypatch.setattr(owner, name, wrapped)


ROW = entry("Opening hours", "8 to 6", similar_questions=["what time do you open"])


def test_an_entry_updated_after_the_plan_is_merged_as_it_is_now(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.faq import importing

    existing = hours(deps, faq_kb)
    edit = {"answers": ["9 to 5", "Saturdays 10 to 2"], "similar_questions": ["when are you open"]}
    once(monkeypatch, importing, "_plan", lambda: api_update(deps, faq_kb, existing.id, **edit))

    view = run_import(deps, faq_kb, [ROW])

    assert view["status"] == "completed" and view["progress"]["merged"] == 1
    stored = entries_of(deps, faq_kb)["Opening hours"]
    assert stored.id == existing.id
    assert stored.answers == ["9 to 5", "Saturdays 10 to 2", "8 to 6"]  # the API's answer kept
    assert stored.similar_questions == ["when are you open", "what time do you open"]
    assert index_count(deps, faq_kb, existing.id) == 3  # each question indexed once, none left behind
    assert holders(deps, faq_kb, "when are you open", "what time do you open") == {
        "when are you open": (existing.id, True),
        "what time do you open": (existing.id, True),
    }


def test_in_a_replace_an_entry_whose_content_changed_after_the_plan_keeps_the_change(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row kept the entry (same content) to give it the file's tags; the API changed its answers since:
    the row no longer matches it and fails, the answers stay."""
    from chalicelib.faq import importing

    existing = hours(deps, faq_kb)
    once(monkeypatch, importing, "_plan", lambda: api_update(deps, faq_kb, existing.id, answers=["24/7"]))

    view = run_import(deps, faq_kb, [entry("Opening hours", "9 to 5", tags=["info"])], mode="replace")

    stored = entries_of(deps, faq_kb)["Opening hours"]
    assert stored.id == existing.id and stored.answers == ["24/7"]
    assert view["progress"]["failed"] == 1 and view["progress"]["failures"][0]["category"] == "conflict"


def test_an_entry_updated_while_the_batch_embedded_keeps_the_update_and_the_row_fails(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.faq import importing

    existing = hours(deps, faq_kb)
    edit = {"answers": ["9 to 5", "Saturdays 10 to 2"]}
    once(monkeypatch, importing, "hold_questions", lambda: api_update(deps, faq_kb, existing.id, **edit))

    view = run_import(deps, faq_kb, [ROW])

    stored = entries_of(deps, faq_kb)["Opening hours"]
    assert stored.answers == ["9 to 5", "Saturdays 10 to 2"] and stored.similar_questions == []
    progress = view["progress"]
    assert (progress["merged"], progress["failed"]) == (0, 1)
    assert progress["failures"][0]["category"] == "conflict"
    assert index_count(deps, faq_kb, existing.id) == 1  # the row's question written for the merge went again
    assert holders(deps, faq_kb, "what time do you open") == {}


def test_a_new_entry_updated_between_its_two_writes_keeps_the_update(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    def update_the_new_entry() -> None:
        (new,) = entries.all_entries(deps, faq_kb.id)
        assert not new.indexed  # written, its index entries not yet
        api_update(deps, faq_kb, new.id, answers=["closed on Sundays"])

    once(monkeypatch, deps.faq, "put_entries", update_the_new_entry)

    view = run_import(deps, faq_kb, [entry("Opening hours", "8 to 6")])

    assert view["progress"]["added"] == 1
    stored = entries_of(deps, faq_kb)["Opening hours"]
    assert stored.answers == ["closed on Sundays"] and stored.indexed
