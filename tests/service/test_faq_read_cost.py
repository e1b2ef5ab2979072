"""FAQ writes and lists read a bounded part of the knowledge base (found by an audit: every create, update,
delete and filtered list read every entry), conflicts with entries written before question reservations
are still found, and an append merge keeps the entry's switches a row does not carry."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.errors import Conflict
from chalicelib.domain.faq import FaqEntry
from chalicelib.domain.types import KnowledgeBase
from chalicelib.faq import entries as E
from chalicelib.faq.commands import FaqEntryRequest, FaqEntryUpdate, FaqListQuery
from service.test_faq import entries_of, import_uploaded_csv, run_import

LEGACY = 3000
#: entries a list page reads at most (chalicelib/faq/entries.py)
LIST_SCAN = 2000


def legacy(deps: Services, kb: KnowledgeBase, count: int, **fields: Any) -> list[FaqEntry]:
    """Entries as written before question reservations and tag links: rows only."""
    made = [
        FaqEntry(
            id=str(uuid.uuid4()),
            kb_id=kb.id,
            tenant_id=kb.tenant_id,
            standard_question=f"legacy question {i}",
            answers=[f"answer {i}"],
            indexed=True,
            **fields,
        ).rehash()
        for i in range(count)
    ]
    deps.faq.put_entries(made)
    return made


class Reads:
    """Counts the FaqRepo's calls and the entries its pages read."""

    def __init__(self, deps: Services) -> None:
        self.calls = 0
        self.rows = 0
        self.depth = 0
        repo = deps.faq
        for name in [n for n in dir(repo) if not n.startswith("_") and callable(getattr(repo, n))]:
            setattr(repo, name, self._counted(name, getattr(repo, name)))

    def _counted(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += self.depth == 0  # the fake's own calls to itself are not the caller's
            self.depth += 1
            try:
                result = real(*args, **kwargs)
            finally:
                self.depth -= 1
            if name == "page_entries":
                self.rows += len(result[0])
            return result

        return counted

    def of(self, work: Callable[[], Any]) -> tuple[int, int]:
        self.calls = self.rows = 0
        work()
        return self.calls, self.rows


def create(deps: Services, kb: KnowledgeBase, question: str, **fields: Any) -> FaqEntry:
    return E.create_entry(
        deps, kb.tenant_id, kb.id, FaqEntryRequest(standard_question=question, answers=["x"], **fields)
    )


def test_writes_read_no_other_entry_once_the_first_write_reserved_the_older_ones(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    legacy(deps, faq_kb, LEGACY, tags=["common"])
    create(deps, faq_kb, "the first write after the older entries")  # reserves them, once
    reads = Reads(deps)
    made: list[FaqEntry] = []
    calls, rows = reads.of(lambda: made.append(create(deps, faq_kb, "a new one", tags=["t", "common"])))
    assert rows == 0 and calls <= 10
    update = FaqEntryUpdate(answers=["y"], tags=["t"])
    calls, rows = reads.of(lambda: E.update_entry(deps, faq_kb.tenant_id, faq_kb.id, made[0].id, update))
    assert rows == 0 and calls <= 15
    calls, rows = reads.of(lambda: E.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, made[0].id))
    assert rows == 0 and calls <= 12
    assert E.list_tags(deps, faq_kb.tenant_id, faq_kb.id) == ["common"]  # "t" unused now, "common" kept
    query = FaqListQuery(keyword="zzz", limit=1)
    calls, rows = reads.of(lambda: E.list_entries(deps, faq_kb.tenant_id, faq_kb.id, query))
    assert rows <= LIST_SCAN and calls <= 6


def test_a_conflict_with_an_older_unreserved_entry_is_found_on_the_first_write_and_after(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    older = legacy(deps, faq_kb, 5, similar_questions=[])
    older[3].similar_questions = ["how old is it"]
    deps.faq.put_entries([older[3].rehash()])
    with pytest.raises(Conflict) as first:  # the first write: the KB is read once
        create(deps, faq_kb, "Legacy question 2")
    assert first.value.data["id"] == older[2].id
    reads = Reads(deps)
    for question, owner in [("legacy question 4", older[4]), ("How old is it?", older[3])]:
        with pytest.raises(Conflict) as later:
            reads.rows = 0
            create(deps, faq_kb, question)
        assert later.value.data["id"] == owner.id and reads.rows == 0
    mine = create(deps, faq_kb, "mine")
    with pytest.raises(Conflict) as update:
        E.update_entry(
            deps,
            faq_kb.tenant_id,
            faq_kb.id,
            mine.id,
            FaqEntryUpdate(similar_questions=["legacy question 0"]),
        )
    assert update.value.data["id"] == older[0].id
    # the older entries' own updates and deletes still work, and free their questions
    E.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, older[4].id)
    assert create(deps, faq_kb, "legacy question 4").standard_question == "legacy question 4"


def test_a_conflict_with_a_reserved_entry_reads_no_entries(deps: Services, faq_kb: KnowledgeBase) -> None:
    legacy(deps, faq_kb, LEGACY)
    owner = create(deps, faq_kb, "reset my password", similar_questions=["forgot password"])
    reads = Reads(deps)
    for question in ("Reset my password!", "forgot  password"):
        with pytest.raises(Conflict) as clash:
            reads.rows = 0
            create(deps, faq_kb, question)
        assert clash.value.data["id"] == owner.id and reads.rows == 0


def test_a_tag_older_entries_use_stays_until_the_last_of_them_goes(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    older = legacy(deps, faq_kb, 2, tags=["old"])
    deps.faq.add_tags(faq_kb.id, ["old"])
    made = create(deps, faq_kb, "new", tags=["old"])
    E.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, made.id)
    assert E.list_tags(deps, faq_kb.tenant_id, faq_kb.id) == ["old"]
    E.update_entry(deps, faq_kb.tenant_id, faq_kb.id, older[0].id, FaqEntryUpdate(tags=[]))
    assert E.list_tags(deps, faq_kb.tenant_id, faq_kb.id) == ["old"]
    E.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, older[1].id)
    assert E.list_tags(deps, faq_kb.tenant_id, faq_kb.id) == []


def test_an_imported_entrys_tag_stays_when_the_api_entry_with_it_goes(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    made = create(deps, faq_kb, "api entry", tags=["shared"])
    run_import(deps, faq_kb, [{"standard_question": "imported", "answers": ["a"], "tags": ["shared"]}])
    E.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, made.id)
    assert E.list_tags(deps, faq_kb.tenant_id, faq_kb.id) == ["shared"]
    imported = entries_of(deps, faq_kb)["imported"]
    E.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, imported.id)
    assert E.list_tags(deps, faq_kb.tenant_id, faq_kb.id) == []


@pytest.mark.parametrize("limit", [1, 5, 100])
def test_a_filtered_list_pages_across_the_read_cap_with_every_match_once(
    deps: Services, faq_kb: KnowledgeBase, limit: int
) -> None:
    made = legacy(deps, faq_kb, 4500)
    rare = [e for e in sorted(made, key=lambda e: e.id)[::331]]  # 14 matches, most pages' read ends short
    for entry in rare:
        entry.answers = ["the needle"]
    deps.faq.put_entries([e.rehash() for e in rare])
    wanted = {e.id for e in rare}
    reads = Reads(deps)
    seen: list[str] = []
    cursor, pages = "", 0
    while True:
        query = FaqListQuery(keyword="needle", limit=limit, cursor=cursor)
        reads.calls = reads.rows = 0
        answer = E.list_entries(deps, faq_kb.tenant_id, faq_kb.id, query)
        assert reads.rows <= LIST_SCAN + 1 and len(answer["items"]) <= limit
        seen.extend(item["id"] for item in answer["items"])
        cursor, pages = answer["next_cursor"], pages + 1
        if not cursor:
            break
        assert pages < 40
    assert len(seen) == len(set(seen)) and set(seen) == wanted


def test_a_list_matching_nothing_ends_after_a_few_short_pages(deps: Services, faq_kb: KnowledgeBase) -> None:
    legacy(deps, faq_kb, 4500)
    first = E.list_entries(deps, faq_kb.tenant_id, faq_kb.id, FaqListQuery(keyword="zzz", limit=1))
    assert first["items"] == [] and first["next_cursor"]
    cursor, pages = first["next_cursor"], 1
    while cursor:
        page = E.list_entries(
            deps, faq_kb.tenant_id, faq_kb.id, FaqListQuery(keyword="zzz", limit=1, cursor=cursor)
        )
        assert page["items"] == []
        cursor, pages = page["next_cursor"], pages + 1
    assert pages == 3  # 2,000 + 2,000 + 500


def test_an_append_merge_keeps_the_entrys_switches_the_row_does_not_carry(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    made = create(deps, faq_kb, "api q")
    E.update_entry(
        deps, faq_kb.tenant_id, faq_kb.id, made.id, FaqEntryUpdate(is_enabled=False, answer_all=True)
    )
    row: dict[str, Any] = {
        "standard_question": "api q",
        "answers": ["x"],
        "similar_questions": ["api question"],
    }
    assert run_import(deps, faq_kb, [row])["progress"]["merged"] == 1
    got = entries_of(deps, faq_kb)["api q"]
    assert got.similar_questions == ["api question"]
    assert (got.is_enabled, got.answer_all) == (False, True)
    # a CSV without the columns (or with them blank) keeps them too
    view = import_uploaded_csv(deps, faq_kb, "question,answers,similar,disabled\napi q,x,api q two,\n")
    assert view["progress"]["merged"] == 1
    got = entries_of(deps, faq_kb)["api q"]
    assert (got.is_enabled, got.answer_all) == (False, True)
    # a row that carries them sets them
    row = {"standard_question": "api q", "answers": ["x"], "is_enabled": True, "answer_all": False}
    assert run_import(deps, faq_kb, [row])["progress"]["merged"] == 1
    got = entries_of(deps, faq_kb)["api q"]
    assert (got.is_enabled, got.answer_all) == (True, False)
