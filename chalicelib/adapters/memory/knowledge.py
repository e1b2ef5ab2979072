"""Knowledge rows, in memory: the same conditional transitions as adapters/dynamo/knowledge.py."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from chalicelib.adapters.memory import knowledge_fields
from chalicelib.adapters.memory.clock import _ms, _now
from chalicelib.adapters.memory.tenants import MemoryTenantRepo
from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.listing import listing_source
from chalicelib.domain.status import (
    BEGIN_PROCESSING_FROM,
    CANCEL_FROM,
    DELETE_FROM,
    FAIL_FROM,
    MARK_INDEXED_FROM,
    REPARSE_FROM,
    holds_dedupe_claim,
    is_in_flight,
)
from chalicelib.domain.types import (
    EnableStatus,
    Knowledge,
    KnowledgeType,
    ParseStatus,
    SummaryStatus,
)
from chalicelib.ports import (
    DuplicateKnowledge,
    StorageQuotaExceeded,
)

if TYPE_CHECKING:
    pass


class MemoryKnowledgeRepo:
    """The knowledge table and its dedupe claims. Every transition is one check-and-set under a lock,
    with the same condition as the DynamoDB adapter's conditional update."""

    def __init__(self, tenants: MemoryTenantRepo | None = None) -> None:
        self._rows: dict[str, Knowledge] = {}
        self._claims: dict[str, str] = {}  # dedupe key -> knowledge id
        #: (knowledge id, attempt) -> the subtasks whose slot was released (the table's done_subtasks)
        self._released: dict[tuple[str, int], set[str]] = {}
        self._lock = threading.RLock()
        self.tenants = tenants  # where a delete takes the row's bytes off

    # -- reads
    def get(self, knowledge_id: str) -> Knowledge | None:
        with self._lock:
            row = self._rows.get(knowledge_id)
            return copy.deepcopy(row) if row else None

    def find_same_file(self, kb_id: str, file_type: str, file_name: str, size: int) -> Knowledge | None:
        with self._lock:
            for row in sorted(self._rows.values(), key=lambda k: k.created_at):
                if (
                    row.kb_id == kb_id
                    and row.type == KnowledgeType.FILE
                    and row.file_type.lower() == file_type.lower()
                    and (row.file_name, row.file_size) == (file_name, size)
                    and holds_dedupe_claim(row.parse_status)
                ):
                    return copy.deepcopy(row)
        return None

    def find_duplicate(self, dedupe_key: str) -> Knowledge | None:
        with self._lock:
            holder = self._rows.get(self._claims.get(dedupe_key, ""))
            return copy.deepcopy(holder) if holder and holds_dedupe_claim(holder.parse_status) else None

    def page_by_kb(
        self,
        kb_id: str,
        *,
        index: tuple[str, str] | None = None,
        created_from: str | None = None,
        created_to: str | None = None,
        after: tuple[str, str] | None = None,
        limit: int = 20,
    ) -> list[Knowledge]:
        """As the DynamoDB GSIs read: newest first by (created_at, id), strictly after `after`."""
        with self._lock:
            rows = [k for k in self._rows.values() if k.kb_id == kb_id and _listed(k, index)]
        keyed = sorted(((to_iso(k.created_at), k.id, k) for k in rows), key=lambda t: t[:2], reverse=True)
        out: list[Knowledge] = []
        for created, knowledge_id, k in keyed:
            if created_from is not None and created < created_from:
                continue
            if created_to is not None and created > created_to:
                continue
            if after is not None and (created, knowledge_id) >= after:
                continue
            out.append(copy.deepcopy(k))
            if len(out) >= limit:
                break
        return out

    def get_many(self, knowledge_ids: Sequence[str]) -> dict[str, Knowledge]:
        with self._lock:
            return {i: copy.deepcopy(self._rows[i]) for i in dict.fromkeys(knowledge_ids) if i in self._rows}

    def in_flight_older_than(self, cutoff_iso: str) -> list[Knowledge]:
        """Rows in flight (the sparse `inflight` marker) last updated before the cutoff, oldest first."""
        return self._older_than(cutoff_iso, lambda k: is_in_flight(k.parse_status))

    def in_flight_after(self, cutoff_iso: str, after: tuple[str, str] | None = None) -> Iterator[Knowledge]:
        """As the DynamoDB index pages: (updated_at, id) order, strictly after the position `after`."""

        def position(k: Knowledge) -> tuple[str, str]:
            return to_iso(k.updated_at), k.id

        rows = sorted(self.in_flight_older_than(cutoff_iso), key=position)
        return iter([k for k in rows if after is None or position(k) > after])

    def summaries_unsettled_older_than(self, cutoff_iso: str) -> Iterator[Knowledge]:
        return self._lazily(
            cutoff_iso, lambda k: k.summary_status in (SummaryStatus.PENDING, SummaryStatus.PROCESSING)
        )

    def _older_than(self, cutoff_iso: str, marked: Callable[[Knowledge], bool]) -> list[Knowledge]:
        with self._lock:
            rows = [
                copy.deepcopy(k)
                for k in self._rows.values()
                if marked(k) and to_iso(k.updated_at) < cutoff_iso
            ]
        return sorted(rows, key=lambda k: (to_iso(k.updated_at), k.id))

    def _lazily(self, cutoff_iso: str, marked: Callable[[Knowledge], bool]) -> Iterator[Knowledge]:
        """As the DynamoDB index is read: nothing before the caller asks for the first row."""
        yield from self._older_than(cutoff_iso, marked)

    # -- create and delete
    def insert(self, knowledge: Knowledge) -> None:
        """Claims the dedupe key and inserts the row in one step (DynamoDB: one transaction). A key held
        by a live row raises DuplicateKnowledge; one held by a failed or missing row is taken over."""
        row = self._stored(knowledge)
        with self._lock:
            if row.id in self._rows:
                raise DuplicateKnowledge(copy.deepcopy(self._rows[row.id]))  # as DynamoDB: that id's row
            key = row.dedupe_key
            if key:
                holder = self._rows.get(self._claims.get(key, ""))
                if holder is not None and holds_dedupe_claim(holder.parse_status):
                    raise DuplicateKnowledge(copy.deepcopy(holder))
                self._claims[key] = row.id
            self._rows[row.id] = row

    def delete(self, knowledge_id: str) -> bool:
        """The row, its claim, its bytes of the tenant's usage and its place in the tenant's document count, in
        one step (DynamoDB: a transaction)."""
        with self._lock:
            row = self._rows.pop(knowledge_id, None)
            if row is None:
                return False
            if row.dedupe_key and self._claims.get(row.dedupe_key) == knowledge_id:
                del self._claims[row.dedupe_key]  # a claim taken over by another row stays
            if self.tenants is not None:
                self.tenants.add_usage(row.tenant_id, -row.storage_size)
                self.tenants.release_document(row.tenant_id)
            return True

    def deleting_older_than(self, cutoff_iso: str) -> Iterator[Knowledge]:
        return self._lazily(cutoff_iso, lambda k: k.parse_status == ParseStatus.DELETING)

    def restart_delete_wait(self, knowledge_id: str, at_iso: str, *, not_written_after: str) -> bool:
        def restart(k: Knowledge) -> None:
            k.updated_at = from_iso(at_iso)

        def unchanged_since_read(k: Knowledge) -> bool:
            return k.parse_status == ParseStatus.DELETING and to_iso(k.updated_at) <= not_written_after

        return self._update(knowledge_id, unchanged_since_read, restart) is not None

    def publish(self, knowledge_id: str) -> Knowledge | None:
        def change(k: Knowledge) -> None:
            k.parse_status = ParseStatus.PENDING
            k.updated_at = _now()

        return self._update(knowledge_id, lambda k: k.parse_status == ParseStatus.DRAFT, change)

    def mark_deleting(self, knowledge_id: str, *, in_kb: str | None = None) -> Knowledge | None:
        def change(k: Knowledge) -> None:
            k.parse_status = ParseStatus.DELETING
            k.pending_subtasks_count = 0
            k.updated_at = _now()

        def there(k: Knowledge) -> bool:  # a knowledge base's delete: only while the row is still in it
            return in_kb is None or k.kb_id == in_kb

        updated = self._update(knowledge_id, lambda k: k.parse_status in DELETE_FROM and there(k), change)
        if updated is not None:
            return updated

        def touch(k: Knowledge) -> None:
            k.updated_at = _now()

        return self._update(
            knowledge_id, lambda k: k.parse_status == ParseStatus.DELETING and there(k), touch
        )

    def cancel(self, knowledge_id: str, message: str) -> Knowledge | None:
        def change(k: Knowledge) -> None:
            k.parse_status = ParseStatus.CANCELLED
            k.error_message, k.error_code = message, "CANCELLED"
            k.pending_subtasks_count = 0
            k.updated_at = _now()

        return self._update(knowledge_id, lambda k: k.parse_status in CANCEL_FROM, change)

    def settle_plan(
        self,
        knowledge_id: str,
        attempt: int,
        count: int,
        plan: Mapping[str, Any],
        *,
        summary_pending: bool = False,
    ) -> Knowledge | None:
        def change(k: Knowledge) -> None:
            k.enrichment = copy.deepcopy(dict(plan))
            if summary_pending:
                k.summary_status = SummaryStatus.PENDING
            k.pending_subtasks_count = max(0, count)
            if count > 0:
                k.parse_status = ParseStatus.FINALIZING
                k.error_message = ""
                self._released.pop((k.id, attempt), None)
            else:
                k.parse_status = ParseStatus.COMPLETED
            k.updated_at = _now()

        return self._update(
            knowledge_id,
            lambda k: k.attempt == attempt and k.parse_status == ParseStatus.PROCESSING,
            change,
        )

    def release_slot(self, knowledge_id: str, attempt: int, subtask_id: str) -> int | None:
        def releasable(k: Knowledge) -> bool:
            return (
                k.attempt == attempt
                and k.parse_status == ParseStatus.FINALIZING
                and k.pending_subtasks_count > 0
                and subtask_id not in self._released.get((k.id, attempt), set())
            )

        def change(k: Knowledge) -> None:
            k.pending_subtasks_count -= 1
            self._released.setdefault((k.id, attempt), set()).add(subtask_id)
            k.updated_at = _now()

        updated = self._update(knowledge_id, releasable, change)
        return None if updated is None else updated.pending_subtasks_count

    def slot_released(self, knowledge_id: str, attempt: int, subtask_id: str) -> bool:
        with self._lock:
            row = self._rows.get(knowledge_id)
            released = self._released.get((knowledge_id, attempt), set())
            return row is not None and row.attempt == attempt and subtask_id in released

    def plan_embedding(self, knowledge_id: str, attempt: int, plan: int, slices: int) -> bool:
        def plannable(k: Knowledge) -> bool:
            return k.attempt == attempt and k.parse_status == ParseStatus.PROCESSING and k.embed_plan < plan

        def change(k: Knowledge) -> None:
            k.embed_plan, k.embed_slices_pending = plan, max(0, slices)
            self._released.pop((k.id, -plan), None)
            k.updated_at = _now()

        return self._update(knowledge_id, plannable, change) is not None

    def release_embed_slice(self, knowledge_id: str, attempt: int, plan: int, slice_index: int) -> int | None:
        marker = str(slice_index)

        def releasable(k: Knowledge) -> bool:
            return (
                k.attempt == attempt
                and k.parse_status == ParseStatus.PROCESSING
                and k.embed_plan == plan
                and k.embed_slices_pending > 0
                and marker not in self._released.get((k.id, -plan), set())
            )

        def change(k: Knowledge) -> None:
            k.embed_slices_pending -= 1
            self._released.setdefault((k.id, -plan), set()).add(marker)
            k.updated_at = _now()

        updated = self._update(knowledge_id, releasable, change)
        return None if updated is None else updated.embed_slices_pending

    def finish_embedding(self, knowledge_id: str, attempt: int, plan: int) -> bool:
        def settled(k: Knowledge) -> bool:
            return k.attempt == attempt and k.embed_plan == plan and k.embed_slices_pending == 0

        def change(k: Knowledge) -> None:
            k.embed_slices_pending = -1

        return self._update(knowledge_id, settled, change) is not None

    def promote(self, knowledge_id: str, attempt: int) -> bool:
        def change(k: Knowledge) -> None:
            k.parse_status = ParseStatus.COMPLETED
            k.updated_at = _now()

        def last_slot_released(k: Knowledge) -> bool:
            return (
                k.attempt == attempt
                and k.parse_status == ParseStatus.FINALIZING
                and k.pending_subtasks_count == 0
            )

        return self._update(knowledge_id, last_slot_released, change) is not None

    def update_fields(
        self,
        knowledge_id: str,
        fields: Mapping[str, Any],
        *,
        expect: Mapping[str, Any] | None = None,
        storage_size: int | None = None,
        within_quota: bool = True,
    ) -> Knowledge | None:
        return knowledge_fields.update_fields(self, knowledge_id, fields, expect, storage_size, within_quota)

    def mark_queued(self, knowledge_id: str, attempt: int, stage: str, visible_at: str) -> None:
        def change(k: Knowledge) -> None:
            k.queued_stage, k.queued_at = stage, visible_at

        self._update(knowledge_id, lambda k: k.attempt == attempt and is_in_flight(k.parse_status), change)

    @staticmethod
    def _stored(knowledge: Knowledge) -> Knowledge:
        row = copy.deepcopy(knowledge)
        row.created_at, row.updated_at = _ms(row.created_at), _ms(row.updated_at)
        row.processed_at = _ms(row.processed_at) if row.processed_at else None
        return row

    # -- transitions
    def _update(
        self, knowledge_id: str, condition: Callable[[Knowledge], bool], change: Callable[[Knowledge], None]
    ) -> Knowledge | None:
        """One conditional write: `change` applies only when the row exists and `condition` holds."""
        with self._lock:
            row = self._rows.get(knowledge_id)
            if row is None or not condition(row):
                return None
            change(row)
            return copy.deepcopy(row)

    def begin_processing(self, knowledge_id: str, attempt: int) -> Knowledge | None:
        def change(k: Knowledge) -> None:
            k.parse_status = ParseStatus.PROCESSING
            k.error_message = k.error_code = ""
            k.updated_at = _now()

        return self._update(
            knowledge_id, lambda k: k.attempt == attempt and k.parse_status in BEGIN_PROCESSING_FROM, change
        )

    def mark_failed(
        self,
        knowledge_id: str,
        attempt: int | None,
        message: str,
        code: str,
        *,
        not_written_after: str | None = None,
    ) -> bool:
        def change(k: Knowledge) -> None:
            k.parse_status = ParseStatus.FAILED
            k.error_message, k.error_code = message[:2000], code
            k.pending_subtasks_count = 0
            k.updated_at = _now()

        def condition(k: Knowledge) -> bool:
            return (
                k.parse_status in FAIL_FROM
                and (attempt is None or k.attempt == attempt)
                and (not_written_after is None or to_iso(k.updated_at) <= not_written_after)
            )

        return self._update(knowledge_id, condition, change) is not None

    def mark_indexed(
        self,
        knowledge_id: str,
        attempt: int,
        *,
        chunk_count: int,
        storage_size: int,
        completed: bool,
        within_quota: bool = False,
        add_file_size: bool = False,
    ) -> bool:
        grown = 0

        def size_of(k: Knowledge) -> int:
            return storage_size + (k.file_size if add_file_size else 0)

        def change(k: Knowledge) -> None:
            nonlocal grown
            now = _now()
            grown = size_of(k) - k.storage_size
            k.enable_status = EnableStatus.ENABLED
            k.chunk_count, k.storage_size = chunk_count, size_of(k)
            k.processed_at = k.updated_at = now
            if completed:
                k.parse_status = ParseStatus.COMPLETED

        def condition(k: Knowledge) -> bool:
            return k.attempt == attempt and k.parse_status in MARK_INDEXED_FROM

        with self._lock:  # the row and the tenant's usage in one step, as DynamoDB's transaction
            row = self._rows.get(knowledge_id)
            tenant = self.tenants.get(row.tenant_id) if self.tenants is not None and row else None
            if within_quota and row is not None and tenant is not None and condition(row):
                growth = size_of(row) - row.storage_size
                if (
                    tenant.storage_quota
                    and growth > 0
                    and tenant.storage_used + growth > tenant.storage_quota
                ):
                    raise StorageQuotaExceeded(tenant.storage_used, tenant.storage_quota, growth)
            if self._update(knowledge_id, condition, change) is None:
                return False
            if self.tenants is not None and grown:
                self.tenants.add_usage(self._rows[knowledge_id].tenant_id, grown)
            return True

    def reset_for_reparse(
        self,
        knowledge_id: str,
        process_overrides: Mapping[str, Any] | None,
        unindexed_attempt: int | None = None,
        *,
        at_attempt: int | None = None,
    ) -> Knowledge:
        def allowed(k: Knowledge) -> bool:
            unindexed = unindexed_attempt is None or (
                k.attempt == unindexed_attempt and k.processed_at is None
            )
            at = at_attempt is None or k.attempt == at_attempt
            return k.parse_status in REPARSE_FROM and unindexed and at

        def change(k: Knowledge) -> None:
            k.attempt += 1
            k.parse_status = ParseStatus.PENDING
            k.enable_status = EnableStatus.DISABLED
            k.error_message = k.error_code = k.description = ""
            k.description_by_user = False
            k.summary_status = SummaryStatus.NONE
            k.processed_at = None
            k.pending_subtasks_count = k.chunk_count = 0
            k.updated_at = _now()
            if process_overrides is not None:
                k.process_overrides = copy.deepcopy(dict(process_overrides))

        updated = self._update(knowledge_id, allowed, change)
        if updated is None:
            raise LookupError(knowledge_id)
        return updated

    def restart_attempt(
        self, knowledge_id: str, attempt: int, from_statuses: frozenset[ParseStatus], unindexed: bool = False
    ) -> Knowledge | None:
        def change(k: Knowledge) -> None:
            k.attempt += 1
            k.parse_status = ParseStatus.PENDING
            k.enable_status = EnableStatus.DISABLED
            k.error_message = k.error_code = k.description = ""
            k.description_by_user = False
            k.summary_status = SummaryStatus.NONE
            k.processed_at = None
            k.pending_subtasks_count = k.chunk_count = 0
            k.updated_at = _now()

        def allowed(k: Knowledge) -> bool:
            return (
                k.attempt == attempt
                and k.parse_status in from_statuses
                and not (unindexed and k.processed_at is not None)
            )

        return self._update(knowledge_id, allowed, change)

    def set_summary_status(
        self,
        knowledge_id: str,
        status: str,
        *,
        only_if: str | None = None,
        description: str | None = None,
        attempt: int | None = None,
        not_written_after: str | None = None,
        occurrence: str = "",
    ) -> bool:
        def change(k: Knowledge) -> None:
            k.summary_status = SummaryStatus(status)
            k.summary_occurrence = occurrence
            k.updated_at = _now()
            if description is not None:
                k.description = description

        def condition(k: Knowledge) -> bool:
            return (
                (only_if is None or k.summary_status.value == only_if)
                and (attempt is None or k.attempt == attempt)
                and (not_written_after is None or to_iso(k.updated_at) <= not_written_after)
            )

        return self._update(knowledge_id, condition, change) is not None

    def move_to_kb(
        self, knowledge_id: str, from_kb_id: str, to_kb_id: str, dedupe_key: str
    ) -> Knowledge | None:
        """The row, its tags and its dedupe claim in one step under the lock (DynamoDB: one transaction)."""
        with self._lock:
            row = self._rows.get(knowledge_id)
            if row is None or row.kb_id != from_kb_id or row.parse_status != ParseStatus.COMPLETED:
                return None
            if dedupe_key:
                holder = self._rows.get(self._claims.get(dedupe_key, ""))
                if (
                    holder is not None
                    and holder.id != knowledge_id
                    and holds_dedupe_claim(holder.parse_status)
                ):
                    raise DuplicateKnowledge(copy.deepcopy(holder))
            if row.dedupe_key and self._claims.get(row.dedupe_key) == knowledge_id:
                del self._claims[row.dedupe_key]
            if dedupe_key:
                self._claims[dedupe_key] = knowledge_id
            row.kb_id, row.dedupe_key, row.tag_ids = to_kb_id, dedupe_key, []
            row.updated_at = _now()
            return copy.deepcopy(row)

    # -- not in the port
    def write_fields(self, knowledge_id: str, **changes: Any) -> Knowledge:
        """An unconditional write of fields, for what the port does not do: a test arranging a state (an
        aged row, a row the planner left finalizing)."""

        def change(k: Knowledge) -> None:
            for name, value in changes.items():
                if not hasattr(k, name):
                    raise AttributeError(f"Knowledge has no field {name!r}")
                setattr(k, name, _ms(value) if isinstance(value, datetime) else value)

        updated = self._update(knowledge_id, lambda k: True, change)
        if updated is None:
            raise LookupError(knowledge_id)
        return updated


# ---------------------------------------------------------------- chunks and spans


def _listed(k: Knowledge, index: tuple[str, str] | None) -> bool:
    if index is None:
        return True
    name, value = index
    if name == "source":
        return listing_source(k.type) == value
    if name == "file_type":
        return k.file_type == value
    raise ValueError(f"no listing index {name!r}")
