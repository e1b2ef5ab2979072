"""Indexing counts the document's file at the size the write finds (`mark_indexed(add_file_size=True)`) on
DynamoDB (moto): an edit that changes the file between the adapter's read and its commit makes the write read
the row again, so the row never counts the size read before (the memory fake reads and writes under one
lock, so only the real table can show the race)."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest
from service.repo_contract import row

from chalicelib.bootstrap import Services
from chalicelib.domain.types import ParseStatus, Tenant


def test_mark_indexed_counts_the_file_size_an_edit_wrote_meanwhile(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    deps = module_services
    tenant = Tenant(f"t-{uuid.uuid4().hex[:8]}", "edit", uuid.uuid4().hex)
    deps.tenants.put(tenant)
    doc = replace(row(tenant_id=tenant.id, file_size=1000), parse_status=ParseStatus.PROCESSING)
    repo: Any = deps.knowledge
    repo.insert(doc)
    m = repo.model
    m(doc.id).update(actions=[m.storage_size.set(1000)])
    deps.tenants.add_usage(tenant.id, 1000)
    read = repo.get
    edited: list[bool] = []

    def read_then_edit(knowledge_id: str) -> Any:
        found = read(knowledge_id)
        if not edited:  # after the adapter's read, before its commit: the file grows by 500 bytes (the
            # row's stored size left as it was: the write's condition on the file size alone sees it)
            edited.append(True)
            m(doc.id).update(actions=[m.file_size.set(1500)])
        return found

    monkeypatch.setattr(repo, "get", read_then_edit)
    assert repo.mark_indexed(
        doc.id, doc.attempt, chunk_count=1, storage_size=200, completed=True, add_file_size=True
    )
    monkeypatch.undo()
    after, counted = repo.get(doc.id), deps.tenants.get(tenant.id)
    assert after is not None and counted is not None
    assert after.storage_size == 1500 + 200 == counted.storage_used
    assert edited == [True]
