"""The state: one repository port per aggregate (tenants and keys, knowledge bases, knowledge, tags, chunks,
spans, tasks; the graph's is chalicelib/ports/graph.py, the wiki's chalicelib/ports/wiki.py, the
shares' chalicelib/ports/shares.py and the usage entries' and reports' chalicelib/ports/reports.py,
re-exported here)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from chalicelib.domain.api_keys import ApiKey
from chalicelib.domain.door import Door
from chalicelib.domain.tags import Tag
from chalicelib.domain.types import (
    OPEN_TASK_STATUSES,
    Chunk,
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    Span,
    Task,
    TaskStatus,
    Tenant,
)
from chalicelib.ports.chunk_moves import ChunkRepoint
from chalicelib.ports.graph import GraphEdge as GraphEdge
from chalicelib.ports.graph import GraphNeighbourhood as GraphNeighbourhood
from chalicelib.ports.graph import GraphNode as GraphNode
from chalicelib.ports.graph import GraphRepo as GraphRepo
from chalicelib.ports.reports import StoredReport as StoredReport
from chalicelib.ports.reports import UsageEntry as UsageEntry
from chalicelib.ports.reports import UsagePage as UsagePage
from chalicelib.ports.reports import UsageRepo as UsageRepo
from chalicelib.ports.shares import ShareRepo as ShareRepo
from chalicelib.ports.wiki import WikiOp as WikiOp
from chalicelib.ports.wiki import WikiPageRecord as WikiPageRecord
from chalicelib.ports.wiki import WikiRepo as WikiRepo


class TenantRepo(Protocol):
    def get(self, tenant_id: str) -> Tenant | None: ...

    def add_usage(self, tenant_id: str, delta_bytes: int) -> None:
        """Atomically adjusts the bytes the tenant stores (a give-back when negative; no quota check)."""

    def add_usage_within(self, tenant_id: str, delta_bytes: int, grows_by: int, quota: int) -> bool:
        """add_usage in one conditional write, only while used + `grows_by` <= `quota` (always when `quota`
        is 0 or `grows_by` <= 0). False: it did not fit, or no tenant row (nothing added)."""

    def reserve_document(self, tenant_id: str, quota: int) -> bool:
        """Counts one more document unless the tenant already holds `quota` (0: no limit); False then."""

    def release_document(self, tenant_id: str) -> None:
        """Counts one document fewer (a delete, or a reservation whose row was never written)."""

    def pipeline_door(self, tenant_id: str) -> Door:
        """The tenant's places in the ingest pipeline and the documents waiting for one (domain/door.py),
        read strongly consistent."""
        ...

    def take_pipeline_place(
        self, tenant_id: str, place: str, cap: int, strike: frozenset[str], ticket_entry: str
    ) -> bool:
        """In one conditional write: adds the `place` member and strikes the waiter entries `strike`, only
        while fewer than `cap` places are held and, if `ticket_entry` is given, while the row lists that
        waiter entry (the message's turn is still its own). False: the condition did not hold."""
        ...

    def add_pipeline_waiter(self, tenant_id: str, entry: str, listed: str) -> bool:
        """Adds a waiter entry; if `listed` is given, only while the row lists that entry. False: it did not."""

    def renew_pipeline_place(self, tenant_id: str, held: str, renewed: str) -> bool:
        """Replaces the place member `held` by `renewed` (a later lease), only while the row lists `held`:
        a place given back or struck meanwhile is never taken again this way. False: it was not listed."""
        ...

    def strike_pipeline_entries(
        self, tenant_id: str, places: frozenset[str], waiters: frozenset[str]
    ) -> None:
        """Removes these place and waiter members (idempotent)."""

    def set_parser_engine_rules(self, tenant_id: str, rules: dict[str, str]) -> None:
        """Writes the tenant's rules alone: a concurrent count or usage change is never overwritten."""

    def set_quotas(
        self, tenant_id: str, storage_quota: int, document_quota: int, requests_per_second: int | None = None
    ) -> Tenant | None:
        """The operator's limits (0: none; a rate of 0: the deployment's, None: the rate as it is), written
        without touching the counters; None: no such tenant."""
        ...

    def by_api_key(self, api_key: str) -> Tenant | None: ...

    def put(self, tenant: Tenant) -> None: ...

    def page(self, after: str, limit: int) -> list[Tenant]:
        """At most `limit` tenants after the tenant id `after` ("": from the first) in the store's order (by
        id in memory; DynamoDB's scan order, which a Scan from `after`'s key goes on from): a page read, not
        the table."""
        ...


class ApiKeyRepo(Protocol):
    """Issued API keys by hash. `get` is strongly consistent, so a revoked key is refused at once."""

    def get(self, key_hash: str) -> ApiKey | None: ...

    def put(self, key: ApiKey) -> None: ...

    def page(self, tenant_id: str, after: str, limit: int) -> list[ApiKey]:
        """Up to `limit` of the tenant's issued (and revoked) keys after the one whose hash is `after` ("":
        from the first), in the store's order (by the item's key), read a page at a time."""
        ...


class KnowledgeBaseRepo(Protocol):
    def get(self, kb_id: str, *, consistent: bool = False) -> KnowledgeBase | None:
        """`consistent`: a strongly consistent read (a create's check that no delete began meanwhile)."""
        ...

    def put(self, kb: KnowledgeBase) -> None: ...

    def update(self, kb: KnowledgeBase) -> KnowledgeBase | None:
        """Writes `kb` only while the stored version is still `kb.version`, and bumps it; None when another
        change came first (read again and retry) or the knowledge base is gone."""
        ...

    def by_name(self, tenant_id: str, name: str) -> KnowledgeBase | None: ...

    def page(self, tenant_id: str, after: tuple[str, str] | None, limit: int) -> list[KnowledgeBase]: ...

    def count(self, tenant_id: str, up_to: int) -> int: ...  # stops at up_to; eventually consistent

    def get_many(self, kb_ids: Sequence[str]) -> dict[str, KnowledgeBase]: ...  # those found, by id

    def delete(self, kb_id: str) -> None: ...


class StorageQuotaExceeded(Exception):
    """Indexing the document would take its tenant past the storage quota (checked in the write itself)."""

    def __init__(self, used: int, quota: int, added: int) -> None:
        super().__init__(
            f"the tenant's storage quota is used up ({used} of {quota} bytes; this document needs {added})"
        )


class DuplicateKnowledge(Exception):
    def __init__(self, existing: Knowledge):
        super().__init__(f"duplicate of {existing.id}")
        self.existing = existing


@dataclass(frozen=True)
class Page:
    items: list[Knowledge]
    total: int
    page: int
    page_size: int


class KnowledgeRepo(Protocol):
    def get(self, knowledge_id: str) -> Knowledge | None: ...

    def find_duplicate(self, dedupe_key: str) -> Knowledge | None:
        """The live (not failed, not deleted) knowledge holding this dedupe key, if any."""
        ...

    def find_same_file(self, kb_id: str, file_type: str, file_name: str, size: int) -> Knowledge | None:
        """A live (not failed) file row of the knowledge base with this type, name and size (the second
        dedupe branch, for a file whose bytes are not known yet)."""
        ...

    def insert(self, knowledge: Knowledge) -> None:
        """Atomically claims `knowledge.dedupe_key` (if set) and inserts the row.

        Raises DuplicateKnowledge with the holder when a live row holds the key; a key held by a
        failed or deleted row is taken over."""
        ...

    def delete(self, knowledge_id: str) -> bool:
        """Deletes the row, releases its dedupe claim, takes its stored bytes off the tenant's usage and counts
        one document fewer, atomically. False when the row was already gone."""
        ...

    def deleting_older_than(self, cutoff_iso: str) -> Iterator[Knowledge]:
        """Rows marked deleting whose delete has not finished since the cutoff, oldest first, read a page at a
        time as the caller goes on (a sweep out of time has not read a backlog to its end)."""
        ...

    def restart_delete_wait(self, knowledge_id: str, at_iso: str, *, not_written_after: str) -> bool:
        """A row still deleting and not written since `not_written_after` (the `updated_at` read, ISO) gets
        `updated_at` = `at_iso` (one conditional write): a redriven delete waits a whole cutoff again."""
        ...

    def publish(self, knowledge_id: str) -> Knowledge | None:
        """draft -> pending (one conditional write); None when the row is not a draft."""
        ...

    def begin_processing(self, knowledge_id: str, attempt: int) -> Knowledge | None:
        """pending|processing -> processing for this attempt, error cleared. None when the row is
        missing, superseded by a newer attempt, or in a state that must not be processed."""
        ...

    def mark_failed(
        self,
        knowledge_id: str,
        attempt: int | None,
        message: str,
        code: str,
        *,
        not_written_after: str | None = None,
    ) -> bool:
        """Fails the row unless it is terminal, being deleted, or (with `attempt`) superseded; with
        `not_written_after` (the `updated_at` the caller read, ISO), also unless it was written since."""
        ...

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
        """enable_status=enabled; parse_status stays processing, or completed when nothing follows; the row's
        stored size set to `storage_size` (plus, with `add_file_size`, the row's `file_size` as this write
        finds it) and the tenant's usage grown by the difference, atomically (a redelivery adds nothing).
        False when the row moved on (another attempt, cancelled, deleted).
        `within_quota`: a growth that takes the tenant past its storage quota raises StorageQuotaExceeded
        instead (the same write checks it, so two documents indexed at once cannot both pass)."""
        ...

    def reset_for_reparse(
        self,
        knowledge_id: str,
        process_overrides: Mapping[str, Any] | None,
        unindexed_attempt: int | None = None,
        *,
        at_attempt: int | None = None,
    ) -> Knowledge:
        """attempt+1, status pending, error/description/processed_at/counter reset (one conditional write;
        with `unindexed_attempt`, only while the row is at it and was never indexed at it; with `at_attempt`,
        only while the row is still at it: a reparse that read the row resets that attempt, never the one
        another reparse made meanwhile). LookupError else."""
        ...

    def restart_attempt(
        self, knowledge_id: str, attempt: int, from_statuses: frozenset[ParseStatus], unindexed: bool = False
    ) -> Knowledge | None:
        """The reparse reset, only while the row is still at `attempt` in one of `from_statuses` (one
        conditional write): a second redrive of the same dead attempt finds the row moved on. None then.
        With `unindexed`, also only while it was never indexed at `attempt` (`processed_at` unset)."""
        ...

    def mark_deleting(self, knowledge_id: str, *, in_kb: str | None = None) -> Knowledge | None:
        """Any state -> deleting (one conditional write); the row as it now is, None when it is missing (or
        not in `in_kb`, when given). A row already being deleted gets its updated_at moved to now: a delete
        try is under way, so housekeeping (deleting_older_than) waits its cutoff before driving it again."""
        ...

    def settle_plan(
        self,
        knowledge_id: str,
        attempt: int,
        count: int,
        plan: Mapping[str, Any],
        *,
        summary_pending: bool = False,
    ) -> Knowledge | None:
        """processing -> finalizing with `count` subtask slots (error cleared, no slot released yet), or
        -> completed when `count` is 0; the plan stored on the row (and the summary marked pending when one
        is planned) in the same conditional write. None when the row is missing, superseded or no longer
        processing."""
        ...

    def release_slot(self, knowledge_id: str, attempt: int, subtask_id: str) -> int | None:
        """One subtask's slot, once: the count minus one, only while finalizing at `attempt`, above 0 and
        `subtask_id` not yet released. The remaining count; None when nothing was released."""
        ...

    def slot_released(self, knowledge_id: str, attempt: int, subtask_id: str) -> bool:
        """Whether `subtask_id`'s slot was released at `attempt` (a consistent read): its work is done."""
        ...

    def plan_embedding(self, knowledge_id: str, attempt: int, plan: int, slices: int) -> bool:
        """Records an embedding fan-out of `slices` slices under the key `plan` (attempt * 1000 +
        generation), none released, only while processing at `attempt` and no plan of this key or a later
        one is recorded. False when the row is missing, moved on, or already holds this plan."""
        ...

    def release_embed_slice(self, knowledge_id: str, attempt: int, plan: int, slice_index: int) -> int | None:
        """One embedding slice, once: the pending count minus one, only while processing at `attempt` under
        `plan`, above 0 and the slice not yet released. The remaining count; None when nothing was
        released (a duplicate delivery, or the row moved on)."""
        ...

    def finish_embedding(self, knowledge_id: str, attempt: int, plan: int) -> bool:
        """Records that the fan-out `plan` handed over (its pending count 0 -> -1, one conditional write):
        a later duplicate of a slice then does nothing. False when the row is not there at 0."""
        ...

    def promote(self, knowledge_id: str, attempt: int) -> bool:
        """finalizing -> completed, only at `attempt` with no slot left (one conditional write)."""
        ...

    def cancel(self, knowledge_id: str, message: str) -> Knowledge | None:
        """pending|processing|finalizing -> cancelled with the message, subtask count 0; None when the row
        is missing or not in one of those states."""
        ...

    def update_fields(
        self,
        knowledge_id: str,
        fields: Mapping[str, Any],
        *,
        expect: Mapping[str, Any] | None = None,
        storage_size: int | None = None,
        within_quota: bool = True,
    ) -> Knowledge | None:
        """Sets editable fields (title, description, metadata, tag_ids, enable_status; file_path, file_size
        and file_hash of a manual document's new text or a fetched URL's size; file_path and storage_backend
        of a document whose objects moved to another backend) unless the row is being deleted or, with
        `expect`, one of those fields, storage_size, `attempt` or `parse_status` no longer holds the value given
        (the same conditional write). None when it is missing, being deleted or changed. `storage_size`: the
        row's size set to it and the tenant's usage moved by the difference in the same write, a growth within
        the storage quota (StorageQuotaExceeded, nothing written), as mark_indexed(within_quota=True); with
        `within_quota=False`, whatever the quota (a recount of bytes stored already)."""
        ...

    def mark_queued(self, knowledge_id: str, attempt: int, stage: str, visible_at: str) -> None:
        """Records that this attempt's `stage` message was queued and becomes visible at `visible_at`
        (only while the row is in flight for that attempt)."""
        ...

    def in_flight_older_than(self, cutoff_iso: str) -> list[Knowledge]:
        """pending/processing/finalizing rows whose updated_at is before the cutoff."""
        ...

    def in_flight_after(self, cutoff_iso: str, after: tuple[str, str] | None = None) -> Iterator[Knowledge]:
        """The same rows in (updated_at, id) order, from just after the position `after` ((updated_at ISO,
        id), whether that row is still there or not), read a page at a time as the caller goes on."""
        ...

    def summaries_unsettled_older_than(self, cutoff_iso: str) -> Iterator[Knowledge]:
        """Rows whose summary is pending or processing (DynamoDB's sparse `summary_inflight` marker), last
        updated before the cutoff, oldest first and read as `deleting_older_than`: housekeeping fails the ones
        no message will move any more."""
        ...

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
        """The summary's status (and, when given, the description it produced) in one write, with
        `occurrence` as the row's `summary_occurrence` (removed when ''); False when the
        row is missing, its status is not `only_if` or, when `attempt` is given, it is at another attempt
        (a superseded attempt's summary worker leaves the new attempt's summary be), or it was written after
        `not_written_after` (the `updated_at` read, ISO: a summary claimed again since is not housekeeping's)."""
        ...

    def move_to_kb(
        self, knowledge_id: str, from_kb_id: str, to_kb_id: str, dedupe_key: str
    ) -> Knowledge | None:
        """A completed row of `from_kb_id` moves to `to_kb_id` with its dedupe claim, in one step: the row
        takes `dedupe_key` (the target's claim, taken over from a failed or missing holder) and its tags are
        cleared (tags belong to a knowledge base); the old claim is released. Raises DuplicateKnowledge when
        a live row holds the target's claim; None when the row is missing, not completed or not in
        `from_kb_id`."""
        ...

    # -- listing (chalicelib/operations/listing.py): a page reads only about that page, never the whole knowledge base
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
        """Up to `limit` rows of the knowledge base, newest first (created_at, then id, descending), strictly
        after the position `after` = (created_at ISO, id). `index` narrows by a key fixed at creation:
        ("source", "file"|"url"|"manual") or ("file_type", "pdf"); created_from/created_to bound created_at
        (ISO, inclusive). Reads at most `limit` rows (a GSI query, never a scan)."""
        ...

    def get_many(self, knowledge_ids: Sequence[str]) -> dict[str, Knowledge]:
        """Rows by id in batched reads; missing ids are absent."""
        ...


class TagRepo(Protocol):
    """Tags per knowledge base and the knowledge ↔ tag relations. A relation is keyed by the tag and the
    knowledge's created_at, so the knowledge of a tag come newest first from one query."""

    def create(self, tag: Tag, cap: int) -> None:
        """Raises TagNameTaken (same name_key in the KB) or TagCapReached (the KB holds `cap` tags)."""
        ...

    def get(self, kb_id: str, tag_id: str) -> Tag | None: ...

    def list_kb(self, kb_id: str) -> list[Tag]:
        """Every tag of the knowledge base, by name."""
        ...

    def update(
        self,
        kb_id: str,
        tag_id: str,
        *,
        name: str | None = None,
        color: str | None = None,
        status: str | None = None,
    ) -> Tag | None:
        """Renames (raises TagNameTaken), recolours or marks the tag; None when it is missing."""
        ...

    def delete(self, kb_id: str, tag_id: str) -> bool:
        """The tag and its name (relations are removed first, by the delete task)."""
        ...

    def relate(self, kb_id: str, knowledge_id: str, created_at: str, tag_ids: Sequence[str]) -> None:
        """Idempotent."""
        ...

    def unrelate(self, kb_id: str, knowledge_id: str, created_at: str, tag_ids: Sequence[str]) -> None: ...

    def remove_knowledge(self, knowledge_id: str) -> int:
        """Every relation of the knowledge (whatever its tags are now)."""
        ...

    def tagged(
        self,
        kb_id: str,
        tag_id: str,
        *,
        created_from: str | None = None,
        created_to: str | None = None,
        after: tuple[str, str] | None = None,
        limit: int = 20,
    ) -> list[tuple[str, str]]:
        """(created_at ISO, knowledge id) of the tag's knowledge, newest first, strictly after `after`."""
        ...

    def delete_kb(self, kb_id: str) -> int:
        """Every tag and relation of the knowledge base."""
        ...


class ChunkRepo(ChunkRepoint, Protocol):
    def replace_all(self, knowledge_id: str, chunks: Sequence[Chunk], *, prefix: str = "") -> None:
        """Deletes the knowledge's chunks whose id starts with `prefix` (every one by default) but these,
        and writes these (idempotent re-runs); an attempt's own prefix leaves other attempts' chunks be."""
        ...

    def put_many(self, chunks: Sequence[Chunk]) -> None: ...

    def put_unchanged(self, before: Chunk, after: Chunk) -> bool:
        """`after` (the same key) written only while the stored chunk is still `before`, as this repo handed
        it out (every field): False, nothing written, when it is gone or was written since (an API edit
        that read it: a switch or another edit answered meanwhile is never undone)."""
        ...

    def list(self, knowledge_id: str) -> list[Chunk]: ...

    def list_page(
        self, knowledge_id: str, *, prefix: str = "", after: str | None = None, limit: int
    ) -> tuple[Sequence[Chunk], str | None]:
        """At most `limit` (>= 1) of the knowledge's chunks whose id starts with `prefix`, in chunk-id order
        (the DynamoDB range key's byte order), after the id `after` (exclusive); and the cursor of the next
        page (the last id returned), None when no chunk is left. Reads only that page: a document read in
        pages reads each chunk once, however large it is (issue 12)."""
        ...

    def get_many(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Chunk]:
        """Chunks by (knowledge_id, chunk_id), across knowledge, in batched reads; missing keys are absent."""
        ...

    def delete_all(self, knowledge_id: str) -> int: ...

    def delete_many(self, knowledge_id: str, chunk_ids: Sequence[str]) -> None:
        """Deletes these chunks of the knowledge (missing ones are no error)."""
        ...

    def set_metadata(
        self, knowledge_id: str, chunk_id: str, key: str, value: Any, *, kb_id: str, attempt: int
    ) -> bool:
        """Sets one metadata key of the chunk as it is stored now (its other fields as they are), only while it
        exists in `kb_id` at `attempt` (its metadata's): False when it does not (deleted, moved, reparsed)."""
        ...

    def merge_image_info(
        self, knowledge_id: str, chunk_id: str, url: str, fields: dict[str, str], *, kb_id: str, attempt: int
    ) -> bool:
        """`fields` set on the `image_info` entry of `url` (added if absent) atomically, on the terms of
        `set_metadata`; True when the chunk holds them."""
        ...


class SpanRepo(Protocol):
    def put(self, span: Span) -> None: ...

    def get(self, knowledge_id: str, attempt: int, span_id: str) -> Span | None: ...

    def get_many(self, knowledge_id: str, attempt: int, span_ids: Sequence[str]) -> dict[str, Span]:
        """The named spans that exist, by span id, in one read (strongly consistent)."""
        ...

    def list(self, knowledge_id: str, attempt: int) -> list[Span]: ...

    def add_counters(
        self, knowledge_id: str, attempt: int, span_id: str, counts: Mapping[str, int], *, reset: bool = False
    ) -> None:
        """Adds `counts` (names of SPAN_COUNTERS) to the span's counters atomically (`reset`: sets them),
        whatever else writes the span meanwhile; the counters read back as the span's outputs."""
        ...

    def latest_attempt(self, knowledge_id: str) -> int: ...

    def delete_all(self, knowledge_id: str) -> int: ...

    def last_activity_iso(self, knowledge_id: str) -> str | None: ...


class TaskExists(Exception):
    """A task of that id is written already (a task whose id follows from what it works on)."""


class TaskRepo(Protocol):
    """Durable operations (delete, batch reparse, ...) and their progress."""

    def put(self, task: Task) -> None: ...  # TaskExists for an id written already

    def get(self, task_id: str) -> Task | None: ...

    def save_progress(self, task: Task, *, only_from: frozenset[TaskStatus] = OPEN_TASK_STATUSES) -> bool:
        """Writes the task's counters and status, only forward and only while the stored task's status is in
        `only_from` (by default still open: a task finished, failed or given up is never written over by a
        late delivery): False when a redelivered worker is behind what another run already recorded (its
        work was idempotent, its counts are not), or the task ended meanwhile. Progress resets its count of
        re-sends. (A DynamoDB item written before its status was kept beside its body is taken as open.)"""
        ...

    def stale_open(self, cutoff_iso: str, limit: int) -> list[Task]: ...  # queued/running, waiting before it

    def claim_stale(self, task_id: str, cutoff_iso: str, now_iso: str) -> int | None:
        """Restarts at `now_iso` the wait of an open task waiting since before the cutoff (not its updated_at,
        its progress): its re-sends since its last progress, this one too; None if a save or sweep came first."""
        ...

    def backfill_keys(self, after: str | None, page_items: int) -> tuple[int, str | None]:
        """One page (`page_items` items read, from just after the key `after`) of the backfill of tasks
        written before the store kept their status beside them: each gets it and, while open, what lists it
        among the open tasks (`stale_open`) if it lacks that, unless a save changed it since it was read.
        Returns the tasks found needing it on the page and where the next page starts (None: the end). A
        store with no such tasks (the in-memory one) answers (0, None)."""
        ...
