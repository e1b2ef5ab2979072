"""FAQ imports and knowledge-base clones take question reservations, as the entries API does (the in-memory
adapters): a create racing an import or a clone cannot share a question with what they write, an import
that finds a question taken since it planned follows its own rules for it, and a redelivered batch or copy
holds its own questions again rather than refusing them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import Conflict
from chalicelib.domain.faq import FaqEntry
from chalicelib.domain.faq_normalise import normalise
from chalicelib.domain.types import KnowledgeBase, Tenant
from chalicelib.faq import entries
from chalicelib.faq.commands import FaqEntryRequest, FaqImportRequest

from .faq_support import CountingEmbedding, faq_kb_named
from .test_faq import QUEUE, download, drain, entries_of, entry, run_import, task_view


def create(deps: Services, kb: KnowledgeBase, question: str, *answers: str, **extra: Any) -> FaqEntry:
    request = FaqEntryRequest(
        standard_question=question, answers=list(answers) or [f"api answer to {question}"], **extra
    )
    return entries.create_entry(deps, kb.tenant_id, kb.id, request)


def owners(deps: Services, kb: KnowledgeBase) -> dict[str, list[str]]:
    """Normalised question -> the ids of the entries that have it (one each, in a sound knowledge base)."""
    found: dict[str, list[str]] = {}
    for item in entries.all_entries(deps, kb.id):
        for question in item.questions():
            found.setdefault(normalise(question), []).append(item.id)
    return found


def shared(deps: Services, kb: KnowledgeBase) -> dict[str, list[str]]:
    return {q: ids for q, ids in owners(deps, kb).items() if len(ids) > 1}


def holders(deps: Services, kb: KnowledgeBase, *questions: str) -> dict[str, tuple[str, bool]]:
    """question -> (the entry holding its reservation, held for good)."""
    keys = {entries.question_key(q): q for q in questions}
    held = deps.faq.question_holders(kb.id, list(keys))
    return {keys[k]: (h.entry_id, h.expires_at is None) for k, h in held.items()}


def after_the_scan(monkeypatch: pytest.MonkeyPatch, meanwhile: Callable[[], object]) -> None:
    """`meanwhile` runs once, when the next create or update has scanned the entries and is about to
    reserve its questions."""
    real_check = entries._check
    done: list[bool] = []

    def check(deps_: Any, item: FaqEntry) -> None:
        real_check(deps_, item)
        if not done:
            done.append(True)
            meanwhile()

    monkeypatch.setattr(entries, "_check", check)


def deliver_once(deps: Services) -> dict[str, Any]:
    from chalicelib.stages import faq_import as worker

    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    return queue.deliver(QUEUE, worker.handle, deps)


# ---------------------------------------------------------------- an import


@pytest.mark.parametrize("redelivered", [False, True])
def test_questions_taken_through_the_api_while_an_import_runs_follow_the_imports_rules(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch, redelivered: bool
) -> None:
    """The plan was made before the entries below were created (the import works one batch per delivery
    here): a row whose standard question became an entry's is merged into it (append), one whose standard
    question became a similar question fails, and a similar question taken meanwhile is removed (partial),
    as the plan does for questions it sees. No question ends up in two entries. Redelivered after its
    rows were written (its progress not saved), the batch comes to the same end."""
    from chalicelib.faq import importing
    from chalicelib.faq.importing import start_import

    monkeypatch.setattr(importing, "SLICE_SECONDS", 0.0)  # one batch per delivery
    rows = [entry(f"question {i}") for i in range(60)]
    rows[58] = entry("question 58", similar_questions=["variant 58", "other wording 58"])
    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(entries=rows))
    deliver_once(deps)  # planned, and the first 50 rows written
    assert task_view(deps, task.id)["progress"]["processed"] == 50
    taken = create(deps, faq_kb, "Question 55", "from the API")
    similar = create(deps, faq_kb, "Something else", similar_questions=["question 57"])
    variant = create(deps, faq_kb, "Another thing", similar_questions=["variant 58"])
    if redelivered:
        real_save, saves = deps.tasks.save_progress, list[int]()

        def save_progress(saved: Any) -> bool:
            if not saves:
                saves.append(saved.done)
                raise RuntimeError("the task table did not answer")
            return bool(real_save(saved))

        monkeypatch.setattr(deps.tasks, "save_progress", save_progress)
        assert deliver_once(deps)["batchItemFailures"]  # batch 2 written, its progress lost
        assert saves == [60] and task_view(deps, task.id)["progress"]["processed"] == 50
    drain(deps)

    assert shared(deps, faq_kb) == {}
    view = task_view(deps, task.id)
    progress = view["progress"]
    assert view["status"] == "partial"
    assert (progress["added"], progress["merged"], progress["failed"], progress["partial"]) == (58, 1, 1, 1)
    stored = entries_of(deps, faq_kb)
    merged = stored["Question 55"]
    assert merged.id == taken.id and merged.answers == ["from the API", "answer to question 55"]
    assert "question 57" not in stored and stored["Something else"].id == similar.id
    assert stored["question 58"].similar_questions == ["other wording 58"]
    assert stored["Another thing"].id == variant.id
    assert [f["row"] for f in progress["failures"]] == [58]  # row 58 counts from 1: "question 57"
    assert b"question 57" in download(deps, progress["failed_rows_download"])
    # what the import wrote holds its questions
    assert holders(deps, faq_kb, "question 0", "question 58", "other wording 58", "question 55") == {
        "question 0": (stored["question 0"].id, True),
        "question 58": (stored["question 58"].id, True),
        "other wording 58": (stored["question 58"].id, True),
        "question 55": (taken.id, True),
    }


def test_a_create_racing_an_import_that_wrote_the_question_is_refused(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The create's scan ran before the import wrote its row; the import's reservation refuses it."""
    after_the_scan(monkeypatch, lambda: run_import(deps, faq_kb, [entry("Parking", "level 2")]))
    with pytest.raises(Conflict) as raised:
        create(deps, faq_kb, "parking!")
    assert raised.value.code == "faq_question_conflict"
    assert shared(deps, faq_kb) == {}
    assert [e.answers for e in entries_of(deps, faq_kb).values()] == [["level 2"]]


def test_a_redelivered_batch_holds_its_own_questions_and_a_failed_import_frees_what_it_purged(
    deps: Services, faq_kb: KnowledgeBase, model: CountingEmbedding
) -> None:
    rows = [entry(f"question {i}", similar_questions=[f"variant {i}"]) for i in range(120)]
    model.fail_after = 130  # batch 2 writes its rows and reserves their questions, then embedding fails
    task = start(deps, faq_kb, rows)
    assert deliver_once(deps)["batchItemFailures"]
    model.fail_after = None
    drain(deps)
    view = task_view(deps, task.id)
    assert view["status"] == "completed" and view["progress"]["added"] == 120  # none refused as taken
    stored = entries_of(deps, faq_kb)
    assert holders(deps, faq_kb, "question 70", "variant 70", "question 3") == {
        "question 70": (stored["question 70"].id, True),
        "variant 70": (stored["question 70"].id, True),
        "question 3": (stored["question 3"].id, True),
    }

    # an import that fails for good: the entries it purged (never indexed) give their questions back
    more = [entry(f"more {i}") for i in range(100)]
    model.fail_after = len(model.texts) + 60  # its first batch is indexed, the second fails on every try
    failed = start(deps, faq_kb, more)
    drain(deps)
    assert task_view(deps, failed.id)["status"] == "failed"
    left = entries_of(deps, faq_kb)
    assert "more 10" in left and "more 70" not in left
    assert holders(deps, faq_kb, "more 10", "more 70") == {"more 10": (left["more 10"].id, True)}
    model.fail_after = None
    assert create(deps, faq_kb, "more 70").indexed


def start(deps: Services, kb: KnowledgeBase, rows: list[dict[str, Any]], **options: Any) -> Any:
    from chalicelib.faq.importing import start_import

    return start_import(deps, kb.tenant_id, kb.id, FaqImportRequest(entries=rows, **options))


def test_a_replace_gives_back_the_questions_of_the_entries_it_deletes(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    old = create(deps, faq_kb, "Opening hours", "9 to 5", similar_questions=["when are you open"])
    view = run_import(deps, faq_kb, [entry("Opening hours", "8 to 6")], mode="replace")
    assert (view["progress"]["added"], view["progress"]["deleted"]) == (1, 1)
    new = entries_of(deps, faq_kb)["Opening hours"]
    assert new.id != old.id
    assert holders(deps, faq_kb, "opening hours", "when are you open") == {"opening hours": (new.id, True)}
    assert create(deps, faq_kb, "When are you open?").indexed


def test_in_a_replace_a_standard_question_taken_meanwhile_fails_the_row(
    deps: Services, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.faq import importing

    monkeypatch.setattr(importing, "SLICE_SECONDS", 0.0)  # one batch per delivery
    task = start(deps, faq_kb, [entry(f"question {i}") for i in range(60)], mode="replace")
    deliver_once(deps)
    taken = create(deps, faq_kb, "Question 55", "from the API")
    drain(deps)
    view = task_view(deps, task.id)
    assert (view["progress"]["added"], view["progress"]["failed"]) == (59, 1)
    assert view["progress"]["failures"][0]["row"] == 56
    assert taken.id in view["progress"]["failures"][0]["reason"]
    assert shared(deps, faq_kb) == {} and entries_of(deps, faq_kb)["Question 55"].id == taken.id


# ---------------------------------------------------------------- a clone


def clone_into(deps: Services, source: KnowledgeBase, target: KnowledgeBase) -> dict[str, Any]:
    from chalicelib.commands import CloneKnowledgeBaseRequest
    from chalicelib.operations.move_and_clone import clone_kb

    from .test_move_clone import run_lifecycle

    started = clone_kb(deps, source.tenant_id, source.id, CloneKnowledgeBaseRequest(target_kb_id=target.id))
    run_lifecycle(deps)
    return task_view(deps, started["task_id"])


def test_a_create_racing_a_clone_that_copied_the_question_is_refused(
    deps: Services, tenant: Tenant, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = faq_kb_named(deps, tenant, "mirror")
    source_entry = create(deps, faq_kb, "Where is the office?", similar_questions=["office address"])
    views: list[dict[str, Any]] = []
    after_the_scan(monkeypatch, lambda: views.append(clone_into(deps, faq_kb, target)))
    with pytest.raises(Conflict) as raised:
        create(deps, target, "office address", "somewhere else")
    assert raised.value.code == "faq_question_conflict"
    assert views[0]["status"] == "completed"
    assert shared(deps, target) == {}
    (copy,) = entries.all_entries(deps, target.id)
    assert copy.id != source_entry.id
    assert holders(deps, target, "where is the office", "office address") == {
        "where is the office": (copy.id, True),
        "office address": (copy.id, True),
    }


def test_a_copy_whose_question_was_taken_in_the_target_meanwhile_is_not_written(
    deps: Services, tenant: Tenant, faq_kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The clone planned, then the target's entry was created through the API: the copy is refused (the
    item fails, the task goes on), and the other copies are made."""
    from chalicelib.faq import clone

    target = faq_kb_named(deps, tenant, "mirror")
    create(deps, faq_kb, "Where is the office?", similar_questions=["office address"])
    create(deps, faq_kb, "Is there parking?")
    real_plan = clone.plan_faq_clone
    made: list[FaqEntry] = []

    def plan_then_create(*args: Any) -> Any:
        plan = real_plan(*args)
        if not made:
            made.append(create(deps, target, "Office address", "ask at the desk"))
        return plan

    monkeypatch.setattr(clone, "plan_faq_clone", plan_then_create)
    view = clone_into(deps, faq_kb, target)
    assert view["status"] == "partial" and view["failed"] == 1
    assert any("office address" in str(reason).lower() for reason in view["errors"].values())
    assert shared(deps, target) == {}
    assert sorted(e.standard_question for e in entries.all_entries(deps, target.id)) == [
        "Is there parking?",
        "Office address",
    ]
