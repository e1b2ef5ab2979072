"""Housekeeping's read of the in-flight index on DynamoDB (moto): a page is queried only when the sweep gets
to it, so a sweep out of time after a few rows has not read a large index to the end first."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pynamodb.connection.table import TableConnection
from service.repo_contract import row

from chalicelib.adapters.dynamo import knowledge as dynamo_knowledge
from chalicelib.bootstrap import Services
from chalicelib.domain.clock import to_iso


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
