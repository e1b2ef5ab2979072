"""A delete racing a `mark_indexed` on DynamoDB (moto): the delete takes off the tenant the size the row
has when it goes, not the size it read before (the memory fake does both under one lock, so only the real
table can show the race)."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest
from service.repo_contract import row

from chalicelib.bootstrap import Services
from chalicelib.domain.types import ParseStatus, Tenant


def test_a_delete_racing_mark_indexed_leaves_no_bytes_counted(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = module_services
    tenant = Tenant(f"t-{uuid.uuid4().hex[:8]}", "race", uuid.uuid4().hex)
    deps.tenants.put(tenant)
    assert deps.tenants.reserve_document(tenant.id, 0)
    doc = replace(row(tenant_id=tenant.id, file_size=1000), parse_status=ParseStatus.PROCESSING)
    repo = deps.knowledge
    repo.insert(doc)
    count_documents = repo._document_count
    indexed_meanwhile: list[bool] = []

    def count_while_another_worker_indexes(tenant_id: str) -> int | None:
        counted = count_documents(tenant_id)
        if not indexed_meanwhile:  # between the delete's read and its commit, the row gets its size
            indexed_meanwhile.append(
                repo.mark_indexed(doc.id, doc.attempt, chunk_count=1, storage_size=1000, completed=True)
            )
        return counted

    monkeypatch.setattr(repo, "_document_count", count_while_another_worker_indexes)
    assert repo.delete(doc.id)
    assert indexed_meanwhile == [True]
    after = deps.tenants.get(tenant.id)
    assert repo.get(doc.id) is None
    assert after is not None and (after.storage_used, after.document_count) == (0, 0)
