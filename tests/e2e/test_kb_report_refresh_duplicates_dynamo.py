"""Duplicate deliveries of a sliced report refresh on moto: the refresh's book is an item of the DynamoDB
turns table (a conditional write per claim) and its checkpoints are S3 objects; copies of a slice's
message delivered at once merge into one chain and no checkpoint outlives the refresh
(tests/service/test_kb_report_refresh_duplicates.py, on the in-memory fakes)."""

from __future__ import annotations

import pytest
from service.test_kb_report_refresh_duplicates import doc, pages_read_with_copies

from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.operations import cost, kb_report_refresh
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.tenants import create_tenant_with_key


def test_copies_of_a_slice_merge_on_the_dynamodb_book(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = module_services
    assert type(deps.turns).__name__ == "DynamoTurnBook" and type(deps.usage).__module__.endswith(
        "dynamo.usage"
    )
    monkeypatch.setattr(kb_report_refresh, "SLICE_SECONDS", 0)
    monkeypatch.setattr(cost, "USAGE_PAGE", 3)
    tenant, _ = create_tenant_with_key(deps, "report-copies")
    a = create_kb(deps, tenant.id, CreateKnowledgeBase(name="a"))
    b = create_kb(deps, tenant.id, CreateKnowledgeBase(name="b"))
    for n in range(10):
        doc(deps, a, n)
        doc(deps, b, 100 + n)
    single = pages_read_with_copies(deps, a, monkeypatch, 1)
    duplicated = pages_read_with_copies(deps, b, monkeypatch, 3)
    assert single == 14 and duplicated <= single + 2, (single, duplicated)
