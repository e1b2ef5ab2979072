"""FAQ entries under concurrent requests (the in-memory adapters): an update racing a delete or another
update, two requests adding one question, reservations left behind, tags no entry uses any more, and the
list cursor's shape."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from pydantic import ValidationError

from chalicelib.bootstrap import Services
from chalicelib.domain.errors import AppError, Conflict, NotFound
from chalicelib.domain.faq import FaqEntry
from chalicelib.domain.faq_normalise import normalise
from chalicelib.domain.types import KnowledgeBase
from chalicelib.faq import entries
from chalicelib.faq.commands import FaqEntryRequest, FaqEntryUpdate, FaqListQuery
from chalicelib.ports import IndexSpace


def create(deps: Services, kb: KnowledgeBase, question: str, **extra: Any) -> FaqEntry:
    request = FaqEntryRequest(standard_question=question, answers=[f"answer to {question}"], **extra)
    return entries.create_entry(deps, kb.tenant_id, kb.id, request)


def update(deps: Services, kb: KnowledgeBase, entry_id: str, **changes: Any) -> FaqEntry:
    return entries.update_entry(deps, kb.tenant_id, kb.id, entry_id, FaqEntryUpdate(**changes))


def index_count(deps: Services, kb: KnowledgeBase, entry_id: str) -> int:
    stored = deps.kbs.get(kb.id)
    assert stored is not None
    engine = deps.engine(stored.retrieval_engine)
    return int(engine.count(IndexSpace.of(deps.embedding_model(stored.embedding_model_id)), kb.id, entry_id))


def search_ids(deps: Services, kb: KnowledgeBase, text: str) -> list[str]:
    from chalicelib.commands import SearchRequest

    stored = deps.kbs.get(kb.id)
    assert stored is not None
    hits = entries.search(
        deps, stored, SearchRequest(query_text=text, match_count=5, retriever="keyword"), stored.tenant_id
    )
    return [h["entry_id"] for h in hits]


def once_before_index_write(monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], None]) -> None:
    """`meanwhile` runs once, when the next update has read its entry and is about to index it."""
    real_write = entries.FaqIndex.write
    done: list[bool] = []

    def write(self: entries.FaqIndex, items: Sequence[tuple[FaqEntry, Sequence[str]]]) -> None:
        if not done:
            done.append(True)
            meanwhile()
        real_write(self, items)

    monkeypatch.setattr(entries.FaqIndex, "write", write)


# ---------------------------------------------------------------- an update racing a delete or an update


def test_an_update_racing_a_delete_answers_404_and_brings_nothing_back(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = create(deps, faq_kb, "How do I pay?", similar_questions=["old way to pay"])
    once_before_index_write(
        monkeypatch, lambda: entries.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, entry.id)
    )
    with pytest.raises(NotFound) as raised:
        update(deps, faq_kb, entry.id, similar_questions=["new way to pay"])
    assert raised.value.code == "faq_entry_not_found"
    assert deps.faq.get_entry(faq_kb.id, entry.id) is None
    assert index_count(deps, faq_kb, entry.id) == 0  # the update took back the index entry it wrote
    monkeypatch.undo()
    again = create(deps, faq_kb, "How do I pay?", similar_questions=["new way to pay"])  # all freed
    assert again.indexed


def test_an_update_racing_another_update_answers_409_and_leaves_the_winners_index(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = create(deps, faq_kb, "Where is the office?", similar_questions=["office address"])
    winner: list[FaqEntry] = []
    once_before_index_write(
        monkeypatch,
        lambda: winner.append(update(deps, faq_kb, entry.id, similar_questions=["office location"])),
    )
    with pytest.raises(Conflict) as raised:
        update(deps, faq_kb, entry.id, similar_questions=["how to find the office"])
    assert raised.value.code == "faq_entry_changed"
    monkeypatch.undo()
    stored = deps.faq.get_entry(faq_kb.id, entry.id)
    assert stored is not None and stored.to_body() == winner[0].to_body()
    assert stored.similar_questions == ["office location"] and stored.indexed
    assert index_count(deps, faq_kb, entry.id) == 2  # the winner's two questions, nothing of the loser's
    assert search_ids(deps, faq_kb, "find") == []
    assert search_ids(deps, faq_kb, "location") == [entry.id]
    # the loser's question was released: another entry may take it
    assert create(deps, faq_kb, "how to find the office").indexed


def test_two_updates_of_one_entry_in_the_same_millisecond_still_conflict(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = create(deps, faq_kb, "Opening hours?")
    frozen = entry.updated_at
    monkeypatch.setattr(entries, "utcnow", lambda: frozen)
    once_before_index_write(monkeypatch, lambda: update(deps, faq_kb, entry.id, answers=["9-5"]))
    with pytest.raises(Conflict) as raised:
        update(deps, faq_kb, entry.id, answers=["8-6"])
    assert raised.value.code == "faq_entry_changed"
    stored = deps.faq.get_entry(faq_kb.id, entry.id)
    assert stored is not None and stored.answers == ["9-5"]


# ---------------------------------------------------------------- a question belongs to one entry


def _at_once(works: Sequence[Callable[[], Any]], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Runs the works in threads that all pass the uniqueness scan before any of them goes on."""
    barrier = threading.Barrier(len(works))
    real_check = entries._check

    def check_then_wait(deps_: Any, entry: FaqEntry) -> None:
        real_check(deps_, entry)
        with contextlib.suppress(threading.BrokenBarrierError):  # another one was refused before: go on
            barrier.wait(timeout=2)

    monkeypatch.setattr(entries, "_check", check_then_wait)
    results: list[Any] = [None] * len(works)

    def run(i: int) -> None:
        try:
            results[i] = works[i]()
        except AppError as error:
            results[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(works))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    monkeypatch.undo()
    return results


def test_two_concurrent_creates_cannot_share_a_question(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = _at_once(
        [lambda: create(deps, faq_kb, "Same question?"), lambda: create(deps, faq_kb, "same  QUESTION")],
        monkeypatch,
    )
    refused = [r for r in results if isinstance(r, AppError)]
    assert len(refused) == 1 and refused[0].code == "faq_question_conflict", results
    stored = list(entries.all_entries(deps, faq_kb.id))
    assert len(stored) == 1 and stored[0].indexed


def test_a_create_and_an_update_adding_the_same_question_at_once(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = create(deps, faq_kb, "Refunds")
    results = _at_once(
        [
            lambda: create(deps, faq_kb, "Can I get my money back?"),
            lambda: update(deps, faq_kb, first.id, similar_questions=["can i get my money back"]),
        ],
        monkeypatch,
    )
    refused = [r for r in results if isinstance(r, AppError)]
    assert len(refused) == 1 and refused[0].code == "faq_question_conflict", results
    wanted = normalise("can i get my money back")
    holders = [e for e in entries.all_entries(deps, faq_kb.id) if wanted in map(normalise, e.questions())]
    assert len(holders) == 1


def test_a_question_claimed_by_a_request_still_saving_is_refused(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    key = entries.question_key("Delivery times")
    assert deps.faq.claim_questions(faq_kb.id, "in-flight", [key], time.time(), 600) == {}
    with pytest.raises(Conflict) as raised:
        create(deps, faq_kb, "delivery times!")
    assert raised.value.code == "faq_question_conflict"
    assert list(entries.all_entries(deps, faq_kb.id)) == []
    # an expired claim (its request died) no longer holds the question
    deps.faq.release_questions(faq_kb.id, "in-flight", [key])
    assert deps.faq.claim_questions(faq_kb.id, "died", [key], time.time() - 3600, 600) == {}
    assert create(deps, faq_kb, "delivery times!").indexed


def test_an_entry_without_reservations_still_holds_its_questions(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    """Entries written before reservations existed, or by an import or a clone, hold their questions in
    their rows only: the scan still refuses a duplicate of them."""
    old = FaqEntry(
        id="00000000-0000-4000-8000-000000000001",
        kb_id=faq_kb.id,
        tenant_id=faq_kb.tenant_id,
        standard_question="Legacy question",
        answers=["a"],
        similar_questions=["older wording"],
        indexed=True,
    ).rehash()
    deps.faq.put_entries([old])
    with pytest.raises(Conflict) as raised:
        create(deps, faq_kb, "older wording")
    assert raised.value.code == "faq_question_conflict" and raised.value.data["id"] == old.id
    fresh = create(deps, faq_kb, "Something else")
    with pytest.raises(Conflict):
        update(deps, faq_kb, fresh.id, similar_questions=["LEGACY question"])


def test_a_reservation_whose_entry_let_the_question_go_is_taken_over(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    """An import merge rewrites an entry without going through the reservations: the question it drops is
    still reserved for that entry, yet free."""
    entry = create(deps, faq_kb, "Shipping cost", similar_questions=["how much is shipping"])
    merged = FaqEntry.from_body(entry.to_body())
    merged.similar_questions = []
    deps.faq.put_entries([merged.rehash()])
    other = create(deps, faq_kb, "How much is shipping?")
    holders = deps.faq.question_holders(faq_kb.id, [entries.question_key("how much is shipping")])
    assert [h.entry_id for h in holders.values()] == [other.id]
    assert all(h.expires_at is None for h in holders.values())  # held for good once saved


def test_deleting_and_changing_entries_release_their_questions(deps: Services, faq_kb: KnowledgeBase) -> None:
    entry = create(deps, faq_kb, "Gift cards", similar_questions=["vouchers"])
    keys = [entries.question_key(q) for q in ("Gift cards", "vouchers", "coupons")]
    assert set(deps.faq.question_holders(faq_kb.id, keys)) == set(keys[:2])
    update(deps, faq_kb, entry.id, similar_questions=["coupons"])
    assert set(deps.faq.question_holders(faq_kb.id, keys)) == {keys[0], keys[2]}
    entries.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, entry.id)
    assert deps.faq.question_holders(faq_kb.id, keys) == {}


# ---------------------------------------------------------------- tags in use


def test_tags_no_entry_uses_any_more_are_not_listed(deps: Services, faq_kb: KnowledgeBase) -> None:
    first = create(deps, faq_kb, "q one", tags=["obsolete", "shared"])
    second = create(deps, faq_kb, "q two", tags=["shared"])
    update(deps, faq_kb, first.id, tags=["current", "shared"])
    assert entries.list_tags(deps, faq_kb.tenant_id, faq_kb.id) == ["current", "shared"]
    entries.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, first.id)
    assert entries.list_tags(deps, faq_kb.tenant_id, faq_kb.id) == ["shared"]
    entries.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, second.id)
    assert entries.list_tags(deps, faq_kb.tenant_id, faq_kb.id) == []


def test_a_tag_an_entry_saved_meanwhile_uses_is_put_back(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = create(deps, faq_kb, "q one", tags=["billing"])
    real_remove = deps.faq.remove_tags
    raced: list[FaqEntry] = []

    def remove_tags(kb_id: str, names: Sequence[str]) -> None:
        if not raced:  # a create of another entry with the tag saved its row and added its tags just now
            raced.append(create(deps, faq_kb, "q two", tags=["billing"]))
        real_remove(kb_id, names)

    monkeypatch.setattr(deps.faq, "remove_tags", remove_tags)
    entries.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, entry.id)
    assert entries.list_tags(deps, faq_kb.tenant_id, faq_kb.id) == ["billing"]


# ---------------------------------------------------------------- the list cursor


@pytest.mark.parametrize("cursor", ["~x", "é", "zzz", "../x", "E#", "0" * 37])
def test_a_cursor_that_is_no_entry_id_is_an_invalid_query(cursor: str) -> None:
    with pytest.raises(ValidationError):
        FaqListQuery.model_validate({"cursor": cursor})


def test_a_cursor_from_a_page_is_accepted(deps: Services, faq_kb: KnowledgeBase) -> None:
    for i in range(3):
        create(deps, faq_kb, f"question {i}")
    page = entries.list_entries(deps, faq_kb.tenant_id, faq_kb.id, FaqListQuery(limit=2))
    cursor = FaqListQuery.model_validate({"cursor": page["next_cursor"], "limit": 2})
    rest = entries.list_entries(deps, faq_kb.tenant_id, faq_kb.id, cursor)
    assert len(page["items"]) == 2 and len(rest["items"]) == 1 and rest["next_cursor"] == ""
