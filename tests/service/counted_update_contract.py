"""The knowledge port's counted field write (`update_fields(..., storage_size=)`): the row's stored size and
the tenant's usage move together in one write, a growth within the tenant's storage quota. Asserted on the
in-memory fakes (tests/service) and on DynamoDB (tests/e2e, moto: one TransactWriteItems)."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from chalicelib.domain.ids import api_key_hash
from chalicelib.domain.types import Knowledge, KnowledgeType, ParseStatus, Tenant
from chalicelib.ports import KnowledgeRepo, StorageQuotaExceeded, TenantRepo


def new_id() -> str:
    return str(uuid.uuid4())


def _row(knowledge: KnowledgeRepo, tenants: TenantRepo, *, quota: int, used: int, size: int) -> Knowledge:
    tenant = Tenant(new_id(), "acme", api_key_hash(f"wk-{uuid.uuid4()}"))
    tenants.put(tenant)
    tenants.set_quotas(tenant.id, quota, 0)
    tenants.add_usage(tenant.id, used)
    written = Knowledge(
        id=new_id(),
        tenant_id=tenant.id,
        kb_id=f"kb-{uuid.uuid4().hex[:8]}",
        type=KnowledgeType.MANUAL,
        title="notes",
        file_name="notes.md",
        file_type="md",
        file_size=size,
        storage_size=size,
        parse_status=ParseStatus.DRAFT,
    )
    knowledge.insert(written)
    return written


def _state(knowledge: KnowledgeRepo, tenants: TenantRepo, written: Knowledge) -> tuple[int, int]:
    """(the row's storage_size, the tenant's storage_used)"""
    row, tenant = knowledge.get(written.id), tenants.get(written.tenant_id)
    assert row is not None and tenant is not None
    return row.storage_size, tenant.storage_used


class CountedUpdateContract:
    def test_a_growth_and_a_shrink_move_the_row_and_the_usage_together(
        self, knowledge: KnowledgeRepo, tenants: TenantRepo
    ) -> None:
        written = _row(knowledge, tenants, quota=1000, used=100, size=100)
        grown = knowledge.update_fields(
            written.id, {"file_size": 400}, expect={"storage_size": 100}, storage_size=400
        )
        assert grown is not None and (grown.storage_size, grown.file_size) == (400, 400)
        assert _state(knowledge, tenants, written) == (400, 400)
        # the same write again: its condition (the size read before) no longer holds, nothing counted twice
        assert knowledge.update_fields(written.id, {}, expect={"storage_size": 100}, storage_size=400) is None
        assert _state(knowledge, tenants, written) == (400, 400)
        shrunk = knowledge.update_fields(
            written.id, {"title": "t"}, expect={"storage_size": 400}, storage_size=5
        )
        assert shrunk is not None and shrunk.title == "t"
        assert _state(knowledge, tenants, written) == (5, 5)

    def test_a_growth_past_the_quota_raises_and_writes_nothing(
        self, knowledge: KnowledgeRepo, tenants: TenantRepo
    ) -> None:
        written = _row(knowledge, tenants, quota=500, used=100, size=100)
        with pytest.raises(StorageQuotaExceeded):
            knowledge.update_fields(
                written.id, {"title": "late"}, expect={"storage_size": 100}, storage_size=501
            )
        row = knowledge.get(written.id)
        assert row is not None and row.title == "notes"
        assert _state(knowledge, tenants, written) == (100, 100)
        assert knowledge.update_fields(written.id, {}, expect={"storage_size": 100}, storage_size=500)
        assert _state(knowledge, tenants, written) == (500, 500)  # exactly full fits

    def test_a_refused_expectation_or_a_deleting_row_counts_nothing(
        self, knowledge: KnowledgeRepo, tenants: TenantRepo
    ) -> None:
        written = _row(knowledge, tenants, quota=0, used=100, size=100)
        assert knowledge.update_fields(written.id, {}, expect={"attempt": 2}, storage_size=300) is None
        assert knowledge.update_fields(written.id, {}, expect={"file_size": 7}, storage_size=300) is None
        assert _state(knowledge, tenants, written) == (100, 100)
        assert knowledge.mark_deleting(written.id) is not None
        assert knowledge.update_fields(written.id, {}, storage_size=300) is None
        assert _state(knowledge, tenants, written) == (100, 100)
        assert knowledge.update_fields(new_id(), {}, storage_size=300) is None

    def test_no_tenant_row_still_writes_the_row(self, knowledge: KnowledgeRepo, tenants: TenantRepo) -> None:
        written = _row(knowledge, tenants, quota=0, used=0, size=10)
        orphan = replace(written, id=new_id(), tenant_id=new_id())
        knowledge.insert(orphan)
        updated = knowledge.update_fields(orphan.id, {}, expect={"storage_size": 10}, storage_size=40)
        assert updated is not None and updated.storage_size == 40
        assert tenants.get(orphan.tenant_id) is None
