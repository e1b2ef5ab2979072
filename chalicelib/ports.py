"""The interfaces between use cases and adapters. Use cases depend on these; adapters implement them.

Nothing here imports boto3 or a model runtime. Embeddings travel as float32 numpy arrays of
shape (n, dimensions), L2-normalised, because every engine and model adapter speaks numpy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .domain.api_keys import ApiKey
from .domain.tags import Tag
from .domain.types import (
    Chunk,
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    Span,
    SpanStatus,
    Stage,
    StageMessage,
    Task,
    Tenant,
)
from .settings import Settings

if TYPE_CHECKING:  # numpy stays off the API function's cold-start path
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]

    from .faq.model import FaqEntry


# ---------------------------------------------------------------- storage


class FileStore(Protocol):
    """Object storage addressed by URLs (`s3://bucket/key`, `local://key`)."""

    def save(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        """Stores bytes under `key` and returns the object's URL."""
        ...

    def read(self, url: str) -> bytes:
        """The object's bytes; raises FileNotFoundError when it is missing (callers treat that as permanent)."""
        ...

    def delete(self, url: str) -> None:
        """Deletes the object; a missing object is not an error."""
        ...

    def exists(self, url: str) -> bool: ...

    def size(self, url: str) -> int: ...

    def url_for(self, key: str) -> str:
        """The URL an object under `key` would have, without touching storage."""
        ...

    def key_of(self, url: str) -> str: ...

    def presign_put(self, key: str, expires_seconds: int, content_type: str = "") -> str:
        """An HTTP URL a client can PUT the object's bytes to."""
        ...

    def copy(self, src_url: str, dst_key: str) -> str:
        """Copies an object of this store to `dst_key` (server side where the backend can) and returns the
        copy's URL; raises FileNotFoundError when the source is missing. Overwrites: a re-run is a no-op."""
        ...

    def presign_get(self, url: str, expires_seconds: int, file_name: str = "") -> str:
        """An HTTP URL a client can GET the object from (as an attachment named `file_name`, if given)."""
        ...


# ---------------------------------------------------------------- queues and workflow


class TaskQueue(Protocol):
    def send(self, stage: Stage, message: StageMessage, *, delay_seconds: int = 0) -> None:
        """Enqueues the stage's next message. Raises on failure (the caller marks the row failed)."""
        ...

    def send_raw(self, queue: str, body: Mapping[str, Any], *, delay_seconds: int = 0) -> None: ...

    def dead_letter(self, queue: str, body: str, reason: str) -> None:
        """Parks a message that can never succeed in the queue's DLQ, so it is kept, not lost."""
        ...

    def retry_later(self, queue: str, receipt_handle: str, delay_seconds: int) -> None:
        """A failed message comes back after `delay_seconds` instead of the queue's visibility timeout."""
        ...

    def backlog(self, queue: str) -> int:
        """Messages the queue holds (visible, in flight and delayed)."""
        ...

    def receive_dead_letters(self, queue: str, max_messages: int, hold_seconds: int) -> list[DeadLetter]:
        """Up to `max_messages` messages of the queue's DLQ, each once, kept out of other readers' sight
        for `hold_seconds` (until deleted or released)."""
        ...

    def delete_dead_letter(self, letter: DeadLetter) -> None: ...

    def release_dead_letter(self, letter: DeadLetter) -> None:
        """Makes a received dead letter visible again at once (it stays in the DLQ)."""
        ...


@dataclass(frozen=True)
class DeadLetter:
    """A message in a queue's dead-letter queue, as an operator sees it."""

    queue: str  # the logical queue it died on ('docreader', 'embedding', ...)
    message_id: str
    receipt_handle: str
    body: str
    #: why it was parked (a message the stage could not read), or '' when SQS moved it after maxReceiveCount
    reason: str = ""
    sent_at_ms: int = 0
    receive_count: int = 0


@dataclass(frozen=True)
class WorkflowStart:
    execution_id: str
    started: bool  # False when an execution of that name already existed


class Workflow(Protocol):
    def start(self, name: str, payload: Mapping[str, Any]) -> WorkflowStart: ...

    def is_running(self, name: str) -> bool: ...

    def task_success(self, token: str, output: Mapping[str, Any]) -> bool:
        """Returns False when the task is already closed (timed out, superseded, answered)."""
        ...

    def task_failure(self, token: str, error: str, cause: str) -> bool: ...

    def stop(self, name: str, cause: str) -> bool:
        """Stops a running execution; False when none of that name is running."""
        ...

    def transitions(self, name: str) -> int | None:
        """The state transitions a finished execution made (from its history); None while it runs or
        when there is none of that name."""
        ...


# ---------------------------------------------------------------- state


class TenantRepo(Protocol):
    def get(self, tenant_id: str) -> Tenant | None: ...

    def add_usage(self, tenant_id: str, delta_bytes: int) -> None:
        """Atomically adjusts the bytes the tenant stores (indexing adds, delete subtracts)."""
        ...

    def by_api_key(self, api_key: str) -> Tenant | None: ...

    def put(self, tenant: Tenant) -> None: ...

    def list_all(self) -> list[Tenant]:
        """Every tenant, ordered by id (operators only: a full read of the table)."""
        ...


class ApiKeyRepo(Protocol):
    """Issued API keys by hash. `get` is strongly consistent, so a revoked key is refused at once."""

    def get(self, key_hash: str) -> ApiKey | None: ...

    def put(self, key: ApiKey) -> None: ...

    def list(self, tenant_id: str) -> list[ApiKey]:
        """The tenant's issued (and revoked) keys, oldest first."""
        ...


class KnowledgeBaseRepo(Protocol):
    def get(self, kb_id: str) -> KnowledgeBase | None: ...

    def put(self, kb: KnowledgeBase) -> None: ...

    def by_name(self, tenant_id: str, name: str) -> KnowledgeBase | None: ...

    def list(self, tenant_id: str) -> list[KnowledgeBase]: ...

    def delete(self, kb_id: str) -> None: ...


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

    def insert(self, knowledge: Knowledge) -> None:
        """Atomically claims `knowledge.dedupe_key` (if set) and inserts the row.

        Raises DuplicateKnowledge with the holder when a live row holds the key; a key held by a
        failed or deleted row is taken over."""
        ...

    def delete(self, knowledge_id: str) -> bool:
        """Deletes the row, releases its dedupe claim and takes its stored bytes off the tenant's usage,
        atomically. False when the row was already gone."""
        ...

    def deleting_older_than(self, cutoff_iso: str) -> list[Knowledge]:
        """Rows marked deleting whose delete has not finished since the cutoff."""
        ...

    def publish(self, knowledge_id: str) -> Knowledge | None:
        """draft -> pending (one conditional write); None when the row is not a draft."""
        ...

    def list_by_kb(self, kb_id: str, page: int, page_size: int) -> Page: ...

    def begin_processing(self, knowledge_id: str, attempt: int) -> Knowledge | None:
        """pending|processing -> processing for this attempt, error cleared. None when the row is
        missing, superseded by a newer attempt, or in a state that must not be processed."""
        ...

    def mark_failed(self, knowledge_id: str, attempt: int | None, message: str, code: str) -> bool:
        """Fails the row unless it is terminal, being deleted, or (with `attempt`) superseded."""
        ...

    def mark_indexed(
        self, knowledge_id: str, attempt: int, *, chunk_count: int, storage_size: int, completed: bool
    ) -> bool:
        """enable_status=enabled; parse_status stays processing, or completed when nothing follows."""
        ...

    def reset_for_reparse(self, knowledge_id: str, process_overrides: Mapping[str, Any] | None) -> Knowledge:
        """attempt+1, status pending, error/description/processed_at/counter reset (one conditional write)."""
        ...

    def restart_attempt(
        self, knowledge_id: str, attempt: int, from_statuses: frozenset[ParseStatus]
    ) -> Knowledge | None:
        """The reparse reset, only while the row is still at `attempt` in one of `from_statuses` (one
        conditional write): a second redrive of the same dead attempt finds the row moved on. None then."""
        ...

    def mark_deleting(self, knowledge_id: str) -> Knowledge | None:
        """Any state -> deleting (one conditional write); the row as it now is, None when it is missing.
        A row already being deleted is returned as it is."""
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

    def promote(self, knowledge_id: str, attempt: int) -> bool:
        """finalizing -> completed, only at `attempt` with no slot left (one conditional write)."""
        ...

    def cancel(self, knowledge_id: str, message: str) -> Knowledge | None:
        """pending|processing|finalizing -> cancelled with the message, subtask count 0; None when the row
        is missing or not in one of those states."""
        ...

    def update_fields(self, knowledge_id: str, fields: Mapping[str, Any]) -> Knowledge | None:
        """Sets editable fields (title, description, metadata, tag_ids, enable_status; file_path, file_size
        and file_hash of a manual document's new text) unless the row is being deleted; None when it is
        missing or being deleted."""
        ...

    def mark_queued(self, knowledge_id: str, attempt: int, stage: str, visible_at: str) -> None:
        """Records that this attempt's `stage` message was queued and becomes visible at `visible_at`
        (only while the row is in flight for that attempt)."""
        ...

    def in_flight_older_than(self, cutoff_iso: str) -> list[Knowledge]:
        """pending/processing/finalizing rows whose updated_at is before the cutoff."""
        ...

    def summaries_processing_older_than(self, cutoff_iso: str) -> list[Knowledge]: ...

    def set_summary_status(
        self, knowledge_id: str, status: str, *, only_if: str | None = None, description: str | None = None
    ) -> bool:
        """The summary's status (and, when given, the description it produced) in one write; False when the
        row is missing or its status is not `only_if`."""
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

    # -- listing (chalicelib/listing.py): a page reads only about that page, never the whole knowledge base
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


class ChunkRepo(Protocol):
    def replace_all(self, knowledge_id: str, chunks: Sequence[Chunk]) -> None:
        """Deletes every chunk of the knowledge, then writes these (idempotent re-runs)."""
        ...

    def put_many(self, chunks: Sequence[Chunk]) -> None: ...

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


class SpanRepo(Protocol):
    def put(self, span: Span) -> None: ...

    def get(self, knowledge_id: str, attempt: int, span_id: str) -> Span | None: ...

    def get_many(self, knowledge_id: str, attempt: int, span_ids: Sequence[str]) -> dict[str, Span]:
        """The named spans that exist, by span id, in one read (strongly consistent)."""
        ...

    def list(self, knowledge_id: str, attempt: int) -> list[Span]: ...

    def latest_attempt(self, knowledge_id: str) -> int: ...

    def delete_all(self, knowledge_id: str) -> int: ...

    def last_activity_iso(self, knowledge_id: str) -> str | None: ...


@dataclass(frozen=True)
class UsageEntry:
    """What one invocation spent for one knowledge (see `metering`); `entry` is unique per invocation, so
    writing the same entry twice keeps one."""

    knowledge_id: str
    entry: str  # f"{attempt:06d}#{stage}#{invocation}"
    kb_id: str
    tenant_id: str
    counts: Mapping[str, float]
    created_at: str

    @property
    def attempt(self) -> int:
        return int(self.entry.split("#", 1)[0])

    @property
    def stage(self) -> str:
        return self.entry.split("#")[1]


class UsageRepo(Protocol):
    def put(self, entry: UsageEntry) -> None: ...

    def for_knowledge(self, knowledge_id: str) -> list[UsageEntry]: ...

    def for_kb(self, kb_id: str) -> Iterator[UsageEntry]: ...


class TaskRepo(Protocol):
    """Durable operations (delete, batch reparse, ...) and their progress."""

    def put(self, task: Task) -> None: ...

    def get(self, task_id: str) -> Task | None: ...

    def save_progress(self, task: Task) -> bool:
        """Writes the task's counters and status, only forward: False when a redelivered worker is behind
        what another run already recorded (its work was idempotent, its counts are not)."""
        ...


@dataclass
class GraphNode:
    name: str
    attributes: list[str]
    chunk_ids: list[str]
    knowledge_ids: list[str]


@dataclass
class GraphEdge:
    source: str
    relation: str
    target: str
    knowledge_ids: list[str]


@dataclass
class GraphNeighbourhood:
    entity: GraphNode | None
    edges: list[GraphEdge]
    neighbours: list[GraphNode]


class GraphRepo(Protocol):
    """Entities and relations per knowledge base; each knowledge's contribution is kept apart, so deleting
    (or re-extracting) a knowledge removes exactly what it added."""

    def add(
        self,
        kb_id: str,
        knowledge_id: str,
        entities: Sequence[tuple[str, list[str], str]],
        relations: Sequence[tuple[str, str, str, str]],
    ) -> None:
        """entities: (name, attributes, chunk_id); relations: (source, relation, target, chunk_id).
        Idempotent: adding the same facts again changes nothing."""
        ...

    def neighbourhood(self, kb_id: str, entity: str, limit: int = 50) -> GraphNeighbourhood: ...

    def delete_knowledge(self, kb_id: str, knowledge_id: str) -> int: ...

    def keep_only_attempt(self, kb_id: str, knowledge_id: str, chunk_prefix: str) -> int:
        """Drops what the knowledge's other attempts contributed: chunk ids that do not start with
        `chunk_prefix` leave every fact, and a fact left with none goes (unless a chunk id was added
        meanwhile), so facts the current attempt writes concurrently are never lost. Returns the facts
        removed."""
        ...


@dataclass
class WikiOp:
    """A document waiting for its wiki pages; its task token holds the document's finalizing slot."""

    kb_id: str
    knowledge_id: str
    attempt: int
    token: str


@dataclass
class WikiPageRecord:
    knowledge_id: str
    document: str
    title: str
    chunk_id: str


class WikiRepo(Protocol):
    def put_op(self, op: WikiOp) -> None:
        """Queues (or requeues, for a newer attempt) the document's wiki work."""
        ...

    def claim_ops(self, kb_id: str, limit: int, stale_after_seconds: int) -> list[WikiOp]:
        """Up to `limit` pending ops (or ones claimed longer ago than `stale_after_seconds`), now claimed."""
        ...

    def pending(self, kb_id: str) -> int: ...

    def finish_op(self, kb_id: str, knowledge_id: str, attempt: int) -> None: ...

    def put_pages(self, kb_id: str, knowledge_id: str, pages: Sequence[WikiPageRecord]) -> None:
        """Replaces the document's page records."""
        ...

    def delete_pages(self, kb_id: str, knowledge_id: str) -> None: ...

    def pages(self, kb_id: str) -> list[WikiPageRecord]: ...

    def put_index(self, kb_id: str, markdown: str) -> None: ...

    def get_index(self, kb_id: str) -> str | None: ...


# ---------------------------------------------------------------- index


@dataclass
class IndexEntry:
    """One searchable entry. `id` is unique per engine space; chunks use the chunk id."""

    id: str
    kb_id: str
    knowledge_id: str
    chunk_id: str
    content: str  # the index text: title + breadcrumb + trimmed content
    vector: npt.NDArray[np.float32] | None = None
    source_id: str = ""
    source_type: str = "chunk"
    chunk_type: str = "text"
    is_enabled: bool = True


@dataclass
class SearchHit:
    id: str
    chunk_id: str
    knowledge_id: str
    kb_id: str
    content: str
    score: float
    bm25_rank: int | None = None
    vector_rank: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class IndexSpace:
    """Entries embedded by one model at one dimension live in one space (one OpenSearch index)."""

    model_id: str
    dimensions: int

    @classmethod
    def of(cls, model: EmbeddingModel) -> IndexSpace:
        return cls(model.model_id, model.dimensions)

    @property
    def name(self) -> str:
        safe = "".join(ch if ch.isalnum() else "-" for ch in self.model_id.lower()).strip("-")
        return f"weknora-{safe}-{self.dimensions}"


class RetrieveEngine(Protocol):
    engine_name: str

    def batch_index(self, space: IndexSpace, entries: Sequence[IndexEntry]) -> None: ...

    def delete_by_knowledge(self, space: IndexSpace, kb_id: str, knowledge_ids: Sequence[str]) -> int: ...

    def delete_by_ids(self, space: IndexSpace, kb_id: str, entry_ids: Sequence[str]) -> int: ...

    def copy(
        self,
        space: IndexSpace,
        src_kb_id: str,
        src_knowledge_id: str,
        dst_kb_id: str,
        dst_knowledge_id: str,
        id_map: Mapping[str, str],
    ) -> int:
        """Copies entries (vectors included, nothing re-embedded), renaming chunk ids by `id_map`."""
        ...

    def set_enabled(self, space: IndexSpace, kb_id: str, chunk_ids: Sequence[str], enabled: bool) -> int: ...

    def hybrid_search(
        self,
        space: IndexSpace,
        kb_id: str,
        query_text: str,
        query_vector: npt.NDArray[np.float32] | None,
        top_k: int,
        *,
        keyword: bool = True,
        vector: bool = True,
    ) -> list[SearchHit]: ...

    def count(self, space: IndexSpace, kb_id: str, knowledge_id: str | None = None) -> int: ...

    def move_knowledge(
        self, space: IndexSpace, src_kb_id: str, dst_kb_id: str, knowledge_ids: Sequence[str]
    ) -> int:
        """Moves these knowledge's entries (vectors included, nothing re-embedded) from one knowledge base
        to another of the same space; the source keeps none. Idempotent: a re-run moves what is left."""
        ...

    def health(self) -> bool: ...


# ---------------------------------------------------------------- models


class EmbeddingModel(Protocol):
    model_id: str
    dimensions: int
    max_input_chars: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """float32 (len(texts), dimensions), L2-normalised. Raises ModelThrottled on 429/throttling."""
        ...


class ModelThrottled(Exception):
    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class ModelUnavailable(Exception):
    """The provider failed in a way a retry may fix (5xx, timeout, connection)."""


class ModelRequestError(ValueError):
    """The provider rejected the request and the same request will fail again (validation, unknown
    model, bad input, malformed response). Never retry; fail the item with a clear message."""

    code = "model_request_invalid"

    def __init__(self, message: str, *, provider_code: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.provider_code = provider_code
        self.status = status


class UnknownModel(ModelRequestError):
    """The name is not one of the models the operator offers."""

    code = "unknown_model"


class ModelAuthError(ModelRequestError):
    """Credentials or permissions are wrong: a configuration problem, not a document problem."""

    code = "model_auth_failed"


class ModelEmptyResponse(ModelRequestError):
    """The model answered with no text (e.g. a reasoning model spent `max_tokens` before answering)."""

    code = "model_empty_response"


class EmbeddingCache(Protocol):
    """Vectors by (model space, content hash). Written batch by batch as embedding proceeds, it is both the
    checkpoint a retried stage resumes from and the cache a reparse or clone hits for unchanged text."""

    def get_many(self, space: IndexSpace, content_hashes: Sequence[str]) -> dict[str, Vectors]: ...

    def put_many(self, space: IndexSpace, vectors: Mapping[str, Vectors]) -> None: ...


class ChatModel(Protocol):
    model_id: str

    def chat(
        self, messages: Sequence[Mapping[str, str]], *, temperature: float = 0.3, max_tokens: int = 2048
    ) -> str: ...


class VisionModel(Protocol):
    model_id: str

    def describe(self, image: bytes, prompt: str, *, max_tokens: int = 1024) -> str: ...


class OcrEngine(Protocol):
    name: str

    def available(self) -> bool: ...

    def recognize(self, image: bytes) -> str: ...


class AsrEngine(Protocol):
    name: str

    def available(self) -> bool: ...

    def transcribe(self, audio: bytes, file_name: str) -> str: ...


# ---------------------------------------------------------------- parsing


@dataclass
class ParsedImage:
    """An image a parser found: `ref` is how the Markdown points at it before it is stored."""

    ref: str
    data: bytes
    mime_type: str = "image/png"
    page: int | None = None
    is_original: bool = False  # the uploaded file itself: exempt from the icon filter
    tag: str = ""  # e.g. 'scanned_pdf' for rendered scanned pages


@dataclass
class ReadRequest:
    data: bytes
    file_name: str
    file_type: str
    engine: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    url: str = ""


@dataclass
class ReadResult:
    markdown: str
    images: list[ParsedImage] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    title: str = ""
    is_audio: bool = False
    audio: bytes = b""


class DocReader(Protocol):
    def read(self, request: ReadRequest) -> ReadResult:
        """Raises PermanentStageError for input that can never parse, TransientStageError otherwise.
        `options["page_range"] = (start, end)` parses only those pages of a PDF (0-based, end excluded)."""
        ...

    def page_count(self, request: ReadRequest) -> int | None:
        """The pages of a paged document (a PDF) without parsing it; None for other types."""
        ...

    def engines(self) -> list[dict[str, Any]]: ...


def iter_batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclass
class StoredImage:
    """An image saved through the FileStore; `url` is what the rewritten Markdown points at."""

    url: str
    original_ref: str
    mime_type: str
    page: int | None = None
    width: int | None = None
    height: int | None = None
    tag: str = ""
    is_original: bool = False


@dataclass
class ResolvedImages:
    markdown: str
    images: list[StoredImage] = field(default_factory=list)
    dropped_icons: int = 0
    dropped_over_limit: int = 0
    failed: int = 0


class ImageResolver(Protocol):
    def resolve(
        self, markdown: str, images: Sequence[ParsedImage] = (), *, remote: bool = True
    ) -> ResolvedImages:
        """Stores every image the Markdown or the parser holds (data URIs, bare base64, parser refs,
        remote images through the SSRF-safe client), drops icons, and rewrites the links."""
        ...


SaveImage = Callable[[bytes, str], str]  # (bytes, extension) -> stored URL


# ---------------------------------------------------------------- the network


class FetchFailed(Exception):
    """A download failed. `permanent` failures (blocked, too large, 4xx) must not be retried."""

    def __init__(self, message: str, *, permanent: bool, status: int | None = None):
        super().__init__(message)
        self.message = message
        self.permanent = permanent
        self.status = status


@dataclass(frozen=True)
class FetchedDocument:
    file_name: str
    file_type: str
    data: bytes
    title: str = ""


class UrlImporter(Protocol):
    """SSRF-safe URL import: the check the handler, the service and the worker run, and the download."""

    def check(self, url: str) -> None:
        """Raises domain BadRequest (code ssrf_blocked) for a URL the server must not reach."""
        ...

    def fetch(self, url: str) -> FetchedDocument:
        """A link to an importable file downloads as that file; a page becomes its main content.
        Raises FetchFailed."""
        ...


class HealthProbe(Protocol):
    def probe(self) -> dict[str, bool]:
        """Does each backing service (table, queues, bucket) answer? Never raises."""
        ...


class SecretSource(Protocol):
    """A secret kept outside the environment (on AWS the operator key, an SSM SecureString)."""

    def read(self) -> str | None:
        """The current value; None while it does not exist (it is created after the stack)."""
        ...


# ---------------------------------------------------------------- what use cases receive


class ProgressTracker(Protocol):
    """The per-attempt span tree (chalicelib.spans.SpanTracker). Writes are best effort."""

    def begin_stage(self, k: Knowledge, stage: Stage, inputs: Mapping[str, Any] | None = None) -> None: ...

    def end_stage(self, k: Knowledge, stage: Stage, outputs: Mapping[str, Any] | None = None) -> None: ...

    def progress(self, k: Knowledge, stage: Stage, outputs: Mapping[str, Any]) -> None: ...

    def skip_stage(self, k: Knowledge, stage: Stage, reason: str) -> None: ...

    def fail_stage(self, knowledge_id: str, attempt: int, stage: Stage, code: str, message: str) -> None: ...

    def close_root(
        self, knowledge_id: str, attempt: int, status: SpanStatus, code: str = "", message: str = ""
    ) -> None: ...

    def subspan(
        self,
        k: Knowledge,
        parent: Stage,
        span_id: str,
        status: SpanStatus,
        outputs: Mapping[str, Any] | None = None,
        error_code: str = "",
        error_message: str = "",
    ) -> None: ...

    def view(self, k: Knowledge, attempt: int | None = None) -> dict[str, Any]: ...


class Dependencies(Protocol):
    """Everything a use case may use, typed by the ports. The composition root (bootstrap) builds the
    real or local adapters; tests hand in in-memory fakes. Heavy adapters are built on first use."""

    settings: Settings
    tenants: TenantRepo
    api_keys: ApiKeyRepo
    kbs: KnowledgeBaseRepo
    tasks: TaskRepo
    graph: GraphRepo
    wiki: WikiRepo
    tags: TagRepo
    knowledge: KnowledgeRepo
    chunks: ChunkRepo
    spans: SpanRepo
    usage: UsageRepo
    files: FileStore
    #: the S3 bucket presigned uploads land in (and intents live in), whatever `files` is
    inbox: FileStore
    queue: TaskQueue
    workflow: Workflow
    tracker: ProgressTracker
    urls: UrlImporter
    health: HealthProbe
    #: FAQ entries, import leases, tags and import results (chalicelib/faq)
    faq: FaqRepo

    def sleep(self, seconds: float) -> None:
        """How waits happen (backoff between retries); tests make it instant."""
        ...

    def engine(self, name: str = "") -> RetrieveEngine: ...

    def embedding_model(self, model_id: str = "") -> EmbeddingModel: ...

    def embedding_cache(self) -> EmbeddingCache: ...

    def chat_model(self, model_id: str) -> ChatModel | None: ...

    def vision_model(self, model_id: str) -> VisionModel | None: ...

    def docreader(self) -> DocReader: ...

    def parser_engines(self) -> list[dict[str, Any]]:
        """The parser engines and their availability where documents are parsed (on AWS: the docreader
        image's last report, since the API function carries no parser)."""
        ...

    def ocr(self) -> OcrEngine | None: ...

    def asr(self) -> AsrEngine | None: ...

    def image_resolver(self, save: SaveImage) -> ImageResolver: ...

    def operator_key(self) -> str | None:
        """The key the /admin routes expect: settings' plain value, else the parameter's (read on first
        use, cached); "" when neither is configured, None when the parameter does not exist."""
        ...


# ---------------------------------------------------------------- FAQ knowledge bases


@dataclass(frozen=True)
class FaqLease:
    """Who holds a knowledge base's import lease (the import task's id) and until when (epoch seconds)."""

    owner: str
    expires_at: float


class FaqRepo(Protocol):
    """FAQ entries (`chalicelib.faq.model.FaqEntry`) per knowledge base, the knowledge base's import lease,
    its tag names and its last import result."""

    def put_entries(self, entries: Sequence[FaqEntry]) -> None: ...

    def get_entry(self, kb_id: str, entry_id: str) -> FaqEntry | None: ...

    def get_entries(self, kb_id: str, entry_ids: Sequence[str]) -> dict[str, FaqEntry]:
        """Entries by id in batched reads; missing ids are absent."""
        ...

    def delete_entries(self, kb_id: str, entry_ids: Sequence[str]) -> None: ...

    def page_entries(self, kb_id: str, after: str, limit: int) -> tuple[list[FaqEntry], str]:
        """Up to `limit` entries in id order after the id `after` ('' = from the start), and the id to go
        on after ('' when there are no more)."""
        ...

    def acquire_lease(self, kb_id: str, owner: str, now: float, ttl_seconds: float) -> FaqLease | None:
        """One conditional write: taken (or renewed) when free, expired or already `owner`'s; None then.
        Otherwise the holder's lease, unchanged."""
        ...

    def release_lease(self, kb_id: str, owner: str) -> bool:
        """Deletes the lease only if `owner` holds it."""
        ...

    def get_lease(self, kb_id: str) -> FaqLease | None: ...

    def tags(self, kb_id: str) -> list[str]: ...

    def add_tags(self, kb_id: str, names: Sequence[str]) -> None: ...

    def remove_tags(self, kb_id: str, names: Sequence[str]) -> None: ...

    def put_last_import(self, kb_id: str, result: Mapping[str, Any]) -> None: ...

    def get_last_import(self, kb_id: str) -> dict[str, Any] | None: ...
