"""Domain records. Plain dataclasses: adapters map them to storage, the API maps them to JSON."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any


def utcnow() -> datetime:
    return datetime.now(UTC)


class ParseStatus(StrEnum):
    DRAFT = "draft"
    PENDING = "pending"
    PROCESSING = "processing"
    FINALIZING = "finalizing"
    COMPLETED = "completed"
    FAILED = "failed"
    DELETING = "deleting"
    CANCELLED = "cancelled"


IN_FLIGHT_STATUSES = frozenset({ParseStatus.PENDING, ParseStatus.PROCESSING, ParseStatus.FINALIZING})
TERMINAL_STATUSES = frozenset({ParseStatus.COMPLETED, ParseStatus.FAILED, ParseStatus.CANCELLED})


class EnableStatus(StrEnum):
    DISABLED = "disabled"
    ENABLED = "enabled"


class SummaryStatus(StrEnum):
    NONE = "none"
    PENDING = "pending"
    PROCESSING = "processing"
    COMPLETED = "completed"
    FAILED = "failed"


class KnowledgeType(StrEnum):
    FILE = "file"
    URL = "url"
    FILE_URL = "file_url"
    MANUAL = "manual"


class Stage(StrEnum):
    """The five spec stages, in order. Each main stage has its own SQS queue."""

    DOCREADER = "docreader"
    CHUNKING = "chunking"
    EMBEDDING = "embedding"
    MULTIMODAL = "multimodal"
    POSTPROCESS = "postprocess"


ALL_STAGES: tuple[Stage, ...] = tuple(Stage)


class SpanStatus(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


class SpanKind(StrEnum):
    ROOT = "root"
    STAGE = "stage"
    SUBSPAN = "subspan"


class ChunkType(StrEnum):
    TEXT = "text"
    PARENT_TEXT = "parent_text"
    IMAGE_OCR = "image_ocr"
    IMAGE_CAPTION = "image_caption"
    SUMMARY = "summary"
    ENTITY = "entity"
    RELATIONSHIP = "relationship"
    FAQ = "faq"
    TABLE_SUMMARY = "table_summary"
    TABLE_COLUMN = "table_column"
    WIKI_PAGE = "wiki_page"


DEFAULT_CHUNK_SIZE = 512
DEFAULT_CHUNK_OVERLAP = 80
DEFAULT_SEPARATORS: tuple[str, ...] = ("\n\n", "\n", "。")


@dataclass
class ChunkingConfig:
    chunk_size: int = DEFAULT_CHUNK_SIZE
    chunk_overlap: int = DEFAULT_CHUNK_OVERLAP
    separators: list[str] = field(default_factory=lambda: list(DEFAULT_SEPARATORS))
    strategy: str = "recursive"  # recursive | heading | heuristic | auto
    enable_parent_child: bool = False
    parent_chunk_size: int = 4096
    child_chunk_size: int = 384
    token_limit: int = 0
    language: str = ""
    parser_engine_rules: dict[str, str] = field(default_factory=dict)  # file type -> engine


@dataclass
class IndexingStrategy:
    vector_enabled: bool = True
    keyword_enabled: bool = True
    wiki_enabled: bool = False
    graph_enabled: bool = False

    @property
    def needs_embedding(self) -> bool:
        return self.vector_enabled or self.keyword_enabled


@dataclass
class EnrichmentSettings:
    """What a knowledge base enriches its documents with, besides the summary (spec §1.11–§1.18)."""

    #: OCR and captions of the images inside documents (an uploaded image is always read)
    enable_multimodel: bool = False
    questions_enabled: bool = False
    question_count: int = 3
    #: the relation types graph extraction may use (empty: the extractor's own judgement)
    graph_relation_types: list[str] = field(default_factory=list)
    auto_tag_enabled: bool = False
    max_tags: int = 3
    #: a document that already has tags (given at upload or by hand) is not auto-tagged (spec §1.14)
    auto_tag_skip_if_tagged: bool = True
    #: the language image captions are written in (the spec's DescriptionLanguage); "" = the model's choice
    caption_language: str = ""
    #: extra instructions for the caption prompt (the spec's CustomInstructions)
    caption_instructions: str = ""


@dataclass
class FaqIndexSettings:
    """How an FAQ knowledge base's entries are indexed (the specification's FAQIndexMode and
    FAQQuestionIndexMode): the questions alone or each with the answers, and one vector per question
    (`separate`) or one for the standard and similar questions together (`combined`)."""

    index_mode: str = "question_only"  # | "question_answer"
    question_index_mode: str = "separate"  # | "combined"


@dataclass
class Tenant:
    id: str
    name: str
    api_key_hash: str
    created_at: datetime = field(default_factory=utcnow)
    #: file type -> engine, overlaid on every KB's rules of this tenant (uploads overlay it in turn)
    parser_engine_rules: dict[str, str] = field(default_factory=dict)
    #: bytes of the tenant's indexed documents (indexing adds, delete subtracts)
    storage_used: int = 0
    #: knowledge rows the tenant holds (create adds, delete subtracts), checked against `document_quota`
    document_count: int = 0
    #: the operator's limits; 0 = none
    storage_quota: int = 0
    document_quota: int = 0
    #: the operator's request rate for the tenant's keys; 0 = the deployment's (tenant_requests_per_second)
    requests_per_second: int = 0


@dataclass
class KnowledgeBase:
    id: str
    tenant_id: str
    name: str
    description: str = ""
    type: str = "document"  # document | faq
    chunking_config: ChunkingConfig = field(default_factory=ChunkingConfig)
    indexing_strategy: IndexingStrategy = field(default_factory=IndexingStrategy)
    embedding_model_id: str = ""
    summary_model_id: str = ""
    vlm_model_id: str = ""
    asr_model_id: str = ""
    #: tesseract languages every page is read with (`ocr_languages`); empty: detected per page
    ocr_languages: list[str] = field(default_factory=list)
    #: the spoken language of audio uploads (a Whisper code); "" = detected
    asr_language: str = ""
    #: how xlsx/xls sheets are written: "table" (a Markdown table, the header once) or "rows" (WeKnora's
    #: `header: value, …` line per row)
    spreadsheet_layout: str = "table"
    retrieval_engine: str = ""  # '' = the global default
    #: the named storage backend new documents' objects are written to ('' = the default backend)
    storage_backend: str = ""
    enrichment: EnrichmentSettings = field(default_factory=EnrichmentSettings)
    #: FAQ knowledge bases only: how entries are indexed (fixed at creation: the index is built from it)
    faq_index: FaqIndexSettings = field(default_factory=FaqIndexSettings)
    #: while a re-embed runs: {"task_id", "embedding_model_id", "retrieval_engine"} it switches to when done
    reembed_to: dict[str, str] = field(default_factory=dict)
    #: bumped by every conditional update (PUT, the re-embed's switch): a concurrent change is never lost
    version: int = 0
    #: "active", or "deleting" once a delete of the whole knowledge base is under way
    status: str = "active"
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime = field(default_factory=utcnow)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["created_at"] = self.created_at.isoformat()
        data["updated_at"] = self.updated_at.isoformat()
        return data


@dataclass
class Knowledge:
    id: str
    tenant_id: str
    kb_id: str
    type: KnowledgeType
    title: str = ""
    description: str = ""
    #: the description was written by a person (PUT): a summary never overwrites it
    description_by_user: bool = False
    source: str = ""  # the URL for url/file_url imports
    file_name: str = ""
    file_type: str = ""
    file_size: int = 0
    file_hash: str = ""
    file_path: str = ""  # storage URL: s3://bucket/key, local://key or storage://<backend>/key
    #: the storage backend the document's objects are written to, its knowledge base's at creation
    #: ('' = the default backend); a later change of the knowledge base's backend leaves it as it is
    storage_backend: str = ""
    parse_status: ParseStatus = ParseStatus.PENDING
    enable_status: EnableStatus = EnableStatus.DISABLED
    summary_status: SummaryStatus = SummaryStatus.NONE
    #: the nonce the write that last set the summary's status gave it ('' when none did): the summary's
    #: completion or failure is announced under an id made from it, again by a redelivery (domain/events.py)
    summary_occurrence: str = ""
    error_message: str = ""
    error_code: str = ""
    attempt: int = 1
    pending_subtasks_count: int = 0
    #: embedding fan-out (issue 27): the plan's key (attempt * 1000 + generation; 0: none) and its slices
    #: not yet released (-1: all released and the stage handed over)
    embed_plan: int = 0
    embed_slices_pending: int = 0
    #: the stage whose message was last put on a queue for this attempt, and when it becomes visible:
    #: housekeeping spares a row whose message is still waiting (and only such a row) while queues are busy
    queued_stage: str = ""
    queued_at: str = ""
    #: the enrichment plan of the latest attempt: what was planned, and what was not and why
    enrichment: dict[str, Any] = field(default_factory=dict)
    enable_multimodel: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)
    process_overrides: dict[str, Any] = field(default_factory=dict)
    tag_ids: list[str] = field(default_factory=list)
    channel: str = "api"
    folder_path: str = ""
    storage_size: int = 0
    chunk_count: int = 0
    dedupe_key: str = ""
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime = field(default_factory=utcnow)
    processed_at: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        """The tenant-visible shape: no internal storage path or dedupe key, no credentials in URLs."""
        from chalicelib.domain.urls import redact_credentials

        data = asdict(self)
        for key in ("created_at", "updated_at", "processed_at"):
            value = data[key]
            data[key] = value.isoformat() if value else None
        from chalicelib.domain.resources import resource_id_for

        # the stored original's stable reference (the catalog entry is made by its first download link)
        has_original = self.file_path and self.type not in (KnowledgeType.URL, KnowledgeType.MANUAL)
        data["file_resource"] = resource_id_for(self.file_path) if has_original else None
        for internal in ("dedupe_key", "file_path", "summary_occurrence"):
            data.pop(internal, None)
        data["source"] = redact_credentials(self.source)
        return data


@dataclass
class Chunk:
    id: str
    tenant_id: str
    kb_id: str
    knowledge_id: str
    seq: int
    content: str
    chunk_type: ChunkType = ChunkType.TEXT
    start_at: int = 0
    end_at: int = 0
    context_header: str = ""
    pre_chunk_id: str = ""
    next_chunk_id: str = ""
    parent_chunk_id: str = ""
    is_enabled: bool = True
    status: int = 1  # 1 stored; indexed-ness is the knowledge's enable_status (no per-chunk rewrite)
    content_hash: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    image_info: list[dict[str, Any]] = field(default_factory=list)
    created_at: datetime = field(default_factory=utcnow)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["created_at"] = self.created_at.isoformat()
        data.pop("context_header", None)  # internal, as in WeKnora's API
        return data


@dataclass
class Span:
    knowledge_id: str
    attempt: int
    span_id: str  # 'root', 'docreader', 'multimodal.image[3]', ...
    name: str
    kind: SpanKind
    status: SpanStatus = SpanStatus.PENDING
    parent_id: str = ""
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    error_code: str = ""
    error_message: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    updated_at: datetime = field(default_factory=utcnow)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in ("started_at", "ended_at", "updated_at"):
            value = data[key]
            data[key] = value.isoformat() if value else None
        return data


@dataclass(frozen=True)
class StageMessage:
    """What travels on a stage queue: pointers only, never document bodies."""

    tenant_id: str
    knowledge_id: str
    attempt: int
    #: times this stage was put back on its queue because a provider throttled (not a failed try)
    deferrals: int = 0
    #: where a sliced stage resumes (embedding: how many texts earlier slices indexed)
    offset: int = 0
    #: docreader only: the pages [page_start, page_end) this message parses (0, 0: the whole document)
    page_start: int = 0
    page_end: int = 0
    #: docreader only: put the parsed page ranges together (every range is stored)
    assemble: bool = False
    #: embedding only: the last chunk id earlier slices read (the next slice reads the chunks after it)
    cursor: str = ""
    #: embedding fan-out (issue 27): the plan's generation (0: not planned yet), its number of slices, this
    #: slice's index and the chunk sequence numbers a slice covers ([index * size, (index + 1) * size));
    #: a slice message's `offset` is the sequence number it resumes at
    plan: int = 0
    slices: int = 0
    slice_index: int = 0
    slice_size: int = 0
    #: how many slices run at once: a finished slice queues the one this many places after it (carried, so a
    #: change of the setting while a document is fanned out neither skips nor strands a slice; 0: the setting)
    slice_stride: int = 0
    #: what earlier hand-overs of this slice (or chain) counted: texts embedded, cache hits, batches,
    #: entries indexed (a few integers, so a redelivered hand-over counts nothing twice)
    counts: dict[str, int] = field(default_factory=dict)
    #: docreader only: the turn at the pipeline's door this message carries (domain/door.py; "": a first
    #: delivery, which never waited)
    door_ticket: str = ""

    @property
    def is_slice(self) -> bool:
        return self.slices > 0

    @property
    def is_page_range(self) -> bool:
        return self.page_end > self.page_start

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "tenant_id": self.tenant_id,
            "knowledge_id": self.knowledge_id,
            "attempt": self.attempt,
        }
        if self.deferrals:
            data["deferrals"] = self.deferrals
        if self.offset:
            data["offset"] = self.offset
        if self.is_page_range:
            data.update(page_start=self.page_start, page_end=self.page_end)
        if self.assemble:
            data["assemble"] = True
        if self.cursor:
            data["cursor"] = self.cursor
        if self.plan:
            data["plan"] = self.plan
        if self.is_slice:
            data.update(slices=self.slices, slice_index=self.slice_index, slice_size=self.slice_size)
            if self.slice_stride:
                data["slice_stride"] = self.slice_stride
        if self.counts:
            data["counts"] = dict(self.counts)
        if self.door_ticket:
            data["door_ticket"] = self.door_ticket
        return data


class TaskKind(StrEnum):
    """Durable work a request hands to the lifecycle queue (it answers with the task's id)."""

    DELETE_KNOWLEDGE = "delete_knowledge"
    DELETE_KB = "delete_kb"
    REPARSE = "reparse"
    RETRY_FAILED = "retry_failed"
    MOVE = "move"
    CLONE_KB = "clone_kb"
    DELETE_TAG = "delete_tag"
    FAQ_IMPORT = "faq_import"
    REEMBED = "reembed"
    REPARSE_KB = "reparse_kb"
    #: a big knowledge base's cost or stats report, read whole and stored (operations/kb_reports.py)
    KB_REPORT = "kb_report"
    #: a big document's enable or disable: its index entries follow its row (tasks/switch.py)
    SWITCH_KNOWLEDGE = "switch_knowledge"


class TaskStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    PARTIAL = "partial"  # some items failed
    FAILED = "failed"  # every item failed


#: a task not yet ended: its worker (or a re-send of its message) still has work to do
OPEN_TASK_STATUSES = frozenset({TaskStatus.QUEUED, TaskStatus.RUNNING})


@dataclass
class Task:
    """Progress of one durable operation over a set of items (knowledge ids), visible at GET /tasks/{id}."""

    id: str
    tenant_id: str
    kind: TaskKind
    status: TaskStatus = TaskStatus.QUEUED
    kb_id: str = ""
    items: list[str] = field(default_factory=list)
    #: items done so far, in order; the worker resumes after the last one
    done: int = 0
    succeeded: int = 0
    failed: int = 0
    #: item id -> why it failed (at most the first 200)
    errors: dict[str, str] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    created_at: datetime = field(default_factory=utcnow)
    updated_at: datetime = field(default_factory=utcnow)
    #: kind-specific progress shown as is (an FAQ import's counters, offset and failed-rows URL)
    progress: dict[str, Any] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return len(self.items)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind.value,
            "status": self.status.value,
            "kb_id": self.kb_id,
            "total": self.total if self.items else None,  # a whole-KB task learns its size as it goes
            "done": self.done,
            "succeeded": self.succeeded,
            "failed": self.failed,
            "errors": self.errors,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            **({"progress": self.progress} if self.progress else {}),
        }
