"""Duplicate deliveries of a sliced report refresh on moto: the refresh's book is an item of the DynamoDB
turns table (a conditional write per claim) and its checkpoints are S3 objects; copies of a slice's
message delivered at once merge into one chain and no checkpoint outlives the refresh
(tests/service/test_kb_report_refresh_duplicates.py, on the in-memory fakes)."""

from __future__ import annotations

import json
import time

import pytest
from project_paths import ROOT
from service.test_kb_report_refresh_duplicates import doc, pages_read_with_copies, report_task

from chalicelib.adapters.dynamo.tables import build_models
from chalicelib.adapters.memory import memory_settings
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


def test_an_ended_refresh_book_expires_and_a_late_read_keeps_its_expiry(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each refresh left its turns-table item (`kb-report#<task id>`) for good: the table had no TTL. The
    ended book now carries `expires_at` (the table's TTL attribute) past SQS's 14 days, a late copy's read
    of it keeps that expiry, and a stage's door book has none."""
    deps = module_services
    monkeypatch.setattr(kb_report_refresh, "SLICE_SECONDS", 0)
    monkeypatch.setattr(cost, "USAGE_PAGE", 3)
    tenant, _ = create_tenant_with_key(deps, "report-expiry")
    kb = create_kb(deps, tenant.id, CreateKnowledgeBase(name="expiring"))
    for n in range(3):
        doc(deps, kb, 200 + n)
    before = int(time.time())
    pages_read_with_copies(deps, kb, monkeypatch, 1)
    name = kb_report_refresh.book_name(report_task(kb))
    model = deps.turns.model  # type: ignore[attr-defined]
    expiry = model.get(name, consistent_read=True).expires_at
    assert (
        expiry is not None
        and before + 14 * 24 * 3600 < expiry <= time.time() + kb_report_refresh.BOOK_KEPT_SECONDS
    )
    deps.turns.change(name, lambda book: (None, book))  # a late copy reads the ended book
    assert model.get(name, consistent_read=True).expires_at == expiry
    deps.turns.change("docreader", lambda book: (None, book))
    assert model.get("docreader", consistent_read=True).expires_at is None


def test_the_turns_table_expires_items_on_the_attribute_the_adapter_writes() -> None:
    template = json.loads((ROOT / "infra" / "template.json").read_text(encoding="utf-8"))
    ttl = template["Resources"]["TurnsTable"]["Properties"]["TimeToLiveSpecification"]
    assert ttl == {"AttributeName": "expires_at", "Enabled": True}
    model = build_models(memory_settings()).turns
    assert model is not None and model.expires_at.attr_name == ttl["AttributeName"]
