"""In-memory adapters of the ports, for fast service-level tests (no moto, no network).

Each fake is small, but where behaviour matters it behaves like the real adapter: the knowledge repository
makes the same conditional transitions as `adapters/dynamo.py` (the allowed-from sets come from
`domain/status.py`), the dedupe claim and insert are one atomic step with takeover of a failed holder, a
workflow start is idempotent by name as in Step Functions, and the queue hands messages back as the SQS
event a stage's `handle` receives, with receive counts and a dead-letter queue. Stored records are copies,
so a caller mutating what it read changes nothing until it writes, as with a database.

There is no in-memory retrieval engine: the composition root (`bootstrap.memory_deps`) uses the real
embedded engine (SQLite FTS5 + numpy) on a temporary directory, because an in-memory engine would have to
repeat its tokenisation, BM25 and fusion.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from chalicelib.domain.api_keys import ApiKey
from chalicelib.domain.clock import from_iso, now_iso, to_iso
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.graph import entity_key
from chalicelib.domain.ids import api_key_hash
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
from chalicelib.domain.storage_keys import safe_object_key
from chalicelib.domain.tags import Tag, TagCapReached, TagNameTaken, name_key
from chalicelib.domain.types import (
    Chunk,
    ChunkType,
    EnableStatus,
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    Span,
    Stage,
    StageMessage,
    SummaryStatus,
    Task,
    Tenant,
)
from chalicelib.ports import (
    DeadLetter,
    DuplicateKnowledge,
    FaqLease,
    FetchedDocument,
    FetchFailed,
    GraphEdge,
    GraphNeighbourhood,
    GraphNode,
    IndexSpace,
    Page,
    UsageEntry,
    WikiOp,
    WikiPageRecord,
    WorkflowStart,
)
from chalicelib.settings import QUEUES, Settings

if TYPE_CHECKING:
    from chalicelib.domain.faq import FaqEntry
    from chalicelib.ports import Vectors


def _ms(moment: datetime) -> datetime:
    """A timestamp as DynamoDB keeps it (ISO text with milliseconds, UTC)."""
    return from_iso(to_iso(moment))


def _now() -> datetime:
    return from_iso(now_iso())


# ---------------------------------------------------------------- tenants and knowledge bases


class MemoryTenantRepo:
    def __init__(self) -> None:
        self._rows: dict[str, Tenant] = {}
        self._lock = threading.Lock()

    def get(self, tenant_id: str) -> Tenant | None:
        with self._lock:
            row = self._rows.get(tenant_id)
            return copy.deepcopy(row) if row else None

    def by_api_key(self, api_key: str) -> Tenant | None:
        wanted = api_key_hash(api_key)
        with self._lock:
            row = next((t for t in self._rows.values() if t.api_key_hash == wanted), None)
            return copy.deepcopy(row) if row else None

    def add_usage(self, tenant_id: str, delta_bytes: int) -> None:
        with self._lock:
            tenant = self._rows.get(tenant_id)
            if tenant is not None:
                tenant.storage_used += delta_bytes

    def put(self, tenant: Tenant) -> None:
        with self._lock:
            self._rows[tenant.id] = replace(copy.deepcopy(tenant), created_at=_ms(tenant.created_at))

    def list_all(self) -> list[Tenant]:
        with self._lock:
            return [copy.deepcopy(self._rows[k]) for k in sorted(self._rows)]


class MemoryApiKeyRepo:
    def __init__(self) -> None:
        self._rows: dict[str, ApiKey] = {}
        self._lock = threading.Lock()

    def get(self, key_hash: str) -> ApiKey | None:
        with self._lock:
            row = self._rows.get(key_hash)
            return copy.deepcopy(row) if row else None

    def put(self, key: ApiKey) -> None:
        stored = replace(
            copy.deepcopy(key),
            created_at=_ms(key.created_at),
            revoked_at=_ms(key.revoked_at) if key.revoked_at else None,
        )
        with self._lock:
            self._rows[key.key_hash] = stored

    def list(self, tenant_id: str) -> list[ApiKey]:
        with self._lock:
            rows = [copy.deepcopy(k) for k in self._rows.values() if k.tenant_id == tenant_id]
        return sorted(rows, key=lambda k: (k.created_at, k.key_hash))


class MemoryKnowledgeBaseRepo:
    def __init__(self) -> None:
        self._rows: dict[str, KnowledgeBase] = {}
        self._lock = threading.Lock()

    def get(self, kb_id: str) -> KnowledgeBase | None:
        with self._lock:
            row = self._rows.get(kb_id)
            return copy.deepcopy(row) if row else None

    def put(self, kb: KnowledgeBase) -> None:
        stored = replace(copy.deepcopy(kb), created_at=_ms(kb.created_at), updated_at=_ms(kb.updated_at))
        with self._lock:
            self._rows[kb.id] = stored

    def by_name(self, tenant_id: str, name: str) -> KnowledgeBase | None:
        return next((kb for kb in self.list(tenant_id) if kb.name == name), None)

    def delete(self, kb_id: str) -> None:
        with self._lock:
            self._rows.pop(kb_id, None)

    def list(self, tenant_id: str) -> list[KnowledgeBase]:
        """Ordered by name, as the tenant index's range key orders them."""
        with self._lock:
            rows = [copy.deepcopy(kb) for kb in self._rows.values() if kb.tenant_id == tenant_id]
        return sorted(rows, key=lambda kb: kb.name)


# ---------------------------------------------------------------- knowledge


class KnowledgeExists(Exception):
    """An insert of an id that is already stored (DynamoDB: the `id does not exist` condition fails)."""


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

    def find_duplicate(self, dedupe_key: str) -> Knowledge | None:
        with self._lock:
            holder = self._rows.get(self._claims.get(dedupe_key, ""))
            return copy.deepcopy(holder) if holder and holds_dedupe_claim(holder.parse_status) else None

    def list_by_kb(self, kb_id: str, page: int, page_size: int) -> Page:
        """Newest first, as the kb index is read (created_at descending)."""
        with self._lock:
            rows = [copy.deepcopy(k) for k in self._rows.values() if k.kb_id == kb_id]
        rows.sort(key=lambda k: to_iso(k.created_at), reverse=True)
        start = (page - 1) * page_size
        return Page(rows[start : start + page_size], len(rows), page, page_size)

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

    def summaries_processing_older_than(self, cutoff_iso: str) -> list[Knowledge]:
        """Summaries in processing (DynamoDB's `summary_inflight` marker, which only set_summary_status
        writes) last updated before the cutoff."""
        return self._older_than(cutoff_iso, lambda k: k.summary_status == SummaryStatus.PROCESSING)

    def _older_than(self, cutoff_iso: str, marked: Callable[[Knowledge], bool]) -> list[Knowledge]:
        with self._lock:
            rows = [
                copy.deepcopy(k)
                for k in self._rows.values()
                if marked(k) and to_iso(k.updated_at) < cutoff_iso
            ]
        return sorted(rows, key=lambda k: to_iso(k.updated_at))

    # -- create and delete
    def insert(self, knowledge: Knowledge) -> None:
        """Claims the dedupe key and inserts the row in one step (DynamoDB: one transaction). A key held
        by a live row raises DuplicateKnowledge; one held by a failed or missing row is taken over."""
        row = self._stored(knowledge)
        with self._lock:
            if row.id in self._rows:
                raise KnowledgeExists(row.id)
            key = row.dedupe_key
            if key:
                holder = self._rows.get(self._claims.get(key, ""))
                if holder is not None and holds_dedupe_claim(holder.parse_status):
                    raise DuplicateKnowledge(copy.deepcopy(holder))
                self._claims[key] = row.id
            self._rows[row.id] = row

    def delete(self, knowledge_id: str) -> bool:
        """The row, its claim and its bytes of the tenant's usage, in one step (DynamoDB: a transaction)."""
        with self._lock:
            row = self._rows.pop(knowledge_id, None)
            if row is None:
                return False
            if row.dedupe_key and self._claims.get(row.dedupe_key) == knowledge_id:
                del self._claims[row.dedupe_key]  # a claim taken over by another row stays
            if self.tenants is not None and row.storage_size:
                self.tenants.add_usage(row.tenant_id, -row.storage_size)
            return True

    def deleting_older_than(self, cutoff_iso: str) -> list[Knowledge]:
        return self._older_than(cutoff_iso, lambda k: k.parse_status == ParseStatus.DELETING)

    def publish(self, knowledge_id: str) -> Knowledge | None:
        def change(k: Knowledge) -> None:
            k.parse_status = ParseStatus.PENDING
            k.updated_at = _now()

        return self._update(knowledge_id, lambda k: k.parse_status == ParseStatus.DRAFT, change)

    def mark_deleting(self, knowledge_id: str) -> Knowledge | None:
        def change(k: Knowledge) -> None:
            k.parse_status = ParseStatus.DELETING
            k.pending_subtasks_count = 0
            k.updated_at = _now()

        updated = self._update(knowledge_id, lambda k: k.parse_status in DELETE_FROM, change)
        if updated is not None:
            return updated
        current = self.get(knowledge_id)
        return current if current is not None and current.parse_status == ParseStatus.DELETING else None

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

    def update_fields(self, knowledge_id: str, fields: Mapping[str, Any]) -> Knowledge | None:
        editable = {
            "title",
            "description",
            "metadata",
            "tag_ids",
            "file_path",
            "file_size",
            "file_hash",
            "enrichment",
        }

        def change(k: Knowledge) -> None:
            for name, value in fields.items():
                if name not in editable and name != "enable_status":
                    raise AttributeError(f"{name!r} is not editable")
                setattr(k, name, EnableStatus(value) if name == "enable_status" else copy.deepcopy(value))
            k.updated_at = _now()

        return self._update(knowledge_id, lambda k: k.parse_status != ParseStatus.DELETING, change)

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

    def mark_failed(self, knowledge_id: str, attempt: int | None, message: str, code: str) -> bool:
        def change(k: Knowledge) -> None:
            k.parse_status = ParseStatus.FAILED
            k.error_message, k.error_code = message[:2000], code
            k.pending_subtasks_count = 0
            k.updated_at = _now()

        def condition(k: Knowledge) -> bool:
            return k.parse_status in FAIL_FROM and (attempt is None or k.attempt == attempt)

        return self._update(knowledge_id, condition, change) is not None

    def mark_indexed(
        self, knowledge_id: str, attempt: int, *, chunk_count: int, storage_size: int, completed: bool
    ) -> bool:
        def change(k: Knowledge) -> None:
            now = _now()
            k.enable_status = EnableStatus.ENABLED
            k.chunk_count, k.storage_size = chunk_count, storage_size
            k.processed_at = k.updated_at = now
            if completed:
                k.parse_status = ParseStatus.COMPLETED

        def condition(k: Knowledge) -> bool:
            return k.attempt == attempt and k.parse_status in MARK_INDEXED_FROM

        return self._update(knowledge_id, condition, change) is not None

    def reset_for_reparse(self, knowledge_id: str, process_overrides: Mapping[str, Any] | None) -> Knowledge:
        def change(k: Knowledge) -> None:
            k.attempt += 1
            k.parse_status = ParseStatus.PENDING
            k.enable_status = EnableStatus.DISABLED
            k.error_message = k.error_code = k.description = ""
            k.processed_at = None
            k.pending_subtasks_count = k.chunk_count = 0
            k.updated_at = _now()
            if process_overrides is not None:
                k.process_overrides = copy.deepcopy(dict(process_overrides))

        updated = self._update(knowledge_id, lambda k: k.parse_status in REPARSE_FROM, change)
        if updated is None:
            raise LookupError(knowledge_id)
        return updated

    def restart_attempt(
        self, knowledge_id: str, attempt: int, from_statuses: frozenset[ParseStatus]
    ) -> Knowledge | None:
        def change(k: Knowledge) -> None:
            k.attempt += 1
            k.parse_status = ParseStatus.PENDING
            k.enable_status = EnableStatus.DISABLED
            k.error_message = k.error_code = k.description = ""
            k.processed_at = None
            k.pending_subtasks_count = k.chunk_count = 0
            k.updated_at = _now()

        return self._update(
            knowledge_id, lambda k: k.attempt == attempt and k.parse_status in from_statuses, change
        )

    def set_summary_status(
        self, knowledge_id: str, status: str, *, only_if: str | None = None, description: str | None = None
    ) -> bool:
        def change(k: Knowledge) -> None:
            k.summary_status = SummaryStatus(status)
            k.updated_at = _now()
            if description is not None:
                k.description = description

        def condition(k: Knowledge) -> bool:
            return only_if is None or k.summary_status.value == only_if

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


class MemoryChunkRepo:
    def __init__(self) -> None:
        self._rows: dict[str, dict[str, Chunk]] = {}  # knowledge id -> chunk id -> chunk
        self._lock = threading.Lock()
        #: chunks handed out by list, list_page and get_many (tests pin how often a stage reads a chunk)
        self.chunks_read = 0

    @staticmethod
    def _stored(chunk: Chunk) -> Chunk:
        return replace(copy.deepcopy(chunk), created_at=_ms(chunk.created_at))

    def list(self, knowledge_id: str) -> list[Chunk]:
        """Parents first, then by sequence (the DynamoDB adapter's order over its chunk-id range key)."""
        with self._lock:
            rows = self._rows.get(knowledge_id, {})
            chunks = [copy.deepcopy(rows[chunk_id]) for chunk_id in sorted(rows)]
            self.chunks_read += len(chunks)
        chunks.sort(key=lambda c: (c.chunk_type != ChunkType.PARENT_TEXT, c.seq))
        return chunks

    def list_page(
        self, knowledge_id: str, *, prefix: str = "", after: str | None = None, limit: int
    ) -> tuple[Sequence[Chunk], str | None]:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        with self._lock:
            rows = self._rows.get(knowledge_id, {})
            ids = sorted(i for i in rows if i.startswith(prefix) and (after is None or i > after))
            chunks = [copy.deepcopy(rows[i]) for i in ids[:limit]]
            self.chunks_read += len(chunks)
        return chunks, (chunks[-1].id if len(ids) > limit else None)

    def get_many(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Chunk]:
        with self._lock:
            found = {
                (k, c): copy.deepcopy(self._rows[k][c])
                for k, c in dict.fromkeys(keys)
                if c in self._rows.get(k, {})
            }
            self.chunks_read += len(found)
            return found

    def put_many(self, chunks: Sequence[Chunk]) -> None:
        stored = [self._stored(c) for c in chunks]
        with self._lock:
            for chunk in stored:
                self._rows.setdefault(chunk.knowledge_id, {})[chunk.id] = chunk

    def delete_all(self, knowledge_id: str) -> int:
        with self._lock:
            return len(self._rows.pop(knowledge_id, {}))

    def replace_all(self, knowledge_id: str, chunks: Sequence[Chunk]) -> None:
        stored = {c.id: self._stored(c) for c in chunks}
        with self._lock:
            self._rows[knowledge_id] = stored


class MemorySpanRepo:
    def __init__(self) -> None:
        self._rows: dict[str, dict[tuple[int, str], Span]] = {}  # knowledge id -> (attempt, span id)
        self._lock = threading.Lock()

    def put(self, span: Span) -> None:
        stored = copy.deepcopy(span)
        stored.updated_at = _ms(span.updated_at)
        stored.started_at = _ms(span.started_at) if span.started_at else None
        stored.ended_at = _ms(span.ended_at) if span.ended_at else None
        with self._lock:
            self._rows.setdefault(span.knowledge_id, {})[(span.attempt, span.span_id)] = stored

    def get(self, knowledge_id: str, attempt: int, span_id: str) -> Span | None:
        with self._lock:
            span = self._rows.get(knowledge_id, {}).get((attempt, span_id))
            return copy.deepcopy(span) if span else None

    def get_many(self, knowledge_id: str, attempt: int, span_ids: Sequence[str]) -> dict[str, Span]:
        with self._lock:
            spans = self._rows.get(knowledge_id, {})
            found = {span_id: spans.get((attempt, span_id)) for span_id in span_ids}
            return {span_id: copy.deepcopy(span) for span_id, span in found.items() if span is not None}

    def list(self, knowledge_id: str, attempt: int) -> list[Span]:
        """Ordered by span id, as the `{attempt}#{span_id}` range key orders them."""
        with self._lock:
            spans = self._rows.get(knowledge_id, {})
            return [copy.deepcopy(spans[key]) for key in sorted(spans) if key[0] == attempt]

    def delete_all(self, knowledge_id: str) -> int:
        with self._lock:
            return len(self._rows.pop(knowledge_id, {}))

    def latest_attempt(self, knowledge_id: str) -> int:
        with self._lock:
            return max((attempt for attempt, _ in self._rows.get(knowledge_id, {})), default=0)

    def last_activity_iso(self, knowledge_id: str) -> str | None:
        with self._lock:
            stamps = [to_iso(s.updated_at) for s in self._rows.get(knowledge_id, {}).values()]
        return max(stamps, default=None)


# ---------------------------------------------------------------- files


class MemoryFileStore:
    """Objects in a dict, addressed `mem://{name}/{key}`. URLs of another store are rejected, as an S3
    store rejects another bucket's; a missing object reads as FileNotFoundError, as `local://` does."""

    def __init__(self, name: str = "files") -> None:
        self.name = name
        self._objects: dict[str, tuple[bytes, str]] = {}
        self._presigned: dict[str, str] = {}  # presigned URL -> key
        self._lock = threading.Lock()

    def url_for(self, key: str) -> str:
        return f"mem://{self.name}/{safe_object_key(key)}"

    def key_of(self, url: str) -> str:
        prefix = f"mem://{self.name}/"
        if not url.startswith(prefix):
            raise ValueError(f"not an object of store {self.name}: {url!r}")
        return url[len(prefix) :]

    def save(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        key = safe_object_key(key)
        with self._lock:
            self._objects[key] = (bytes(data), content_type)
        return self.url_for(key)

    def read(self, url: str) -> bytes:
        return self._object(url)[0]

    def delete(self, url: str) -> None:
        key = self.key_of(url)
        with self._lock:
            self._objects.pop(key, None)

    def exists(self, url: str) -> bool:
        key = self.key_of(url)
        with self._lock:
            return key in self._objects

    def size(self, url: str) -> int:
        return len(self._object(url)[0])

    def content_type(self, url: str) -> str:
        return self._object(url)[1]

    def _object(self, url: str) -> tuple[bytes, str]:
        key = self.key_of(url)
        with self._lock:
            if key not in self._objects:
                raise FileNotFoundError(url)
            return self._objects[key]

    def keys(self, prefix: str = "") -> list[str]:
        with self._lock:
            return sorted(k for k in self._objects if k.startswith(prefix))

    def presign_put(self, key: str, expires_seconds: int, content_type: str = "") -> str:
        key = safe_object_key(key)
        url = f"https://{self.name}.mem.invalid/{key}?expires={int(time.time()) + expires_seconds}"
        with self._lock:
            self._presigned[url] = key
        return url

    def copy(self, src_url: str, dst_key: str) -> str:
        data, content_type = self._object(src_url)
        return self.save(dst_key, data, content_type)

    def put_presigned(self, url: str, data: bytes) -> str:
        """What a client's PUT to a presigned URL does: stores the object under the granted key."""
        with self._lock:
            key = self._presigned.get(url)
        if key is None:
            raise PermissionError(f"no presigned grant for {url!r}")
        return self.save(key, data)

    def presign_get(self, url: str, expires_seconds: int, file_name: str = "") -> str:
        key = self.key_of(url)
        signed = f"https://{self.name}.mem.invalid/{key}?expires={int(time.time()) + expires_seconds}&get=1"
        with self._lock:
            self._presigned[signed] = key
        return signed

    def get_presigned(self, url: str) -> bytes:
        """What a client's GET of a presigned URL returns."""
        with self._lock:
            key = self._presigned.get(url)
        if key is None:
            raise PermissionError(f"no presigned grant for {url!r}")
        return self.read(self.url_for(key))


# ---------------------------------------------------------------- queues


@dataclass
class QueuedMessage:
    queue: str
    body: str
    delay_seconds: int = 0
    message_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    sent_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    receive_count: int = 0
    first_receive_ms: int = 0
    attributes: dict[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.body)


class QueueUnavailable(ConnectionError):
    """A send to a queue that does not answer (deleted, throttled, network)."""


class MemoryTaskQueue:
    """The stage queues, each with a dead-letter queue and SQS's redrive rule: a message that failed on its
    `max_receives`-th receive moves to the DLQ. Messages come back as the Lambda SQS event (`receive`), and
    the handler's partial-batch response settles them (`settle`). Delays are recorded, not waited for."""

    def __init__(
        self,
        queues: Iterable[str] = QUEUES,
        *,
        max_receives: int = 4,
        region: str = "us-east-1",
        account_id: str = "123456789012",
    ) -> None:
        self.queues = tuple(queues)
        self.max_receives = max_receives
        self.region = region
        self.account_id = account_id
        #: every message ever sent, in order (what a test inspects)
        self.sent: list[QueuedMessage] = []
        self._waiting: dict[str, list[QueuedMessage]] = {q: [] for q in self.queues}
        self._in_flight: dict[str, QueuedMessage] = {}  # message id -> message
        self._dead: dict[str, list[QueuedMessage]] = {q: [] for q in self.queues}
        self._unavailable: set[str] = set()
        #: every retry_later call: (queue, receipt handle, delay seconds)
        self.retried: list[tuple[str, str, int]] = []
        self._held: dict[str, float] = {}  # dead letter id -> monotonic time it is visible again
        self._lock = threading.Lock()

    # -- the port
    def send(self, stage: Stage, message: StageMessage, *, delay_seconds: int = 0) -> None:
        self.send_raw(stage.value, message.to_json(), delay_seconds=delay_seconds)

    def send_raw(self, queue: str, body: Mapping[str, Any], *, delay_seconds: int = 0) -> None:
        if not 0 <= delay_seconds <= 900:
            raise ValueError(f"DelaySeconds must be 0..900, got {delay_seconds}")
        self._put(QueuedMessage(queue, json.dumps(dict(body)), delay_seconds))

    def dead_letter(self, queue: str, body: str, reason: str) -> None:
        self._known(queue)
        message = QueuedMessage(queue, body, attributes={"reason": reason[:1000], "parked": "1"})
        with self._lock:
            self._dead[queue].append(message)

    def backlog(self, queue: str) -> int:
        self._known(queue)
        with self._lock:
            return self._depth(queue)

    def retry_later(self, queue: str, receipt_handle: str, delay_seconds: int) -> None:
        """Recorded: the fake delivers failed messages again at once (delays are not waited for)."""
        with self._lock:
            self.retried.append((queue, receipt_handle, delay_seconds))

    def receive_dead_letters(self, queue: str, max_messages: int, hold_seconds: int) -> list[DeadLetter]:
        self._known(queue)
        now = time.monotonic()
        with self._lock:
            free = [m for m in self._dead[queue] if self._held.get(m.message_id, 0.0) <= now]
            batch = free[:max_messages]
            for message in batch:
                message.receive_count += 1
                self._held[message.message_id] = now + hold_seconds
        return [
            DeadLetter(
                queue,
                m.message_id,
                f"{m.message_id}#dlq{m.receive_count}",
                m.body,
                reason=m.attributes.get("reason", "") if m.attributes.get("parked") else "",
                sent_at_ms=m.sent_ms,
                receive_count=m.receive_count,
            )
            for m in batch
        ]

    def delete_dead_letter(self, letter: DeadLetter) -> None:
        with self._lock:
            self._dead[letter.queue] = [
                m for m in self._dead[letter.queue] if m.message_id != letter.message_id
            ]
            self._held.pop(letter.message_id, None)

    def release_dead_letter(self, letter: DeadLetter) -> None:
        with self._lock:
            self._held.pop(letter.message_id, None)

    def make_unavailable(self, queue: str, unavailable: bool = True) -> None:
        self._known(queue)
        with self._lock:
            (self._unavailable.add if unavailable else self._unavailable.discard)(queue)

    # -- what was sent
    def waiting(self, queue: str) -> list[QueuedMessage]:
        """Messages not yet received (or made visible again after a failure), oldest first."""
        self._known(queue)
        with self._lock:
            return list(self._waiting[queue])

    def bodies(self, queue: str) -> list[Any]:
        """The parsed bodies of the waiting messages."""
        return [m.json() for m in self.waiting(queue)]

    def dead_letters(self, queue: str) -> list[QueuedMessage]:
        self._known(queue)
        with self._lock:
            return list(self._dead[queue])

    def purge(self, queue: str) -> None:
        self._known(queue)
        with self._lock:
            self._waiting[queue].clear()

    # -- delivery, as the Lambda event source mapping does it
    def receive(self, queue: str, max_messages: int = 10) -> dict[str, Any]:
        """Takes up to `max_messages` waiting messages into flight and returns them as an SQS event."""
        self._known(queue)
        now = int(time.time() * 1000)
        with self._lock:
            batch = self._waiting[queue][:max_messages]
            del self._waiting[queue][: len(batch)]
            for message in batch:
                message.receive_count += 1
                message.first_receive_ms = message.first_receive_ms or now
                self._in_flight[message.message_id] = message
        return {"Records": [self._record(m) for m in batch]}

    def settle(self, event: Mapping[str, Any], response: Mapping[str, Any] | None) -> None:
        """Applies a handler's partial-batch response: succeeded records are deleted; failed ones become
        visible again, or move to the DLQ when they failed on their last allowed receive."""
        failed = {f["itemIdentifier"] for f in (response or {}).get("batchItemFailures", [])}
        with self._lock:
            for record in event["Records"]:
                message = self._in_flight.pop(record["messageId"], None)
                if message is None or record["messageId"] not in failed:
                    continue
                if message.receive_count >= self.max_receives:
                    message.attributes["reason"] = f"maxReceiveCount {self.max_receives} exceeded"
                    self._dead[message.queue].append(message)
                else:
                    self._waiting[message.queue].append(message)

    def deliver(
        self,
        queue: str,
        handler: Callable[[Any, dict[str, Any], Any], dict[str, Any]],
        deps: Any,
        context: Any = None,
    ) -> dict[str, Any]:
        """One batch: receive, invoke the handler, settle. Returns the handler's response; when every record
        failed, Powertools raises and Lambda then fails the whole batch, which this reports as one response."""
        from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

        event = self.receive(queue)
        if not event["Records"]:
            return {"batchItemFailures": []}
        try:
            response = handler(deps, event, context)
        except BatchProcessingError:
            response = {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"]]}
        self.settle(event, response)
        return response

    def event(self, queue: str, bodies: Sequence[str], *, receive_count: int = 1) -> dict[str, Any]:
        """An SQS event for bodies that were never sent (malformed input, a given receive count)."""
        self._known(queue)
        records = []
        for body in bodies:
            message = QueuedMessage(queue, body, receive_count=receive_count)
            message.first_receive_ms = message.sent_ms
            records.append(self._record(message))
        return {"Records": records}

    # -- internals
    def _known(self, queue: str) -> None:
        if queue not in self._waiting:
            raise KeyError(f"no queue named {queue!r}")

    def _put(self, message: QueuedMessage) -> None:
        self._known(message.queue)
        with self._lock:
            if message.queue in self._unavailable:
                raise QueueUnavailable(f"queue {message.queue} is unavailable")
            self.sent.append(message)
            self._waiting[message.queue].append(message)

    def _depth(self, queue: str) -> int:
        return len(self._waiting[queue]) + sum(1 for m in self._in_flight.values() if m.queue == queue)

    def _record(self, message: QueuedMessage) -> dict[str, Any]:
        return {
            "messageId": message.message_id,
            "receiptHandle": f"{message.message_id}#{message.receive_count}",
            "body": message.body,
            "attributes": {
                "ApproximateReceiveCount": str(message.receive_count),
                "SentTimestamp": str(message.sent_ms),
                "SenderId": "AIDAMEMORYFAKESENDER",
                "ApproximateFirstReceiveTimestamp": str(message.first_receive_ms),
            },
            "messageAttributes": {},
            "md5OfBody": hashlib.md5(message.body.encode()).hexdigest(),
            "eventSource": "aws:sqs",
            "eventSourceARN": f"arn:aws:sqs:{self.region}:{self.account_id}:{message.queue}",
            "awsRegion": self.region,
        }


# ---------------------------------------------------------------- workflow


@dataclass
class Execution:
    name: str
    arn: str
    payload: dict[str, Any]
    status: str = "RUNNING"
    #: what a finished execution reports as its state transitions (tests set it through `finish`)
    transitions: int = 0


@dataclass(frozen=True)
class TaskAnswer:
    token: str
    succeeded: bool
    output: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""
    cause: str = ""


class MemoryWorkflow:
    """Executions by name (a second start of a name starts nothing, as in Step Functions; it reports
    `started=False` as the port says, where AWS answers an identical start of a running execution with the
    original response) and the answers given to task tokens. A token is open until answered or closed;
    answering a closed token returns False, as the adapter does for TaskTimedOut, TaskDoesNotExist and
    InvalidToken."""

    def __init__(self, state_machine_arn: str = "arn:aws:states:us-east-1:123456789012:stateMachine:mem"):
        self.state_machine_arn = state_machine_arn
        self.executions: dict[str, Execution] = {}
        #: every start call by name, repeated calls included
        self.start_calls: list[str] = []
        #: every answer given, in order (only answers to open tokens)
        self.answers: list[TaskAnswer] = []
        self._closed: set[str] = set()
        self._lock = threading.Lock()

    def start(self, name: str, payload: Mapping[str, Any]) -> WorkflowStart:
        arn = self.state_machine_arn.replace(":stateMachine:", ":execution:") + f":{name}"
        with self._lock:
            self.start_calls.append(name)
            if name in self.executions:
                return WorkflowStart(arn, False)
            self.executions[name] = Execution(name, arn, json.loads(json.dumps(dict(payload))))
            return WorkflowStart(arn, True)

    def is_running(self, name: str) -> bool:
        with self._lock:
            execution = self.executions.get(name)
            return execution is not None and execution.status == "RUNNING"

    def finish(self, name: str, status: str = "SUCCEEDED", transitions: int = 0) -> None:
        with self._lock:
            self.executions[name].status = status
            self.executions[name].transitions = transitions

    def transitions(self, name: str) -> int | None:
        with self._lock:
            execution = self.executions.get(name)
            if execution is None or execution.status == "RUNNING":
                return None
            return execution.transitions

    def stop(self, name: str, cause: str) -> bool:
        with self._lock:
            execution = self.executions.get(name)
            if execution is None or execution.status != "RUNNING":
                return False
            execution.status = "ABORTED"
            return True

    def close_task(self, token: str) -> None:
        """The task timed out or its execution ended: later answers are refused."""
        with self._lock:
            self._closed.add(token)

    def task_success(self, token: str, output: Mapping[str, Any]) -> bool:
        return self._answer(TaskAnswer(token, True, json.loads(json.dumps(dict(output)))))

    def task_failure(self, token: str, error: str, cause: str) -> bool:
        return self._answer(TaskAnswer(token, False, error=error[:256], cause=cause[:32768]))

    def _answer(self, answer: TaskAnswer) -> bool:
        with self._lock:
            if answer.token in self._closed:
                return False
            self._closed.add(answer.token)
            self.answers.append(answer)
            return True

    def answers_to(self, token: str) -> list[TaskAnswer]:
        with self._lock:
            return [a for a in self.answers if a.token == token]


# ---------------------------------------------------------------- tasks, graph, wiki


class MemoryUsageRepo:
    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], UsageEntry] = {}
        self._lock = threading.Lock()

    def put(self, entry: UsageEntry) -> None:
        with self._lock:
            self._rows[(entry.knowledge_id, entry.entry)] = copy.deepcopy(entry)

    def for_knowledge(self, knowledge_id: str) -> list[UsageEntry]:
        with self._lock:
            return [e for (k, _), e in sorted(self._rows.items()) if k == knowledge_id]

    def for_kb(self, kb_id: str) -> Iterator[UsageEntry]:
        with self._lock:
            entries = [e for _, e in sorted(self._rows.items()) if e.kb_id == kb_id]
        yield from entries


class MemoryTaskRepo:
    def __init__(self) -> None:
        self._rows: dict[str, Task] = {}
        self._lock = threading.Lock()

    def put(self, task: Task) -> None:
        with self._lock:
            if task.id in self._rows:
                raise KnowledgeExists(task.id)
            self._rows[task.id] = copy.deepcopy(task)

    def get(self, task_id: str) -> Task | None:
        with self._lock:
            row = self._rows.get(task_id)
            return copy.deepcopy(row) if row else None

    def save_progress(self, task: Task) -> bool:
        with self._lock:
            row = self._rows.get(task.id)
            if row is None or row.done > task.done:  # only forward, as the DynamoDB condition
                return False
            self._rows[task.id] = copy.deepcopy(task)
            return True


class MemoryGraphRepo:
    """Each knowledge's contribution kept apart, as the DynamoDB items are (node, edge, reversed edge)."""

    def __init__(self) -> None:
        self._nodes: dict[tuple[str, str, str], GraphNode] = {}  # (kb, entity key, knowledge)
        self._edges: dict[tuple[str, str, str, str, str], GraphEdge] = {}  # (kb, a, rel, b, knowledge)
        self._edge_chunks: dict[tuple[str, str, str, str, str], set[str]] = {}
        self._lock = threading.Lock()

    def add(
        self,
        kb_id: str,
        knowledge_id: str,
        entities: Sequence[tuple[str, list[str], str]],
        relations: Sequence[tuple[str, str, str, str]],
    ) -> None:
        with self._lock:
            for name, attributes, chunk_id in entities:
                node = self._nodes.setdefault(
                    (kb_id, entity_key(name), knowledge_id), GraphNode(name, [], [], [knowledge_id])
                )
                node.attributes = sorted(set(node.attributes) | set(attributes))
                node.chunk_ids = sorted(set(node.chunk_ids) | {chunk_id})
            for source, relation, target, chunk_id in relations:
                key = (kb_id, entity_key(source), relation.casefold(), entity_key(target), knowledge_id)
                self._edges.setdefault(key, GraphEdge(source, relation, target, [knowledge_id]))
                self._edge_chunks.setdefault(key, set()).add(chunk_id)

    def _node(self, kb_id: str, key: str) -> GraphNode | None:
        parts = [n for (kb, k, _), n in self._nodes.items() if kb == kb_id and k == key]
        if not parts:
            return None
        return GraphNode(
            parts[0].name,
            sorted({a for n in parts for a in n.attributes}),
            sorted({c for n in parts for c in n.chunk_ids}),
            sorted({k for n in parts for k in n.knowledge_ids}),
        )

    def neighbourhood(self, kb_id: str, entity: str, limit: int = 50) -> GraphNeighbourhood:
        key = entity_key(entity)
        with self._lock:
            merged: dict[tuple[str, str, str], set[str]] = {}
            for (kb, a, _rel, b, knowledge), edge in self._edges.items():
                if kb == kb_id and key in (a, b):
                    merged.setdefault((edge.source, edge.relation, edge.target), set()).add(knowledge)
            edges = [GraphEdge(s, r, t, sorted(ks)) for (s, r, t), ks in list(merged.items())[:limit]]
            others = sorted(
                {entity_key(e.target if entity_key(e.source) == key else e.source) for e in edges}
            )
            neighbours = [n for n in (self._node(kb_id, o) for o in others[:limit]) if n is not None]
            return GraphNeighbourhood(self._node(kb_id, key), edges, neighbours)

    def delete_knowledge(self, kb_id: str, knowledge_id: str) -> int:
        with self._lock:
            nodes = [k for k in self._nodes if k[0] == kb_id and k[2] == knowledge_id]
            edges = [k for k in self._edges if k[0] == kb_id and k[4] == knowledge_id]
            for node in nodes:
                del self._nodes[node]
            for edge in edges:
                del self._edges[edge]
                self._edge_chunks.pop(edge, None)
            return len(nodes) + 2 * len(edges)

    def keep_only_attempt(self, kb_id: str, knowledge_id: str, chunk_prefix: str) -> int:
        removed = 0
        with self._lock:
            for key, node in list(self._nodes.items()):
                if key[0] == kb_id and key[2] == knowledge_id:
                    node.chunk_ids = [c for c in node.chunk_ids if c.startswith(chunk_prefix)]
                    if not node.chunk_ids:
                        del self._nodes[key]
                        removed += 1
            for edge_key, chunk_ids in list(self._edge_chunks.items()):
                if edge_key[0] == kb_id and edge_key[4] == knowledge_id:
                    kept = {c for c in chunk_ids if c.startswith(chunk_prefix)}
                    self._edge_chunks[edge_key] = kept
                    if not kept:
                        del self._edges[edge_key], self._edge_chunks[edge_key]
                        removed += 2  # the edge and its reverse, as the DynamoDB items
        return removed


class MemoryWikiRepo:
    def __init__(self) -> None:
        self._ops: dict[
            tuple[str, str], tuple[WikiOp, str, float]
        ] = {}  # (kb, knowledge) -> (op, status, at)
        self._pages: dict[tuple[str, str], list[WikiPageRecord]] = {}
        self._index: dict[str, str] = {}
        self._lock = threading.Lock()

    def put_op(self, op: WikiOp) -> None:
        with self._lock:
            current = self._ops.get((op.kb_id, op.knowledge_id))
            if current is None or current[0].attempt <= op.attempt:
                self._ops[(op.kb_id, op.knowledge_id)] = (copy.deepcopy(op), "pending", 0.0)

    def claim_ops(self, kb_id: str, limit: int, stale_after_seconds: int) -> list[WikiOp]:
        now = time.time()
        claimed: list[WikiOp] = []
        with self._lock:
            for key, (op, status, at) in self._ops.items():
                if len(claimed) >= limit:
                    break
                if key[0] != kb_id or (status == "running" and at > now - stale_after_seconds):
                    continue
                self._ops[key] = (op, "running", now)
                claimed.append(copy.deepcopy(op))
        return claimed

    def pending(self, kb_id: str) -> int:
        with self._lock:
            return sum(
                1 for (kb, _), (_, status, _) in self._ops.items() if kb == kb_id and status == "pending"
            )

    def finish_op(self, kb_id: str, knowledge_id: str, attempt: int) -> None:
        with self._lock:
            current = self._ops.get((kb_id, knowledge_id))
            if current is not None and current[0].attempt == attempt:
                del self._ops[(kb_id, knowledge_id)]

    def put_pages(self, kb_id: str, knowledge_id: str, pages: Sequence[WikiPageRecord]) -> None:
        with self._lock:
            self._pages[(kb_id, knowledge_id)] = [copy.deepcopy(p) for p in pages]

    def delete_pages(self, kb_id: str, knowledge_id: str) -> None:
        with self._lock:
            self._pages.pop((kb_id, knowledge_id), None)

    def pages(self, kb_id: str) -> list[WikiPageRecord]:
        with self._lock:
            return [copy.deepcopy(p) for (kb, _), pages in self._pages.items() if kb == kb_id for p in pages]

    def put_index(self, kb_id: str, markdown: str) -> None:
        with self._lock:
            self._index[kb_id] = markdown

    def get_index(self, kb_id: str) -> str | None:
        with self._lock:
            return self._index.get(kb_id)


# ---------------------------------------------------------------- embedding cache, health, URLs, sleep


class MemoryEmbeddingCache:
    """Vectors by (space, content hash), kept as float32 like the DynamoDB cache's bytes; a stored vector
    of another size is a miss there, and here."""

    def __init__(self) -> None:
        self._vectors: dict[tuple[str, str], Any] = {}
        #: content hashes written by each put_many call, in order (the checkpoints)
        self.writes: list[list[str]] = []
        self._lock = threading.Lock()

    def get_many(self, space: IndexSpace, content_hashes: Sequence[str]) -> dict[str, Vectors]:
        with self._lock:
            found = {h: self._vectors.get((space.name, h)) for h in dict.fromkeys(content_hashes)}
        return {h: v.copy() for h, v in found.items() if v is not None and v.shape[0] == space.dimensions}

    def put_many(self, space: IndexSpace, vectors: Mapping[str, Vectors]) -> None:
        import numpy as np

        stored = {h: np.asarray(v, dtype=np.float32).copy() for h, v in vectors.items()}
        with self._lock:
            for content_hash, vector in stored.items():
                self._vectors[(space.name, content_hash)] = vector
            self.writes.append(list(stored))


class MemoryHealthProbe:
    def __init__(self, checks: Mapping[str, bool] | None = None) -> None:
        self.checks = dict(checks or {"table": True, "queues": True, "bucket": True})

    def probe(self) -> dict[str, bool]:
        return dict(self.checks)


Scripted = FetchedDocument | FetchFailed


class ScriptedUrlImporter:
    """Answers each URL from a script: a document, a FetchFailed, or a list of those consumed in order
    (the last one repeats). `blocked` URLs fail the SSRF check with the real adapter's code."""

    def __init__(
        self, script: Mapping[str, Scripted | Sequence[Scripted]] | None = None, blocked: Iterable[str] = ()
    ) -> None:
        self.script: dict[str, list[Scripted]] = {}
        for url, answer in (script or {}).items():
            self.answer(url, answer)
        self.blocked = set(blocked)
        self.checked: list[str] = []
        self.fetched: list[str] = []
        self._lock = threading.Lock()

    def answer(self, url: str, answer: Scripted | Sequence[Scripted]) -> None:
        self.script[url] = list(answer) if isinstance(answer, Sequence) else [answer]

    def check(self, url: str) -> None:
        self.checked.append(url)
        if url in self.blocked:
            raise BadRequest("URL rejected: the address is not allowed", code="ssrf_blocked")

    def fetch(self, url: str) -> FetchedDocument:
        with self._lock:
            self.fetched.append(url)
            answers = self.script.get(url)
            if not answers:
                raise FetchFailed(f"HTTP 404 for {url}", permanent=True, status=404)
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, FetchFailed):
            raise answer
        return answer


class InstantSleep:
    """A sleeper that records the waits instead of sleeping them."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


# ---------------------------------------------------------------- the whole set


def memory_settings(**changes: Any) -> Settings:
    """Settings for in-memory runs: small size limits and embedding batches so limit and checkpoint tests
    stay cheap, no OCR or ASR probing, the hashing test model. The retry semantics (receives, backoff tries,
    deferrals, index write tries) are the production ones; waits are recorded, not slept."""
    base = Settings(
        prefix="mem",
        files_bucket="inbox",
        retrieval_engine="embedded",
        default_embedding_model="hashing/64",
        max_file_size=1024 * 1024,
        api_max_body=512 * 1024,
        manual_max_runes=20_000,
        embed_batch_size=4,
        ocr_provider="none",
        asr_provider="none",
    )
    return replace(base, **changes)


# ---------------------------------------------------------------- tags


def _listed(k: Knowledge, index: tuple[str, str] | None) -> bool:
    if index is None:
        return True
    name, value = index
    if name == "source":
        return listing_source(k.type) == value
    if name == "file_type":
        return k.file_type == value
    raise ValueError(f"no listing index {name!r}")


class MemoryTagRepo:
    """The tags table: tags, their names (unique per knowledge base), a count per knowledge base for the
    cap, and relations keyed (tag, created_at, knowledge) — all under one lock, as one transaction."""

    def __init__(self) -> None:
        self._tags: dict[tuple[str, str], Tag] = {}
        self._relations: set[tuple[str, str, str, str]] = set()  # (kb, tag, created_at, knowledge)
        self._lock = threading.RLock()

    def _name_holder(self, kb_id: str, name: str, but: str = "") -> str | None:
        key = name_key(name)
        return next(
            (
                t.id
                for (kb, _), t in self._tags.items()
                if kb == kb_id and t.id != but and name_key(t.name) == key
            ),
            None,
        )

    def create(self, tag: Tag, cap: int) -> None:
        with self._lock:
            holder = self._name_holder(tag.kb_id, tag.name)
            if holder is not None:
                raise TagNameTaken(holder)
            if sum(1 for kb, _ in self._tags if kb == tag.kb_id) >= cap:
                raise TagCapReached()
            stored = replace(
                copy.deepcopy(tag), created_at=_ms(tag.created_at), updated_at=_ms(tag.updated_at)
            )
            self._tags[(tag.kb_id, tag.id)] = stored

    def get(self, kb_id: str, tag_id: str) -> Tag | None:
        with self._lock:
            tag = self._tags.get((kb_id, tag_id))
            return copy.deepcopy(tag) if tag else None

    def list_kb(self, kb_id: str) -> list[Tag]:
        with self._lock:
            tags = [copy.deepcopy(t) for (kb, _), t in self._tags.items() if kb == kb_id]
        return sorted(tags, key=lambda t: (name_key(t.name), t.id))

    def update(
        self,
        kb_id: str,
        tag_id: str,
        *,
        name: str | None = None,
        color: str | None = None,
        status: str | None = None,
    ) -> Tag | None:
        with self._lock:
            tag = self._tags.get((kb_id, tag_id))
            if tag is None:
                return None
            if name is not None:
                holder = self._name_holder(kb_id, name, but=tag_id)
                if holder is not None:
                    raise TagNameTaken(holder)
                tag.name = name
            if color is not None:
                tag.color = color
            if status is not None:
                tag.status = status
            tag.updated_at = _now()
            return copy.deepcopy(tag)

    def delete(self, kb_id: str, tag_id: str) -> bool:
        with self._lock:
            return self._tags.pop((kb_id, tag_id), None) is not None

    def relate(self, kb_id: str, knowledge_id: str, created_at: str, tag_ids: Sequence[str]) -> None:
        with self._lock:
            self._relations.update((kb_id, t, created_at, knowledge_id) for t in tag_ids)

    def unrelate(self, kb_id: str, knowledge_id: str, created_at: str, tag_ids: Sequence[str]) -> None:
        with self._lock:
            self._relations.difference_update((kb_id, t, created_at, knowledge_id) for t in tag_ids)

    def remove_knowledge(self, knowledge_id: str) -> int:
        with self._lock:
            gone = {r for r in self._relations if r[3] == knowledge_id}
            self._relations -= gone
            return len(gone)

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
        with self._lock:
            keys = sorted(
                ((c, k) for kb, t, c, k in self._relations if kb == kb_id and t == tag_id), reverse=True
            )
        out = [
            key
            for key in keys
            if (created_from is None or key[0] >= created_from)
            and (created_to is None or key[0] <= created_to)
            and (after is None or key < after)
        ]
        return out[:limit]

    def delete_kb(self, kb_id: str) -> int:
        with self._lock:
            tags = [key for key in self._tags if key[0] == kb_id]
            relations = {r for r in self._relations if r[0] == kb_id}
            for key in tags:
                del self._tags[key]
            self._relations -= relations
            return len(tags) + len(relations)


# ---------------------------------------------------------------- FAQ


class MemoryFaqRepo:
    """FaqRepo in dicts: entries per knowledge base (copied in and out, as a table would), the lease with
    DynamoDB's conditional-write semantics, tags and the last import result."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, dict[str, Any]]] = {}
        self._leases: dict[str, FaqLease] = {}
        self._tags: dict[str, set[str]] = {}
        self._results: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def put_entries(self, entries: Sequence[FaqEntry]) -> None:
        with self._lock:
            for entry in entries:
                self._entries.setdefault(entry.kb_id, {})[entry.id] = entry.to_body()

    def get_entry(self, kb_id: str, entry_id: str) -> FaqEntry | None:
        from chalicelib.domain.faq import FaqEntry

        with self._lock:
            body = self._entries.get(kb_id, {}).get(entry_id)
            return FaqEntry.from_body(copy.deepcopy(body)) if body is not None else None

    def get_entries(self, kb_id: str, entry_ids: Sequence[str]) -> dict[str, FaqEntry]:
        found = {}
        for entry_id in dict.fromkeys(entry_ids):
            entry = self.get_entry(kb_id, entry_id)
            if entry is not None:
                found[entry_id] = entry
        return found

    def delete_entries(self, kb_id: str, entry_ids: Sequence[str]) -> None:
        with self._lock:
            rows = self._entries.get(kb_id, {})
            for entry_id in entry_ids:
                rows.pop(entry_id, None)

    def page_entries(self, kb_id: str, after: str, limit: int) -> tuple[list[FaqEntry], str]:
        from chalicelib.domain.faq import FaqEntry

        with self._lock:
            ids = sorted(i for i in self._entries.get(kb_id, {}) if i > after)
            page = ids[:limit]
            bodies = [copy.deepcopy(self._entries[kb_id][i]) for i in page]
        more = len(ids) > limit
        return [FaqEntry.from_body(b) for b in bodies], (page[-1] if more and page else "")

    def acquire_lease(self, kb_id: str, owner: str, now: float, ttl_seconds: float) -> FaqLease | None:
        with self._lock:
            held = self._leases.get(kb_id)
            if held is not None and held.owner != owner and held.expires_at > now:
                return held
            self._leases[kb_id] = FaqLease(owner, now + ttl_seconds)
            return None

    def release_lease(self, kb_id: str, owner: str) -> bool:
        with self._lock:
            held = self._leases.get(kb_id)
            if held is None or held.owner != owner:
                return False
            del self._leases[kb_id]
            return True

    def get_lease(self, kb_id: str) -> FaqLease | None:
        with self._lock:
            return self._leases.get(kb_id)

    def tags(self, kb_id: str) -> list[str]:
        with self._lock:
            return sorted(self._tags.get(kb_id, set()))

    def add_tags(self, kb_id: str, names: Sequence[str]) -> None:
        with self._lock:
            self._tags.setdefault(kb_id, set()).update(names)

    def remove_tags(self, kb_id: str, names: Sequence[str]) -> None:
        with self._lock:
            self._tags.setdefault(kb_id, set()).difference_update(names)

    def put_last_import(self, kb_id: str, result: Mapping[str, Any]) -> None:
        with self._lock:
            self._results[kb_id] = copy.deepcopy(dict(result))

    def get_last_import(self, kb_id: str) -> dict[str, Any] | None:
        with self._lock:
            result = self._results.get(kb_id)
            return copy.deepcopy(result) if result is not None else None
