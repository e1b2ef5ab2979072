"""Housekeeping's read of the in-flight index on DynamoDB (moto): a page is queried only when the sweep gets
to it, so a sweep out of time after a few rows has not read a large index to the end first."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pynamodb.connection.table import TableConnection
from service.repo_contract import IN_AN_HOUR, row

from chalicelib.adapters.dynamo import knowledge as dynamo_knowledge
from chalicelib.bootstrap import Services
from chalicelib.domain.clock import to_iso
from chalicelib.domain.types import ParseStatus, SummaryStatus


def test_the_in_flight_index_is_read_a_page_at_a_time(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = module_services.knowledge
    monkeypatch.setattr(dynamo_knowledge, "SWEEP_PAGE_ROWS", 2)
    base = datetime(2002, 1, 1, tzinfo=UTC) + timedelta(seconds=uuid.uuid4().int % 10**7)
    made = [row(updated_at=base + timedelta(milliseconds=n)) for n in range(5)]
    for k in made:
        repo.insert(k)
    pages: list[str] = []
    real_query = TableConnection.query

    def counted(self: TableConnection, *args: Any, **kwargs: Any) -> Any:
        pages.append(str(kwargs.get("index_name")))
        return real_query(self, *args, **kwargs)

    monkeypatch.setattr(TableConnection, "query", counted)
    rows = repo.in_flight_after(to_iso(base + timedelta(seconds=1)))
    assert pages == []  # nothing read before the sweep asks for a row
    assert next(rows).id == made[0].id
    assert pages == ["inflight-index"]  # one page of two rows, not the whole index
    assert [k.id for k in rows] == [k.id for k in made[1:]]
    assert len(pages) == 3


def test_deleting_rows_and_unsettled_summaries_are_read_a_page_at_a_time(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sweep's other two reads as well: a backlog of lost deletes or unsettled summaries is not read to
    its end before the first row is handled."""
    repo = module_services.knowledge
    monkeypatch.setattr(dynamo_knowledge, "SWEEP_PAGE_ROWS", 2)
    base = datetime(2004, 1, 1, tzinfo=UTC) + timedelta(seconds=uuid.uuid4().int % 10**7)
    deleting = [
        row(parse_status=ParseStatus.DELETING, updated_at=base + timedelta(milliseconds=n)) for n in range(5)
    ]
    for k in deleting:
        repo.insert(k)
    summarised = [row(parse_status=ParseStatus.COMPLETED) for _ in range(5)]
    for k in summarised:
        repo.insert(k)
        assert repo.set_summary_status(k.id, SummaryStatus.PROCESSING.value)
    pages: list[str] = []
    real_query = TableConnection.query

    def counted(self: TableConnection, *args: Any, **kwargs: Any) -> Any:
        pages.append(str(kwargs.get("index_name")))
        return real_query(self, *args, **kwargs)

    monkeypatch.setattr(TableConnection, "query", counted)
    rows = repo.deleting_older_than(to_iso(base + timedelta(seconds=1)))
    assert pages == []  # nothing read before the sweep asks for a row
    assert next(rows).id == deleting[0].id
    assert pages == ["inflight-index"]  # one page of two rows, not every row being deleted
    assert [k.id for k in rows] == [k.id for k in deleting[1:]]
    pages.clear()
    summaries = repo.summaries_unsettled_older_than(IN_AN_HOUR)
    assert pages == []
    first = next(summaries)
    assert pages == ["summary-inflight-index"]  # the table's other unsettled summaries wait their pages
    assert {k.id for k in summarised} <= {first.id} | {k.id for k in summaries}
    assert len(pages) >= 3  # five rows at least, two a page
