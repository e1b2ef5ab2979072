"""A knowledge row's editable fields in memory (KnowledgeRepo.update_fields), as
adapters/dynamo/knowledge_fields.py: one conditional write, or, with `storage_size`, the row's stored size
and the tenant's usage moved together under the repository's lock (a growth within the storage quota, the
tenants' conditional add that take_storage uses; with `within_quota` off, whatever the quota). Apart from adapters/memory/knowledge.py, at its size cap."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from chalicelib.adapters.memory.clock import _now
from chalicelib.domain.types import EnableStatus, Knowledge, ParseStatus
from chalicelib.ports import StorageQuotaExceeded

if TYPE_CHECKING:
    from chalicelib.adapters.memory.knowledge import MemoryKnowledgeRepo

EDITABLE = frozenset(
    {
        "title",
        "description",
        "description_by_user",
        "metadata",
        "tag_ids",
        "file_path",
        "file_size",
        "file_hash",
        "enrichment",
        "storage_backend",
    }
)


def update_fields(
    repo: MemoryKnowledgeRepo,
    knowledge_id: str,
    fields: Mapping[str, Any],
    expect: Mapping[str, Any] | None,
    storage_size: int | None,
    within_quota: bool = True,
) -> Knowledge | None:
    def change(k: Knowledge) -> None:
        for name, value in fields.items():
            if name not in EDITABLE and name != "enable_status":
                raise AttributeError(f"{name!r} is not editable")
            setattr(k, name, EnableStatus(value) if name == "enable_status" else copy.deepcopy(value))
        k.updated_at = _now()

    checked = {"enable_status", "attempt", "parse_status", "storage_size", *EDITABLE}
    wanted = dict(expect or {})
    if unknown := set(wanted) - checked:
        raise AttributeError(f"{sorted(unknown)!r} cannot be expected")

    def holds(k: Knowledge) -> bool:  # the statuses are StrEnums: "processing" is PROCESSING
        return k.parse_status != ParseStatus.DELETING and all(
            getattr(k, name) == value for name, value in wanted.items()
        )

    if storage_size is None:
        return repo._update(knowledge_id, holds, change)
    with repo._lock:  # the row and the tenant's usage in one step, as DynamoDB's transaction
        row = repo._rows.get(knowledge_id)
        if row is None or not holds(row):
            return None
        updated, growth = copy.deepcopy(row), storage_size - row.storage_size
        change(updated)  # an unknown field raises before anything is counted
        updated.storage_size = storage_size
        tenants = repo.tenants if growth else None
        tenant = tenants.get(row.tenant_id) if tenants is not None else None
        quota = tenant.storage_quota if tenant and within_quota else 0  # 0: no quota to hold
        if tenant and tenants and not tenants.add_usage_within(tenant.id, growth, growth, quota):
            raise StorageQuotaExceeded(tenant.storage_used, tenant.storage_quota, growth)
        repo._rows[knowledge_id] = updated
        return copy.deepcopy(updated)
