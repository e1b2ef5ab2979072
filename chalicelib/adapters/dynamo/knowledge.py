"""Knowledge rows in DynamoDB: conditional status transitions, dedupe claims, listing, counts.

One module over 600 lines: every method is a transition or a read of the same row and its claims, and
they share the conditions; split, a status change would be made in several files."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pynamodb.connection import Connection
from pynamodb.exceptions import (
    DoesNotExist,
    TransactWriteError,
    UpdateError,
)
from pynamodb.transactions import TransactWrite

from chalicelib.adapters.dynamo import knowledge_fields
from chalicelib.adapters.dynamo.tables import (
    DELETING_MARKER,
    IN_FLIGHT,
    Models,
    _condition_failed,
    _iso_or_none,
    _transaction_conflict,
    _values,
)
from chalicelib.domain.clock import from_iso, now_iso, to_iso
from chalicelib.domain.ids import same_file_key
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

#: rows per page of housekeeping's queries (in flight, deleting, unsettled summaries): a page is read only
#: when the sweep gets to it
SWEEP_PAGE_ROWS = 100


def _same_file(k: Knowledge, kb_id: str) -> str | None:
    if k.type != KnowledgeType.FILE or not k.file_type:
        return None
    return same_file_key(kb_id, k.file_type, k.file_name, k.file_size)


def _not_written_after(m: Any, iso: str) -> Any:
    """The row's `updated_at` is no later than `iso` (a to_iso time the caller read). The state machine writes
    `$$.State.EnteredTime`, which drops a zero millisecond part (`…:06Z`, which sorts after `…:06.000Z`), so
    the time read back from that form is matched as written too."""
    condition = m.updated_at <= iso
    if iso.endswith(".000Z"):
        condition |= m.updated_at == iso.removesuffix(".000Z") + "Z"
    return condition


class DynamoKnowledgeRepo:
    def __init__(self, models: Models, region: str):
        self.model = models.knowledge
        self.dedupe = models.dedupe
        self.tenant = models.tenant
        self.connection = Connection(region=region)

    # -- mapping
    def _to_item(self, k: Knowledge) -> Any:
        return self.model(
            k.id,
            tenant_id=k.tenant_id,
            kb_id=k.kb_id,
            type=k.type.value,
            title=k.title,
            description=k.description,
            description_by_user=k.description_by_user,
            source=k.source,
            file_name=k.file_name,
            file_type=k.file_type,
            file_size=k.file_size,
            file_hash=k.file_hash,
            file_path=k.file_path,
            storage_backend=k.storage_backend,
            parse_status=k.parse_status.value,
            enable_status=k.enable_status.value,
            summary_status=k.summary_status.value,
            summary_occurrence=k.summary_occurrence or None,
            error_message=k.error_message,
            error_code=k.error_code,
            attempt=k.attempt,
            pending_subtasks_count=k.pending_subtasks_count,
            embed_plan=k.embed_plan or None,
            embed_slices_pending=k.embed_slices_pending,
            queued_stage=k.queued_stage,
            queued_at=k.queued_at,
            enrichment=k.enrichment,
            enable_multimodel=k.enable_multimodel,
            meta=k.metadata,
            process_overrides=k.process_overrides,
            tag_ids=k.tag_ids,
            channel=k.channel,
            folder_path=k.folder_path,
            storage_size=k.storage_size,
            chunk_count=k.chunk_count,
            dedupe_key=k.dedupe_key,
            created_at=to_iso(k.created_at),
            updated_at=to_iso(k.updated_at),
            processed_at=_iso_or_none(k.processed_at),
            inflight="1"
            if is_in_flight(k.parse_status)
            else (DELETING_MARKER if k.parse_status == ParseStatus.DELETING else None),
            kb_source=f"{k.kb_id}#{listing_source(k.type)}",
            kb_type=f"{k.kb_id}#{k.file_type}" if k.file_type else None,
            kb_same_file=_same_file(k, k.kb_id),
        )

    @staticmethod
    def _from_item(item: Any) -> Knowledge:
        return Knowledge(
            id=item.id,
            tenant_id=item.tenant_id,
            kb_id=item.kb_id,
            type=KnowledgeType(item.type),
            title=item.title or "",
            description=item.description or "",
            description_by_user=bool(item.description_by_user),
            source=item.source or "",
            file_name=item.file_name or "",
            file_type=item.file_type or "",
            file_size=int(item.file_size or 0),
            file_hash=item.file_hash or "",
            file_path=item.file_path or "",
            storage_backend=item.storage_backend or "",
            parse_status=ParseStatus(item.parse_status),
            enable_status=EnableStatus(item.enable_status),
            summary_status=SummaryStatus(item.summary_status or "none"),
            summary_occurrence=item.summary_occurrence or "",
            error_message=item.error_message or "",
            error_code=item.error_code or "",
            attempt=int(item.attempt or 1),
            pending_subtasks_count=int(item.pending_subtasks_count or 0),
            embed_plan=int(item.embed_plan or 0),
            embed_slices_pending=int(item.embed_slices_pending or 0),
            queued_stage=item.queued_stage or "",
            queued_at=item.queued_at or "",
            enrichment=dict(item.enrichment or {}),
            enable_multimodel=bool(item.enable_multimodel),
            metadata=dict(item.meta or {}),
            process_overrides=dict(item.process_overrides or {}),
            tag_ids=list(item.tag_ids or []),
            channel=item.channel or "api",
            folder_path=item.folder_path or "",
            storage_size=int(item.storage_size or 0),
            chunk_count=int(item.chunk_count or 0),
            dedupe_key=item.dedupe_key or "",
            created_at=from_iso(item.created_at),
            updated_at=from_iso(item.updated_at),
            processed_at=from_iso(item.processed_at) if item.processed_at else None,
        )

    # -- reads
    def get(self, knowledge_id: str) -> Knowledge | None:
        try:
            return self._from_item(self.model.get(knowledge_id, consistent_read=True))
        except DoesNotExist:
            return None

    def find_same_file(self, kb_id: str, file_type: str, file_name: str, size: int) -> Knowledge | None:
        key = same_file_key(kb_id, file_type, file_name, size)
        for item in self.model.kb_same_file_index.query(key):
            holder = self.get(item.id)
            if holder is not None and holder.kb_id == kb_id and self._holds_claim(holder):
                return holder
        return None

    def find_duplicate(self, dedupe_key: str) -> Knowledge | None:
        try:
            claim = self.dedupe.get(dedupe_key, consistent_read=True)
        except DoesNotExist:
            return None
        holder = self.get(claim.knowledge_id)
        return holder if holder and self._holds_claim(holder) else None

    @staticmethod
    def _holds_claim(k: Knowledge) -> bool:
        return holds_dedupe_claim(k.parse_status)

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
        m = self.model
        if index is None:
            gsi, hash_name, hash_value = m.kb_index, "kb_id", kb_id
        elif index[0] == "source":
            gsi, hash_name, hash_value = m.kb_source_index, "kb_source", f"{kb_id}#{index[1]}"
        elif index[0] == "file_type":
            gsi, hash_name, hash_value = m.kb_type_index, "kb_type", f"{kb_id}#{index[1]}"
        else:
            raise ValueError(f"no listing index {index[0]!r}")
        condition = None
        if created_from is not None and created_to is not None:
            condition = m.created_at.between(created_from, created_to)
        elif created_from is not None:
            condition = m.created_at >= created_from
        elif created_to is not None:
            condition = m.created_at <= created_to
        start = None
        if after is not None:
            start = {
                "id": {"S": after[1]},
                hash_name: {"S": hash_value},
                "created_at": {"S": after[0]},
            }
        query = gsi.query(
            hash_value,
            condition,
            scan_index_forward=False,
            limit=limit,
            page_size=limit,
            last_evaluated_key=start,
        )
        return [self._from_item(i) for i in query]

    def get_many(self, knowledge_ids: Sequence[str]) -> dict[str, Knowledge]:
        items = self.model.batch_get(list(dict.fromkeys(knowledge_ids)), consistent_read=True)
        return {item.id: self._from_item(item) for item in items}

    def backfill_listing_keys(self) -> int:
        """One-off migration (scripts/backfill_listing_keys.py): rows written before the listing GSIs get
        `kb_source` and `kb_type`, and file rows written before the same-file index `kb_same_file`. A scan,
        run once at deploy; safe to run again (rows that have the keys are left alone). Returns the rows
        updated."""
        m = self.model
        updated = 0
        missing = m.kb_source.does_not_exist() | (
            (m.type == KnowledgeType.FILE.value) & m.kb_same_file.does_not_exist()
        )
        for item in m.scan(missing):
            knowledge = self._from_item(item)
            actions = [m.kb_source.set(f"{knowledge.kb_id}#{listing_source(knowledge.type)}")]
            if knowledge.file_type:
                actions.append(m.kb_type.set(f"{knowledge.kb_id}#{knowledge.file_type}"))
            if same := _same_file(knowledge, knowledge.kb_id):
                actions.append(m.kb_same_file.set(same))
            if self._update(knowledge.id, actions, m.kb_id == knowledge.kb_id) is not None:
                updated += 1
        return updated

    def in_flight_older_than(self, cutoff_iso: str) -> list[Knowledge]:
        return list(self.in_flight_after(cutoff_iso))

    def in_flight_after(self, cutoff_iso: str, after: tuple[str, str] | None = None) -> Iterator[Knowledge]:
        """Lazy: a page is read when the caller gets to it (housekeeping stops when its time is up)."""
        if after is not None and after[0] >= cutoff_iso:
            return iter(())  # a start outside the key condition is refused: nothing is after it anyway
        start = None
        if after is not None:  # the index's key and the table's: the row need not be there any more
            start = {"inflight": {"S": "1"}, "updated_at": {"S": after[0]}, "id": {"S": after[1]}}
        query = self.model.inflight_index.query(
            "1", self.model.updated_at < cutoff_iso, last_evaluated_key=start, page_size=SWEEP_PAGE_ROWS
        )
        return (self._from_item(i) for i in query)

    def summaries_unsettled_older_than(self, cutoff_iso: str) -> Iterator[Knowledge]:
        """Lazy, as `in_flight_after`: a page is read when the caller gets to it."""
        query = self.model.summary_index.query(
            "1", self.model.updated_at < cutoff_iso, page_size=SWEEP_PAGE_ROWS
        )
        return (self._from_item(i) for i in query)

    # -- create
    def insert(self, knowledge: Knowledge) -> None:
        """Claim the dedupe key and insert the row in one transaction: two racing uploads of the same
        content cannot both win, because only one conditional put of the claim can succeed.

            upload A: claim(key) ok ─ insert(A) ok ─ commit
            upload B: claim(key) ✗ (A holds it) ─ nothing written ─ 409 with A
        """
        item = self._to_item(knowledge)
        if not knowledge.dedupe_key:
            item.save(condition=self.model.id.does_not_exist())
            return
        claim = self.dedupe(knowledge.dedupe_key, knowledge_id=knowledge.id)
        for attempt in range(5):
            try:
                with TransactWrite(connection=self.connection) as tx:
                    tx.save(claim, condition=self.dedupe.dedupe_key.does_not_exist())
                    tx.save(item, condition=self.model.id.does_not_exist())
                return
            except TransactWriteError as error:
                if _transaction_conflict(error):
                    time.sleep(0.05 * (attempt + 1))
                    continue
                if not _condition_failed(error):
                    raise
            holder_id = self._claim_holder(knowledge.dedupe_key)
            if holder_id is None:
                continue  # the claim vanished between our write and read: try again
            holder = self.get(holder_id)
            # this very id holds it (whatever its state): the id's own row is there, no take-over can insert
            if holder is not None and (holder.id == knowledge.id or self._holds_claim(holder)):
                raise DuplicateKnowledge(holder)
            # A failed or deleted row holds the claim: take it over, guarded on the old holder.
            try:
                with TransactWrite(connection=self.connection) as tx:
                    tx.save(claim, condition=self.dedupe.knowledge_id == holder_id)
                    tx.save(item, condition=self.model.id.does_not_exist())
                return
            except TransactWriteError as error:
                if not (_condition_failed(error) or _transaction_conflict(error)):
                    raise
        raise RuntimeError(f"could not claim dedupe key {knowledge.dedupe_key} after 5 tries")

    def _claim_holder(self, dedupe_key: str) -> str | None:
        try:
            return str(self.dedupe.get(dedupe_key, consistent_read=True).knowledge_id)
        except DoesNotExist:
            return None

    def delete(self, knowledge_id: str) -> bool:
        """Deletes the row, releases its dedupe claim and takes its bytes and its place off the tenant's
        counts, in one transaction: a retried delete can neither release a claim another row holds nor count
        twice, and a failure after the row went cannot leave its counts behind.

            delete A: row A exists, size s ─ claim held by A ─ tenant usage -= s, documents -= 1 ─ commit
            retry:    row A gone           ─ nothing to do (False)
            raced:    row A size changed (mark_indexed) since the read ─ read again
        """
        m = self.model
        for _ in range(5):
            knowledge = self.get(knowledge_id)
            if knowledge is None:
                return False
            counted = self._document_count(knowledge.tenant_id)  # None: no tenant item to count on
            # the size taken off the tenant must be the row's size at commit: a mark_indexed in between
            # would otherwise leave its growth counted for a row that is gone
            same_size = m.storage_size == knowledge.storage_size
            if not knowledge.storage_size:
                same_size = same_size | m.storage_size.does_not_exist()
            try:
                with TransactWrite(connection=self.connection) as tx:
                    tx.delete(self.model(knowledge_id), condition=m.id.exists() & same_size)
                    if knowledge.dedupe_key and self._claim_holder(knowledge.dedupe_key) == knowledge_id:
                        tx.delete(
                            self.dedupe(knowledge.dedupe_key),
                            condition=self.dedupe.knowledge_id == knowledge_id,
                        )
                    tenant = self.tenant
                    actions = (
                        [tenant.storage_used.add(-knowledge.storage_size)] if knowledge.storage_size else []
                    )
                    if counted:  # never below zero: a count from before quotas existed starts at zero
                        actions.append(tenant.document_count.add(-1))
                    if actions and counted is not None:
                        condition = tenant.id.exists()
                        if counted:
                            condition = condition & (tenant.document_count > 0)
                        tx.update(self.tenant(knowledge.tenant_id), actions=actions, condition=condition)
                return True
            except TransactWriteError as error:
                if not (_condition_failed(error) or _transaction_conflict(error)):
                    raise
                time.sleep(0.05)  # the row or the claim changed under us: read again
        raise RuntimeError(f"could not delete knowledge {knowledge_id} after 5 tries")

    def deleting_older_than(self, cutoff_iso: str) -> Iterator[Knowledge]:
        """Lazy, as `in_flight_after`: a page is read when the caller gets to it."""
        query = self.model.inflight_index.query(
            DELETING_MARKER, self.model.updated_at < cutoff_iso, page_size=SWEEP_PAGE_ROWS
        )
        return (self._from_item(i) for i in query)

    def restart_delete_wait(self, knowledge_id: str, at_iso: str, *, not_written_after: str) -> bool:
        m = self.model
        unchanged_since_read = (m.parse_status == ParseStatus.DELETING.value) & _not_written_after(
            m, not_written_after
        )
        return self._update(knowledge_id, [m.updated_at.set(at_iso)], unchanged_since_read) is not None

    def publish(self, knowledge_id: str) -> Knowledge | None:
        m = self.model
        return self._update(
            knowledge_id,
            [m.parse_status.set(ParseStatus.PENDING.value), m.updated_at.set(now_iso()), m.inflight.set("1")],
            m.parse_status == ParseStatus.DRAFT.value,
        )

    # -- transitions
    def _update(self, knowledge_id: str, actions: list[Any], condition: Any) -> Knowledge | None:
        item = self.model(knowledge_id)
        try:
            item.update(actions=actions, condition=condition & self.model.id.exists())
        except UpdateError as error:
            if _condition_failed(error):
                return None
            raise
        return self._from_item(item)

    def begin_processing(self, knowledge_id: str, attempt: int) -> Knowledge | None:
        m = self.model
        return self._update(
            knowledge_id,
            [
                m.parse_status.set(ParseStatus.PROCESSING.value),
                m.error_message.set(""),
                m.error_code.set(""),
                m.updated_at.set(now_iso()),
                m.inflight.set("1"),
            ],
            (m.attempt == attempt) & m.parse_status.is_in(*_values(BEGIN_PROCESSING_FROM)),
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
        m = self.model
        condition = m.parse_status.is_in(*_values(FAIL_FROM))
        if attempt is not None:
            condition &= m.attempt == attempt
        if not_written_after is not None:
            condition &= _not_written_after(m, not_written_after)
        return (
            self._update(
                knowledge_id,
                [
                    m.parse_status.set(ParseStatus.FAILED.value),
                    m.error_message.set(message[:2000]),
                    m.error_code.set(code),
                    m.pending_subtasks_count.set(0),
                    m.updated_at.set(now_iso()),
                    m.inflight.remove(),
                ],
                condition,
            )
            is not None
        )

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
        """One transaction with the tenant's usage, which grows by what the row's size grows: a redelivery
        finds the size already set and adds nothing, and a failure cannot set the one without the other
        (with `add_file_size`, the size counts the file size read here, which the write's condition holds).

            index A: row A at `attempt`, size s0 ─ row size = s1, tenant usage += s1 - s0 ─ commit
            again:   row A size s1                ─ row size = s1, usage unchanged
        """
        m = self.model
        for _ in range(5):
            row = self.get(knowledge_id)
            if row is None or row.attempt != attempt or row.parse_status not in MARK_INDEXED_FROM:
                return False
            now = now_iso()
            size = storage_size + (row.file_size if add_file_size else 0)
            actions = [
                m.enable_status.set(EnableStatus.ENABLED.value),
                m.chunk_count.set(chunk_count),
                m.storage_size.set(size),
                m.processed_at.set(now),
                m.updated_at.set(now),
            ]
            if completed:
                actions += [m.parse_status.set(ParseStatus.COMPLETED.value), m.inflight.remove()]
            same_size = m.storage_size == row.storage_size
            if not row.storage_size:
                same_size = same_size | m.storage_size.does_not_exist()
            condition = (m.attempt == attempt) & m.parse_status.is_in(*_values(MARK_INDEXED_FROM)) & same_size
            if add_file_size:  # an edit that changed the file since the read: read again
                same_file = m.file_size == row.file_size
                condition &= (same_file | m.file_size.does_not_exist()) if not row.file_size else same_file
            growth = size - row.storage_size
            usage = self._storage(row.tenant_id) if growth else None
            try:
                with TransactWrite(connection=self.connection) as tx:
                    tx.update(self.model(knowledge_id), actions=actions, condition=condition)
                    if usage is not None:
                        tx.update(
                            self.tenant(row.tenant_id),
                            actions=[self.tenant.storage_used.add(growth)],
                            condition=self._usage_condition(usage, growth, within_quota),
                        )
                return True
            except TransactWriteError as error:
                if not (_condition_failed(error) or _transaction_conflict(error)):
                    raise
                time.sleep(0.05)  # the row moved meanwhile: read it again
        raise RuntimeError(f"could not mark knowledge {knowledge_id} indexed after 5 tries")

    def _storage(self, tenant_id: str) -> tuple[int, int] | None:
        """The tenant's (storage_used, storage_quota); None when the tenant has no item (nothing to count on)."""
        try:
            item = self.tenant.get(
                tenant_id, consistent_read=True, attributes_to_get=["id", "storage_used", "storage_quota"]
            )
        except DoesNotExist:
            return None
        return int(item.storage_used or 0), int(item.storage_quota or 0)

    def _usage_condition(self, usage: tuple[int, int], growth: int, within_quota: bool) -> Any:
        """The tenant item exists; with `within_quota`, a growth past the quota read raises here, and the
        write holds only while usage and quota stay where they leave room (else it is read again)."""
        condition = self.tenant.id.exists()
        used, quota = usage
        if not (within_quota and quota and growth > 0):
            return condition
        if used + growth > quota:
            raise StorageQuotaExceeded(used, quota, growth)
        room = self.tenant.storage_used <= quota - growth
        if not used:
            room = room | self.tenant.storage_used.does_not_exist()
        return condition & (self.tenant.storage_quota == quota) & room

    def _document_count(self, tenant_id: str) -> int | None:
        """The tenant's document count; None when the tenant has no item (nothing to count on)."""
        try:
            item = self.tenant.get(
                tenant_id, consistent_read=True, attributes_to_get=["id", "document_count"]
            )
        except DoesNotExist:
            return None
        return int(item.document_count or 0)

    def _new_attempt_actions(self) -> list[Any]:
        """attempt+1, pending and disabled, errors, description, summary state and counters cleared (an
        earlier attempt's summary left pending or processing would be swept as the new attempt's, stuck)."""
        m = self.model
        return [
            m.attempt.add(1),
            m.parse_status.set(ParseStatus.PENDING.value),
            m.summary_status.set(SummaryStatus.NONE.value),
            m.summary_inflight.remove(),
            m.enable_status.set(EnableStatus.DISABLED.value),
            m.error_message.set(""),
            m.error_code.set(""),
            m.description.set(""),
            m.description_by_user.set(False),
            m.processed_at.remove(),
            m.pending_subtasks_count.set(0),
            m.done_subtasks.remove(),
            m.chunk_count.set(0),
            m.updated_at.set(now_iso()),
            m.inflight.set("1"),
        ]

    def restart_attempt(
        self, knowledge_id: str, attempt: int, from_statuses: frozenset[ParseStatus], unindexed: bool = False
    ) -> Knowledge | None:
        m = self.model
        # redrive A ─ row at attempt N, failed ─ attempt N+1 ─ commit
        # redrive B ─ reads the same dead message (attempt N) ─ condition fails: the row moved on ─ None
        condition = (m.attempt == attempt) & m.parse_status.is_in(*_values(from_statuses))
        if unindexed:  # the caller then removes attempt N's outputs: nothing counts them
            condition &= m.processed_at.does_not_exist()
        return self._update(knowledge_id, self._new_attempt_actions(), condition)

    def reset_for_reparse(
        self,
        knowledge_id: str,
        process_overrides: Mapping[str, Any] | None,
        unindexed_attempt: int | None = None,
        *,
        at_attempt: int | None = None,
    ) -> Knowledge:
        m = self.model
        actions = self._new_attempt_actions()
        if process_overrides is not None:
            actions.append(m.process_overrides.set(dict(process_overrides)))
        condition = m.parse_status.is_in(*_values(REPARSE_FROM))
        if unindexed_attempt is not None:
            condition &= (m.attempt == unindexed_attempt) & m.processed_at.does_not_exist()
        if at_attempt is not None:
            condition &= m.attempt == at_attempt
        updated = self._update(knowledge_id, actions, condition)
        if updated is None:
            raise LookupError(knowledge_id)
        return updated

    def mark_deleting(self, knowledge_id: str, *, in_kb: str | None = None) -> Knowledge | None:
        m = self.model
        # a knowledge base's delete takes only the rows still in it: a row moved out meanwhile is not its own
        where = (m.kb_id == in_kb) if in_kb is not None else m.id.exists()
        updated = self._update(
            knowledge_id,
            [
                m.parse_status.set(ParseStatus.DELETING.value),
                m.pending_subtasks_count.set(0),
                m.updated_at.set(now_iso()),
                m.inflight.set(DELETING_MARKER),  # housekeeping re-drives a delete whose task was lost
                m.summary_inflight.remove(),
            ],
            m.parse_status.is_in(*_values(DELETE_FROM)) & where,
        )
        if updated is not None:
            return updated
        # already being deleted: this try is under way now, so housekeeping waits its whole cutoff again
        return self._update(
            knowledge_id,
            [m.updated_at.set(now_iso())],
            (m.parse_status == ParseStatus.DELETING.value) & where,
        )

    def cancel(self, knowledge_id: str, message: str) -> Knowledge | None:
        m = self.model
        return self._update(
            knowledge_id,
            [
                m.parse_status.set(ParseStatus.CANCELLED.value),
                m.error_message.set(message),
                m.error_code.set("CANCELLED"),
                m.pending_subtasks_count.set(0),
                m.updated_at.set(now_iso()),
                m.inflight.remove(),
            ],
            m.parse_status.is_in(*_values(CANCEL_FROM)),
        )

    def settle_plan(
        self,
        knowledge_id: str,
        attempt: int,
        count: int,
        plan: Mapping[str, Any],
        *,
        summary_pending: bool = False,
    ) -> Knowledge | None:
        m = self.model
        now = now_iso()
        actions: list[Any] = [m.enrichment.set(dict(plan)), m.updated_at.set(now)]
        if summary_pending:
            actions += [m.summary_status.set(SummaryStatus.PENDING.value), m.summary_inflight.set("1")]
        if count > 0:
            actions += [
                m.parse_status.set(ParseStatus.FINALIZING.value),
                m.pending_subtasks_count.set(count),
                m.error_message.set(""),
                m.done_subtasks.remove(),
            ]
        else:
            actions += [
                m.parse_status.set(ParseStatus.COMPLETED.value),
                m.pending_subtasks_count.set(0),
                m.inflight.remove(),
            ]
        # planner A ─ processing, attempt N ─ finalizing(count) ─ answers the plan
        # planner A' (a second copy) ─ condition fails: it answers the plan now stored on the row
        # cancel / reparse first ─ condition fails: the plan is answered "skipped", nothing runs
        condition = (m.attempt == attempt) & (m.parse_status == ParseStatus.PROCESSING.value)
        return self._update(knowledge_id, actions, condition)

    def release_slot(self, knowledge_id: str, attempt: int, subtask_id: str) -> int | None:
        m = self.model
        # worker ─ work durable ─ release (count 2→1, subtask added) ─ SendTaskSuccess
        # redelivered ─ subtask already in done_subtasks ─ condition fails: counted once
        # timed out meanwhile ─ the machine's Catch released it first ─ condition fails: counted once
        condition = (
            (m.attempt == attempt)
            & (m.parse_status == ParseStatus.FINALIZING.value)
            & (m.pending_subtasks_count > 0)
            & ~m.done_subtasks.contains(subtask_id)
        )
        updated = self._update(
            knowledge_id,
            [
                m.pending_subtasks_count.set(m.pending_subtasks_count - 1),
                m.done_subtasks.add({subtask_id}),
                m.updated_at.set(now_iso()),
            ],
            condition,
        )
        return None if updated is None else updated.pending_subtasks_count

    def slot_released(self, knowledge_id: str, attempt: int, subtask_id: str) -> bool:
        try:
            item = self.model.get(
                knowledge_id, consistent_read=True, attributes_to_get=["id", "attempt", "done_subtasks"]
            )
        except DoesNotExist:
            return False
        return item.attempt == attempt and subtask_id in (item.done_subtasks or set())

    def plan_embedding(self, knowledge_id: str, attempt: int, plan: int, slices: int) -> bool:
        m = self.model
        # planner A ─ processing, no plan ─ plan(key, N) ─ deletes old entries ─ sends the slices
        # planner A' (a second copy) ─ condition fails: it only sends the slices again (each counts once)
        # reparse first ─ attempt moved on ─ condition fails: nothing is planned
        condition = (
            (m.attempt == attempt)
            & (m.parse_status == ParseStatus.PROCESSING.value)
            & (m.embed_plan.does_not_exist() | (m.embed_plan < plan))
        )
        actions = [
            m.embed_plan.set(plan),
            m.embed_slices_pending.set(max(0, slices)),
            m.embed_slices_done.remove(),
            m.updated_at.set(now_iso()),
        ]
        return self._update(knowledge_id, actions, condition) is not None

    def release_embed_slice(self, knowledge_id: str, attempt: int, plan: int, slice_index: int) -> int | None:
        m = self.model
        marker = str(slice_index)
        # slice A ─ work durable ─ release (3→2, marker added)
        # slice A again (redelivered) ─ marker present ─ condition fails: counted once
        # slice C ─ release (1→0) ─ hands over to the next stage, alone
        condition = (
            (m.attempt == attempt)
            & (m.parse_status == ParseStatus.PROCESSING.value)
            & (m.embed_plan == plan)
            & (m.embed_slices_pending > 0)
            & ~m.embed_slices_done.contains(marker)
        )
        updated = self._update(
            knowledge_id,
            [
                m.embed_slices_pending.add(-1),
                m.embed_slices_done.add({marker}),
                m.updated_at.set(now_iso()),
            ],
            condition,
        )
        return None if updated is None else updated.embed_slices_pending

    def finish_embedding(self, knowledge_id: str, attempt: int, plan: int) -> bool:
        m = self.model
        # last slice ─ release (1→0) ─ mark indexed ─ start the state machine ─ finish (0→-1)
        # a late duplicate ─ finds -1: nothing to do; finds 0 (the last one died mid hand-over): hands over
        condition = (m.attempt == attempt) & (m.embed_plan == plan) & (m.embed_slices_pending == 0)
        return self._update(knowledge_id, [m.embed_slices_pending.set(-1)], condition) is not None

    def promote(self, knowledge_id: str, attempt: int) -> bool:
        m = self.model
        condition = (
            (m.attempt == attempt)
            & (m.parse_status == ParseStatus.FINALIZING.value)
            & (m.pending_subtasks_count == 0)
        )
        actions = [
            m.parse_status.set(ParseStatus.COMPLETED.value),
            m.updated_at.set(now_iso()),
            m.inflight.remove(),
        ]
        return self._update(knowledge_id, actions, condition) is not None

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
        m = self.model
        self._update(
            knowledge_id,
            [m.queued_stage.set(stage), m.queued_at.set(visible_at)],
            (m.attempt == attempt) & m.parse_status.is_in(*IN_FLIGHT),
        )

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
        m = self.model
        actions = [m.summary_status.set(status), m.updated_at.set(now_iso())]
        actions.append(m.summary_occurrence.set(occurrence) if occurrence else m.summary_occurrence.remove())
        unsettled = status in (SummaryStatus.PENDING.value, SummaryStatus.PROCESSING.value)
        actions.append(m.summary_inflight.set("1") if unsettled else m.summary_inflight.remove())
        if description is not None:
            actions.append(m.description.set(description))
        # attempt 1's late summary worker ─ condition fails on attempt 2's row: its summary is left be
        condition = m.id.exists() if only_if is None else (m.summary_status == only_if)
        if attempt is not None:
            condition &= m.attempt == attempt
        if not_written_after is not None:  # housekeeping's write, on the row as it read it
            condition &= _not_written_after(m, not_written_after)
        return self._update(knowledge_id, actions, condition) is not None

    def move_to_kb(
        self, knowledge_id: str, from_kb_id: str, to_kb_id: str, dedupe_key: str
    ) -> Knowledge | None:
        """One transaction: the row (kb, claim key, tags cleared, only while completed in `from_kb_id`), the
        target's claim (new, ours already, or taken over from a failed or missing holder) and the release
        of the old claim, so two moves into the same knowledge base cannot both keep the same content."""
        m = self.model
        for _ in range(5):
            row = self.get(knowledge_id)
            if row is None or row.kb_id != from_kb_id or row.parse_status != ParseStatus.COMPLETED:
                return None
            holder_id = self._claim_holder(dedupe_key) if dedupe_key else None
            if holder_id is None:
                claim_condition = self.dedupe.dedupe_key.does_not_exist()
            else:
                if holder_id != knowledge_id:
                    holder = self.get(holder_id)
                    if holder is not None and self._holds_claim(holder):
                        raise DuplicateKnowledge(holder)
                claim_condition = self.dedupe.knowledge_id == holder_id
            release = (
                row.dedupe_key
                and row.dedupe_key != dedupe_key
                and self._claim_holder(row.dedupe_key) == knowledge_id
            )
            try:
                with TransactWrite(connection=self.connection) as tx:
                    tx.update(
                        m(knowledge_id),
                        actions=[
                            m.kb_id.set(to_kb_id),
                            m.dedupe_key.set(dedupe_key),
                            m.tag_ids.set([]),
                            m.updated_at.set(now_iso()),
                            # the listing keys carry the knowledge base
                            m.kb_source.set(f"{to_kb_id}#{listing_source(row.type)}"),
                            *([m.kb_type.set(f"{to_kb_id}#{row.file_type}")] if row.file_type else []),
                            *([m.kb_same_file.set(key)] if (key := _same_file(row, to_kb_id)) else []),
                        ],
                        condition=(m.kb_id == from_kb_id) & (m.parse_status == ParseStatus.COMPLETED.value),
                    )
                    if dedupe_key:
                        tx.save(self.dedupe(dedupe_key, knowledge_id=knowledge_id), condition=claim_condition)
                    if release:
                        tx.delete(
                            self.dedupe(row.dedupe_key), condition=self.dedupe.knowledge_id == knowledge_id
                        )
                return self.get(knowledge_id)
            except TransactWriteError as error:
                if not (_condition_failed(error) or _transaction_conflict(error)):
                    raise
                time.sleep(0.05)  # the row or a claim changed under us: read again
        raise RuntimeError(f"could not move knowledge {knowledge_id} after 5 tries")


# ---------------------------------------------------------------- chunks
