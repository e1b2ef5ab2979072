"""FAQ questions that differ by a `+` or `#` ending a word (C++, C#, A+) are different questions (the
in-memory adapters), also next to entries saved while they were one ("C++" reserved as "c": key rule 1)."""

from __future__ import annotations

import hashlib
import sys
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain import faq_normalise
from chalicelib.domain.errors import Conflict
from chalicelib.domain.faq import FaqEntry
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.faq import entries, keyed
from chalicelib.faq.commands import FaqEntryRequest, FaqEntryUpdate, FaqListQuery

from .faq_support import faq_kb_named
from .test_faq import entries_of, entry, run_import
from .test_faq_import_reservations import clone_into, shared


def create(deps: Services, kb: KnowledgeBase, question: str, **extra: Any) -> FaqEntry:
    request = FaqEntryRequest(standard_question=question, answers=[f"answer to {question}"], **extra)
    return entries.create_entry(deps, kb.tenant_id, kb.id, request)


def rule_one_key(question: str) -> str:
    """The reservation key a question got under rule 1 (edge `+`/`#` stripped: "C++" as "c")."""
    old = faq_normalise.normalise(question, keep_word_marks=False)
    return hashlib.sha256(old.encode("utf-8")).hexdigest()[:32]


def holder(deps: Services, kb: KnowledgeBase, key: str) -> str | None:
    held = deps.faq.question_holders(kb.id, [key]).get(key)
    return held.entry_id if held is not None else None


def saved_under_rule_one(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, question: str, **extra: Any
) -> FaqEntry:
    """An entry created through the API as the code before rule 2 did: every module's `normalise` strips
    edge `+`/`#`, and the knowledge base is marked keyed under rule 1. Its reservation is the old-style
    key, its content hash the old one."""
    real = faq_normalise.normalise

    def rule_one(text: str, *, keep_word_marks: bool = False) -> str:
        return real(text, keep_word_marks=False)

    with monkeypatch.context() as patch:
        for module in list(sys.modules.values()):
            if module is not None and getattr(module, "normalise", None) is real:
                patch.setattr(module, "normalise", rule_one)
        patch.setattr(keyed, "KEY_RULE", 1)
        made = create(deps, kb, question, **extra)
    assert holder(deps, kb, entries.question_key(question)) is None  # (the new key: not held)
    assert holder(deps, kb, rule_one_key(question)) == made.id
    assert deps.faq.entries_keyed(kb.id, 1)
    return made


# ---------------------------------------------------------------- under the new rule only


def test_c_and_c_plus_plus_and_c_sharp_entries_coexist(deps: Services, faq_kb: KnowledgeBase) -> None:
    made = [create(deps, faq_kb, q) for q in ("What is C?", "What is C++?", "What is C#?", "A", "A+")]
    assert len({e.id for e in made}) == 5
    for e in made:
        assert holder(deps, faq_kb, entries.question_key(e.standard_question)) == e.id
    assert shared(deps, faq_kb) == {}


def test_a_duplicate_c_plus_plus_is_still_refused(deps: Services, faq_kb: KnowledgeBase) -> None:
    first = create(deps, faq_kb, "What is C++?")
    for spelling in ("what is  c++ ?", "WHAT IS C++", "What is C++"):
        with pytest.raises(Conflict) as raised:
            create(deps, faq_kb, spelling)
        assert raised.value.code == "faq_question_conflict"
        assert raised.value.data["id"] == first.id
    other = create(deps, faq_kb, "What is C?")
    with pytest.raises(Conflict):  # nor as another entry's similar question
        entries.update_entry(
            deps, faq_kb.tenant_id, faq_kb.id, other.id, FaqEntryUpdate(similar_questions=["What is C++ ?"])
        )


def test_list_keyword_c_plus_plus_finds_only_c_plus_plus(deps: Services, faq_kb: KnowledgeBase) -> None:
    create(deps, faq_kb, "What is C?")
    cpp = create(deps, faq_kb, "What is C++?")
    found = entries.list_entries(deps, faq_kb.tenant_id, faq_kb.id, FaqListQuery(keyword="C++"))
    assert [item["id"] for item in found["items"]] == [cpp.id]


def test_an_import_and_a_clone_keep_c_and_c_plus_plus_apart(
    deps: Services, tenant: Tenant, faq_kb: KnowledgeBase
) -> None:
    view = run_import(deps, faq_kb, [entry("What is C?"), entry("What is C++?"), entry("what is c++")])
    assert (view["progress"]["added"], view["progress"]["failed"]) == (2, 1)
    assert set(entries_of(deps, faq_kb)) == {"What is C?", "What is C++?"}
    target = faq_kb_named(deps, tenant, "mirror")
    assert clone_into(deps, faq_kb, target)["status"] == "completed"
    copies = entries_of(deps, target)
    assert set(copies) == {"What is C?", "What is C++?"}
    for question, copy in copies.items():
        assert holder(deps, target, entries.question_key(question)) == copy.id


# ---------------------------------------------------------------- next to entries saved under rule 1


def test_a_duplicate_of_an_entry_reserved_under_the_old_rule_is_refused(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = saved_under_rule_one(deps, faq_kb, monkeypatch, "What is C++?")
    with pytest.raises(Conflict) as raised:
        create(deps, faq_kb, "what is  c++ ?")
    assert raised.value.code == "faq_question_conflict" and raised.value.data["id"] == old.id
    # the first write re-keyed the knowledge base: the old entry now holds its new key too
    assert deps.faq.entries_keyed(faq_kb.id, 2)
    assert holder(deps, faq_kb, entries.question_key("What is C++?")) == old.id
    with pytest.raises(Conflict):  # and later writes, that read reservations only, refuse it as well
        create(deps, faq_kb, "WHAT IS C++")
    assert [e.id for e in entries.all_entries(deps, faq_kb.id)] == [old.id]


def test_c_is_taken_next_to_an_old_c_plus_plus_which_keeps_its_question(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = saved_under_rule_one(deps, faq_kb, monkeypatch, "What is C++?")
    c = create(deps, faq_kb, "What is C?")  # the old-style key "c" is taken over: its holder is C++
    assert holder(deps, faq_kb, entries.question_key("What is C?")) == c.id
    with pytest.raises(Conflict) as raised:
        create(deps, faq_kb, "What is C++")
    assert raised.value.data["id"] == old.id
    assert {e.id for e in entries.all_entries(deps, faq_kb.id)} == {old.id, c.id}


def test_an_import_merges_into_an_entry_saved_under_the_old_rule(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = saved_under_rule_one(deps, faq_kb, monkeypatch, "What is C++?")
    view = run_import(
        deps, faq_kb, [entry("what is c++", similar_questions=["C++ meaning"]), entry("What is C")]
    )
    assert view["progress"]["added"] == 1
    stored = entries_of(deps, faq_kb)
    assert set(stored) == {"What is C++?", "What is C"} and stored["What is C++?"].id == old.id
    assert stored["What is C++?"].similar_questions == ["C++ meaning"]
    assert shared(deps, faq_kb) == {}


def test_an_update_and_a_delete_release_the_old_style_key_too(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = saved_under_rule_one(deps, faq_kb, monkeypatch, "What is C++?")
    entries.update_entry(deps, faq_kb.tenant_id, faq_kb.id, old.id, FaqEntryUpdate(answers=["a language"]))
    assert holder(deps, faq_kb, rule_one_key("What is C++?")) is None  # no question of it is "c" any more
    assert holder(deps, faq_kb, entries.question_key("What is C++?")) == old.id

    other = saved_under_rule_one(deps, faq_kb, monkeypatch, "What is F#?")
    entries.delete_entry(deps, faq_kb.tenant_id, faq_kb.id, other.id)
    assert holder(deps, faq_kb, rule_one_key("What is F#?")) is None
    assert holder(deps, faq_kb, entries.question_key("What is F#?")) is None
    assert create(deps, faq_kb, "What is F").indexed and create(deps, faq_kb, "What is F#").indexed
