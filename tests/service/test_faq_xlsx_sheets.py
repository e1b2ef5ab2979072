"""A workbook's sheets after the first are not read (WeKnora's template is one sheet; another may hold
notes), and never silently: the task's progress counts and names the ones that hold a value (in-memory
adapters)."""

from __future__ import annotations

import io
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase

from .test_faq import _upload, drain, entries_of, task_view


def _workbook(sheets: dict[str, list[list[Any]]]) -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    first = book.active
    assert first is not None
    book.remove(first)
    for title, body in sheets.items():
        sheet = book.create_sheet(title)
        for row in body:
            sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


@pytest.mark.parametrize("dry_run", [False, True])
def test_sheets_after_the_first_are_counted_and_named_in_the_progress(
    deps: Services, faq_kb: KnowledgeBase, dry_run: bool
) -> None:
    from chalicelib.faq.commands import FaqImportRequest
    from chalicelib.faq.importing import start_import

    data = _workbook(
        {
            "FAQ": [["question", "answers"], ["Opening hours", "9 to 5"]],
            "Empty": [],
            "More FAQ": [["question", "answers"], ["Returns", "30 days"]],
            "Notes": [[None, "read me first"]],
        }
    )
    key = _upload(deps, faq_kb, "faq.xlsx", data)
    task = start_import(deps, faq_kb.tenant_id, faq_kb.id, FaqImportRequest(object_key=key, dry_run=dry_run))
    drain(deps)
    view = task_view(deps, task.id)
    progress = view["progress"]
    assert view["status"] == "completed" and progress["total"] == 1
    assert progress["sheets_skipped"] == 2 and progress["skipped_sheet_names"] == ["More FAQ", "Notes"]
    assert set(entries_of(deps, faq_kb)) == (set() if dry_run else {"Opening hours"})


def test_a_one_sheet_workbook_reports_no_skipped_sheet() -> None:
    from chalicelib.faq.rows import read_source

    read = read_source(_workbook({"FAQ": [["question", "answers"], ["Opening hours", "9 to 5"]]}), "f.xlsx")
    assert [r.question for r in read.rows] == ["Opening hours"] and read.skipped_sheets == []
