"""Housekeeping's backfill of the tasks written before the tasks table listed open ones (helper alo3, item 3;
the DynamoDB side is tests/e2e/test_task_backfill_dynamo.py): a few Scan pages a sweep from where the last
stopped, passes again until one finds none left (and began once functions still running the code before the
update have ended), then never reads again."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from chalicelib.bootstrap import Services
from chalicelib.stages.housekeeping import (
    TASK_BACKFILL_PAGES,
    TASK_BACKFILL_SETTLE_SECONDS,
    sweep,
)

START = datetime(2026, 12, 7, 12, 0, tzinfo=UTC)


class ScriptedTable:
    """A tasks table of `pages` Scan pages; `legacy` tasks to key on its first page, until keyed."""

    def __init__(self, pages: int, legacy: int) -> None:
        self.pages, self.legacy = pages, legacy
        self.reads: list[str | None] = []

    def backfill_keys(self, after: str | None, page_items: int) -> tuple[int, str | None]:
        self.reads.append(after)
        page = 0 if after is None else int(after) + 1
        found = self.legacy if page == 0 else 0
        self.legacy -= found
        return found, (str(page) if page + 1 < self.pages else None)


@pytest.fixture
def table(deps: Services, monkeypatch: pytest.MonkeyPatch) -> ScriptedTable:
    scripted = ScriptedTable(pages=2 * TASK_BACKFILL_PAGES + 2, legacy=3)
    monkeypatch.setattr(deps.tasks, "backfill_keys", scripted.backfill_keys)
    return scripted


def test_the_backfill_reads_a_few_pages_a_sweep_and_goes_on_where_it_stopped(
    deps: Services, table: ScriptedTable
) -> None:
    first = sweep(deps, now=START)
    assert first.tasks_keyed == 3 and table.reads == [None, *map(str, range(TASK_BACKFILL_PAGES - 1))]
    table.reads.clear()
    sweep(deps, now=START + timedelta(minutes=5))
    assert table.reads[0] == str(TASK_BACKFILL_PAGES - 1) and len(table.reads) == TASK_BACKFILL_PAGES
    table.reads.clear()
    sweep(deps, now=START + timedelta(minutes=10))  # the rest of the first pass (2 pages): it ends there
    assert len(table.reads) == 2 and table.reads[-1] == str(2 * TASK_BACKFILL_PAGES)


def test_the_backfill_ends_after_a_pass_that_found_none_and_then_reads_nothing(
    deps: Services, table: ScriptedTable
) -> None:
    table.pages = 2  # a small table: a pass a sweep, the next pass beginning where one ends
    minute = timedelta(minutes=1)
    assert sweep(deps, now=START).tasks_keyed == 3  # pass 1 keys them: another pass checks
    sweep(deps, now=START + 5 * minute)  # pass 2 found none, but began right after the update
    settled = START + timedelta(seconds=TASK_BACKFILL_SETTLE_SECONDS) + minute
    sweep(deps, now=settled)  # pass 3 found none, but began (at pass 2's end) before the settling time
    sweep(deps, now=settled + 5 * minute)  # pass 4 began late enough and found none: the end
    reads = len(table.reads)
    assert reads == 8
    table.legacy = 1  # (nothing would find it now: the backfill is over)
    assert sweep(deps, now=settled + 10 * minute).tasks_keyed == 0
    assert len(table.reads) == reads  # no more reads, ever
