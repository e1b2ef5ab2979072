"""FAQ import rows as users send them: WeKnora's own entry payload (`tag_name`, `answer_strategy`, switches
left null), CSV headers written with spaces, blank rows in a spreadsheet, JSON values of the wrong kind,
answers that are links, and what a partial row lost."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase

from .test_faq import entries_of, import_uploaded_csv, run_import


def test_weknoras_entry_payload_keeps_its_tag_name_and_answer_strategy(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    """WeKnora's FAQEntryPayload (and its JSON export) names an entry's tag `tag_name` and its answer
    strategy `answer_strategy` ("all" | "random"); both were dropped without a word."""
    rows: list[dict[str, Any]] = [
        {
            "standard_question": "How do I pay",
            "answers": ["By card"],
            "tag_name": "billing",
            "answer_strategy": "all",
        },
        {
            "standard_question": "Refunds",
            "answers": ["30 days"],
            "tag_name": "billing",
            "answer_strategy": "random",
        },
    ]
    view = run_import(deps, faq_kb, rows)
    assert view["progress"]["added"] == 2
    stored = entries_of(deps, faq_kb)
    assert stored["How do I pay"].tags == ["billing"] and stored["How do I pay"].answer_all is True
    assert stored["Refunds"].tags == ["billing"] and stored["Refunds"].answer_all is False
    assert deps.faq.tags(faq_kb.id) == ["billing"]


def test_an_answer_strategy_merged_into_an_entry_is_the_rows_word(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    run_import(deps, faq_kb, [{"standard_question": "Hours", "answers": ["9-5"], "answer_all": True}])
    run_import(
        deps, faq_kb, [{"standard_question": "Hours", "answers": ["9-6"], "answer_strategy": "random"}]
    )
    assert entries_of(deps, faq_kb)["Hours"].answer_all is False


def test_csv_headers_written_with_spaces_are_read_by_name(deps: Services, faq_kb: KnowledgeBase) -> None:
    """`Standard Question`, `Similar Questions`, ... were unknown: the header row was imported as an entry
    and the columns read by position, or a column (similar questions) was dropped without a word."""
    text = (
        "Category,Standard Question,Similar Questions,Negative Questions,Answers,Answer All,Disabled\n"
        "billing,How do I pay,paying##payment methods,how do I get paid,By card##By transfer,TRUE,FALSE\n"
    )
    view = import_uploaded_csv(deps, faq_kb, text)
    assert (view["progress"]["added"], view["progress"]["failed"]) == (1, 0)
    stored = entries_of(deps, faq_kb)
    assert set(stored) == {"How do I pay"}
    pay = stored["How do I pay"]
    assert pay.similar_questions == ["paying", "payment methods"]
    assert pay.negative_questions == ["how do I get paid"]
    assert pay.answers == ["By card", "By transfer"] and pay.tags == ["billing"] and pay.answer_all is True


def test_a_similar_questions_column_with_a_space_is_not_dropped(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    text = "question,similar questions,answer\nHow do I pay,paying##payment methods,By card\n"
    import_uploaded_csv(deps, faq_kb, text)
    assert entries_of(deps, faq_kb)["How do I pay"].similar_questions == ["paying", "payment methods"]


def test_a_failed_rows_number_counts_the_blank_rows_before_it(deps: Services, faq_kb: KnowledgeBase) -> None:
    """A blank line between groups of a spreadsheet is still a row the user sees: the rows after it were
    reported one number too low."""
    text = "question,answers\nFirst,one\n\nSecond,\nThird,three\n"
    view = import_uploaded_csv(deps, faq_kb, text)
    assert [(f["row"], f["question"]) for f in view["progress"]["failures"]] == [(3, "Second")]
    assert set(entries_of(deps, faq_kb)) == {"First", "Third"}


def test_json_values_of_the_wrong_kind_fail_their_row_instead_of_being_imported_as_text(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    rows: list[dict[str, Any]] = [
        {"standard_question": ["How do I pay", "paying"], "answers": ["By card"]},
        {"standard_question": "Refunds", "answers": {"text": "30 days"}},
        {"standard_question": "Hours", "answers": [{"text": "9-5"}]},
        {"standard_question": "Parking", "answers": ["free"], "similar_questions": [["car park"]]},
        {"standard_question": "Wifi", "answers": ["guest"], "tags": {"name": "office"}},
        {"standard_question": 42, "answers": [7]},
    ]
    view = run_import(deps, faq_kb, rows)
    failures = {f["row"]: f for f in view["progress"]["failures"]}
    assert sorted(failures) == [1, 2, 3, 4, 5]
    assert all(f["category"] == "invalid" for f in failures.values())
    assert "standard_question" in failures[1]["reason"] and "answers" in failures[2]["reason"]
    assert set(entries_of(deps, faq_kb)) == {"42"}  # a number is a text as written


def test_a_spreadsheets_failed_row_counts_the_blank_rows_before_it() -> None:
    import io

    from openpyxl import Workbook

    from chalicelib.faq.rows import read_rows

    book = Workbook()
    sheet = book.active
    assert sheet is not None
    for values in (["Question", "Answers"], ["First", "one"], [None, None], ["Second", "two"]):
        sheet.append(values)
    out = io.BytesIO()
    book.save(out)
    assert [(r.row, r.question) for r in read_rows(out.getvalue(), "faq.xlsx")] == [
        (1, "First"),
        (3, "Second"),
    ]


def test_an_append_merge_keeps_answers_that_are_links_or_differ_by_their_link(
    deps: Services, faq_kb: KnowledgeBase
) -> None:
    """Answers were united by their normalised text, which strips links: an answer that is only a link was
    dropped from the entry the row merged into, and a row's answer differing by its link was dropped (the
    merge then seen as unchanged and skipped)."""
    from chalicelib.faq.commands import FaqEntryRequest
    from chalicelib.faq.entries import create_entry

    create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(standard_question="Where is the manual", answers=["https://example.com/manual.pdf"]),
    )
    create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(
            standard_question="Where is the app", answers=["Download it at https://example.com/v1"]
        ),
    )
    rows = [
        {"standard_question": "Where is the manual", "answers": ["Ask at the desk"]},
        {"standard_question": "Where is the app", "answers": ["Download it at https://example.com/v2"]},
    ]
    view = run_import(deps, faq_kb, rows)
    assert (view["progress"]["merged"], view["progress"]["skipped"]) == (2, 0)
    stored = entries_of(deps, faq_kb)
    assert stored["Where is the manual"].answers == ["https://example.com/manual.pdf", "Ask at the desk"]
    assert stored["Where is the app"].answers == [
        "Download it at https://example.com/v1",
        "Download it at https://example.com/v2",
    ]


def test_a_switch_given_as_null_is_not_given(deps: Services, faq_kb: KnowledgeBase) -> None:
    """`"is_enabled": null` (WeKnora's pointer left unset, as many exporters write it) imported the entry
    disabled, where no search finds it; `"disabled": null` hid the row's `is_enabled`."""
    rows: list[dict[str, Any]] = [
        {"standard_question": "How do I pay", "answers": ["By card"], "is_enabled": None},
        {"standard_question": "Refunds", "answers": ["30 days"], "disabled": None, "is_enabled": False},
    ]
    run_import(deps, faq_kb, rows)
    stored = entries_of(deps, faq_kb)
    assert stored["How do I pay"].is_enabled is True
    assert stored["Refunds"].is_enabled is False


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_partial_row_says_which_of_its_questions_went(
    deps: Services, faq_kb: KnowledgeBase, dry_run: bool
) -> None:
    """`partial` was a count only: which rows lost which similar or negative question was never told."""
    from chalicelib.faq.commands import FaqEntryRequest
    from chalicelib.faq.entries import create_entry

    hours = create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(
            standard_question="Opening hours", similar_questions=["when are you open"], answers=["9-5"]
        ),
    )
    rows: list[dict[str, Any]] = [
        {"standard_question": "Parking", "answers": ["free"]},
        {
            "standard_question": "Holiday hours",
            "answers": ["closed"],
            "similar_questions": ["when are you open"],
        },
    ]
    progress = run_import(deps, faq_kb, rows, dry_run=dry_run)["progress"]
    assert progress["partial"] == 1
    assert progress["partials"] == [
        {
            "row": 2,
            "question": "Holiday hours",
            "notes": [
                f"similar question 'when are you open' removed: it is already a question of entry {hours.id}"
            ],
        }
    ]


def test_a_failed_rows_text_is_clipped_in_the_tasks_progress(deps: Services, faq_kb: KnowledgeBase) -> None:
    """A question cell that swallowed most of the file (a quote never closed) failed its row with the whole
    cell copied into the task's progress: megabytes in a record DynamoDB holds to 400 KB, so the import's
    last save failed on every try. The failed-rows CSV keeps the row whole."""
    import csv
    import io
    import json

    from .test_faq import download

    huge = "why " * 400_000  # 1.6 MB: far over a question's 1,000 characters
    text = f"question,answers\n{huge},never\nParking,free\n"
    view = import_uploaded_csv(deps, faq_kb, text)
    progress = view["progress"]
    assert (view["status"], progress["added"], progress["failed"]) == ("partial", 1, 1)
    assert len(json.dumps(progress).encode()) < 32 * 1024
    (failure,) = progress["failures"]
    assert failure["row"] == 1 and huge.strip().startswith(failure["question"].rstrip("…"))
    lines = list(
        csv.reader(io.StringIO(download(deps, progress["failed_rows_download"]).decode("utf-8-sig")))
    )
    assert lines[1][2] == huge.strip()


def test_an_append_merge_still_takes_an_answer_once(deps: Services, faq_kb: KnowledgeBase) -> None:
    """Answers the same but for case and edge punctuation stay one answer; one of symbols only is kept."""
    from chalicelib.faq.commands import FaqEntryRequest
    from chalicelib.faq.entries import create_entry

    create_entry(
        deps,
        faq_kb.tenant_id,
        faq_kb.id,
        FaqEntryRequest(standard_question="Is it free", answers=["Yes.", "👍"]),
    )
    view = run_import(
        deps, faq_kb, [{"standard_question": "Is it free", "answers": ["yes", "👍", "No charge"]}]
    )
    assert view["progress"]["merged"] == 1
    assert entries_of(deps, faq_kb)["Is it free"].answers == ["Yes.", "👍", "No charge"]
