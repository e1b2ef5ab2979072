"""A knowledge row's editable fields on DynamoDB (KnowledgeRepo.update_fields): one conditional UpdateItem,
or, with `storage_size`, one TransactWriteItems with the tenant's usage, so the row's stored size and the
usage move together (a growth within the storage quota, checked as mark_indexed checks it, unless
`within_quota` is off: a recount of bytes stored already). Apart from
adapters/dynamo/knowledge.py, which is at its size cap."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pynamodb.exceptions import TransactWriteError
from pynamodb.transactions import TransactWrite

from chalicelib.adapters.dynamo.tables import _condition_failed, _transaction_conflict
from chalicelib.domain.clock import now_iso
from chalicelib.domain.types import Knowledge, ParseStatus

if TYPE_CHECKING:
    from chalicelib.adapters.dynamo.knowledge import DynamoKnowledgeRepo


def _holds(attribute: Any, value: Any) -> Any:
    """`attribute` is `value`; an empty value also when the attribute is absent (an item written before
    the attribute had a default reads back as empty)."""
    if value is None:
        return attribute.does_not_exist()
    if value in ("", 0):
        return attribute.does_not_exist() | (attribute == value)
    return attribute == value


def update_fields(
    repo: DynamoKnowledgeRepo,
    knowledge_id: str,
    fields: Mapping[str, Any],
    expect: Mapping[str, Any] | None,
    storage_size: int | None,
    within_quota: bool = True,
) -> Knowledge | None:
    m = repo.model
    attributes = {
        "title": m.title,
        "description": m.description,
        "description_by_user": m.description_by_user,
        "metadata": m.meta,
        "tag_ids": m.tag_ids,
        "enable_status": m.enable_status,
        "file_path": m.file_path,
        "file_size": m.file_size,
        "file_hash": m.file_hash,
        "enrichment": m.enrichment,
        "storage_backend": m.storage_backend,
    }
    actions = [attributes[name].set(value) for name, value in fields.items()]
    actions.append(m.updated_at.set(now_iso()))
    condition = m.parse_status != ParseStatus.DELETING.value
    checked = {
        **attributes,
        "storage_size": m.storage_size,
        "attempt": m.attempt,
        "parse_status": m.parse_status,
    }
    for name, value in (expect or {}).items():
        if name not in checked:
            raise AttributeError(f"{name!r} cannot be expected")
        condition &= _holds(checked[name], value)
    if storage_size is None:
        return repo._update(knowledge_id, actions, condition)
    return _counted(repo, knowledge_id, actions, condition, storage_size, expect or {}, within_quota)


def _counted(
    repo: DynamoKnowledgeRepo,
    knowledge_id: str,
    actions: list[Any],
    condition: Any,
    size: int,
    expect: Mapping[str, Any],
    within_quota: bool,
) -> Knowledge | None:
    """The write with the row's `storage_size` set to `size`, in one transaction with the tenant's usage,
    which moves by the difference from the size read (the row's write holds only while it is still that
    size). A row read that no longer holds `expect` is None at once; a write that lost a race reads again.

        edit: row A size s0 ─ row fields, size = s1, tenant usage += s1 - s0 (within the quota) ─ commit
    """
    m = repo.model
    for _ in range(5):
        row = repo.get(knowledge_id)
        if row is None or row.parse_status == ParseStatus.DELETING:
            return None
        if any(getattr(row, name) != value for name, value in expect.items()):
            return None  # the statuses are StrEnums: "completed" is COMPLETED
        growth = size - row.storage_size
        usage = repo._storage(row.tenant_id) if growth else None
        # a growth past the quota read raises StorageQuotaExceeded here, before anything is written
        counted = None if usage is None else repo._usage_condition(usage, growth, within_quota)
        try:
            with TransactWrite(connection=repo.connection) as tx:
                tx.update(
                    m(knowledge_id),
                    actions=[*actions, m.storage_size.set(size)],
                    condition=condition & _holds(m.storage_size, row.storage_size) & m.id.exists(),
                )
                if counted is not None:
                    tx.update(
                        repo.tenant(row.tenant_id),
                        actions=[repo.tenant.storage_used.add(growth)],
                        condition=counted,
                    )
        except TransactWriteError as error:
            if not (_condition_failed(error) or _transaction_conflict(error)):
                raise
            time.sleep(0.05)  # the row or the tenant's usage moved meanwhile: read them again
            continue
        return repo.get(knowledge_id)
    return None
