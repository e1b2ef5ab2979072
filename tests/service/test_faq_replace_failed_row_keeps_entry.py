"""A replacing row that fails while the import runs (another writer took the quota the plan saw) keeps the
entry it was sent for, as the plan keeps one for a row that fails at planning: only a row BEFORE the failed
one may take that entry's questions (validation.plan_replace). Before, the entries the batch's rows replace
were taken over for the whole batch, so a LATER row of the same batch that had one of the entry's similar
questions took it, and the entry was deleted for it: nothing answered its question any more. Now the failed
row gives its entry back its questions before the rows after it claim theirs: they lose them (`partial`)."""

from __future__ import annotations

from typing import Any

from chalicelib.bootstrap import Services
from chalicelib.domain.faq import content_bytes
from chalicelib.domain.types import KnowledgeBase
from chalicelib.faq.reservations import question_key

from .test_faq import entries_of, entry, run_import
from .test_faq_storage_counting import near_quota

NEW_ANSWER = "8 to 6, and 10 to 4 on Sundays"


def test_a_failed_replacement_keeps_its_entry_though_a_later_row_has_one_of_its_questions(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    run_import(deps, faq_kb, [entry("Opening hours", "9 to 5", similar_questions=["when are you open"])])
    old = entries_of(deps, faq_kb)["Opening hours"]
    rows = [
        entry("Opening hours", NEW_ANSWER),  # replaces it; fails for quota when written
        entry("Hours", "see the door", similar_questions=["when are you open"]),  # after it, same batch
    ]
    tenants: Any = deps.tenants
    real = tenants.add_usage_within
    # what the replacement adds to the old entry's count, moved onto it (replacing.move_count)
    growth = content_bytes("Opening hours", [], [], [NEW_ANSWER]) - old.counted_bytes
    assert growth > 0

    def refused(tenant_id: str, delta: int, grows_by: int, quota: int) -> bool:
        # another import of the tenant took the room the plan saw: the replacement no longer fits
        return False if delta == growth else real(tenant_id, delta, grows_by, quota)

    tenants.add_usage_within = refused
    near_quota(deps, faq_kb, 10_000)

    view = run_import(deps, faq_kb, rows, mode="replace")

    progress = view["progress"]
    assert [(f["question"], f["category"]) for f in progress["failures"]] == [("Opening hours", "quota")]
    assert (progress["deleted"], progress["kept_for_failed_rows"]) == (0, 1)
    assert [p["question"] for p in progress["partials"]] == ["Hours"]  # its similar question is the entry's
    stored = entries_of(deps, faq_kb)
    assert set(stored) == {"Opening hours", "Hours"}
    assert stored["Opening hours"].id == old.id and stored["Opening hours"].answers == ["9 to 5"]
    assert stored["Opening hours"].counted_bytes == old.counted_bytes  # the count moved back onto it
    assert stored["Hours"].similar_questions == []
    keys = [question_key("Opening hours"), question_key("when are you open")]
    holders = deps.faq.question_holders(faq_kb.id, keys)
    assert {k: (h.entry_id, h.expires_at) for k, h in holders.items()} == {k: (old.id, None) for k in keys}
