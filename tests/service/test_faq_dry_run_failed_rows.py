"""A dry run gives the whole list of failed rows as a real import does (in-memory adapters): the progress
shows the first 50, and the failed-rows CSV, under the same key and behind the same download grant, holds
every one."""

from __future__ import annotations

import csv
import io

from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase
from chalicelib.faq.row_report import MAX_FAILURES_SHOWN

from .test_faq import download, entries_of, entry, run_import


def test_a_dry_run_writes_every_failed_row_to_the_csv(deps: Services, faq_kb: KnowledgeBase) -> None:
    failing = MAX_FAILURES_SHOWN + 30
    no_answer = [{"standard_question": f"question {i}", "answers": []} for i in range(failing)]
    rows = [*no_answer, entry("fine")]
    view = run_import(deps, faq_kb, rows, dry_run=True)
    progress = view["progress"]
    assert view["status"] == "completed" and progress["failed"] == failing
    assert len(progress["failures"]) == MAX_FAILURES_SHOWN
    body = download(deps, progress["failed_rows_download"])
    assert body.startswith(b"\xef\xbb\xbf")
    table = list(csv.reader(io.StringIO(body.decode("utf-8-sig"))))
    assert table[0][:3] == ["reason", "category", "question"]
    assert [r[2] for r in table[1:]] == [f"question {i}" for i in range(failing)]
    assert entries_of(deps, faq_kb) == {} and deps.faq.get_last_import(faq_kb.id) is None


def test_a_dry_run_without_failures_writes_no_csv(deps: Services, faq_kb: KnowledgeBase) -> None:
    from chalicelib.adapters.memory import MemoryFileStore

    view = run_import(deps, faq_kb, [entry("fine")], dry_run=True)
    assert view["status"] == "completed" and "failed_rows_download" not in view["progress"]
    inbox = deps.inbox
    assert isinstance(inbox, MemoryFileStore) and inbox.keys("faq-imports/") == []
