"""What use cases receive: the progress tracker and the dependencies protocol."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from chalicelib.domain.types import (
    Knowledge,
    SpanStatus,
    Stage,
)
from chalicelib.ports.events import EventPublisher, WebhookRepo, WebhookSender
from chalicelib.ports.faq import FaqRepo
from chalicelib.ports.index import RetrieveEngine
from chalicelib.ports.models import (
    AsrEngine,
    ChatModel,
    EmbeddingCache,
    EmbeddingModel,
    OcrEngine,
    VisionModel,
)
from chalicelib.ports.network import HealthProbe, UrlImporter
from chalicelib.ports.parsing import DocReader, ImageResolver, SaveImage
from chalicelib.ports.queues import TaskQueue, Workflow
from chalicelib.ports.request_counts import RequestCounter
from chalicelib.ports.resources import ResourceCatalog
from chalicelib.ports.state import (
    ApiKeyRepo,
    ChunkRepo,
    GraphRepo,
    KnowledgeBaseRepo,
    KnowledgeRepo,
    ShareRepo,
    SpanRepo,
    TagRepo,
    TaskRepo,
    TenantRepo,
    UsageRepo,
    WikiRepo,
)
from chalicelib.ports.storage import FileStore, Storage
from chalicelib.ports.turns import TurnBook
from chalicelib.settings import Settings


class ProgressTracker(Protocol):
    """The per-attempt span tree (chalicelib.services.stage_spans.SpanTracker). Writes are best effort."""

    def begin_stage(self, k: Knowledge, stage: Stage, inputs: Mapping[str, Any] | None = None) -> None: ...

    def end_stage(self, k: Knowledge, stage: Stage, outputs: Mapping[str, Any] | None = None) -> None: ...

    def progress(self, k: Knowledge, stage: Stage, outputs: Mapping[str, Any]) -> None: ...

    def planned(self, k: Knowledge, stage: Stage, outputs: Mapping[str, Any]) -> None: ...

    def counters(
        self, k: Knowledge, stage: Stage, counts: Mapping[str, int], *, reset: bool = False
    ) -> None: ...

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
    shares: ShareRepo
    #: stored objects under stable resource:// ids, and their download grants
    resources: ResourceCatalog
    kbs: KnowledgeBaseRepo
    tasks: TaskRepo
    graph: GraphRepo
    wiki: WikiRepo
    tags: TagRepo
    knowledge: KnowledgeRepo
    chunks: ChunkRepo
    spans: SpanRepo
    usage: UsageRepo
    #: the documents' objects, on every configured backend (`files.backend(kb.storage_backend)` writes)
    files: Storage
    #: the S3 bucket presigned uploads land in (and intents live in), whatever `files` is
    inbox: FileStore
    queue: TaskQueue
    workflow: Workflow
    tracker: ProgressTracker
    urls: UrlImporter
    health: HealthProbe
    #: FAQ entries, import leases, tags and import results (chalicelib/faq)
    faq: FaqRepo
    #: whose turn it is at each stage's door (fairness between tenants)
    turns: TurnBook
    #: the tenants' requests per window (their request limit)
    requests: RequestCounter
    #: where changes are announced (the stack's EventBridge bus)
    events: EventPublisher
    #: the knowledge bases' webhooks and their delivery logs
    webhooks: WebhookRepo
    #: posts webhook deliveries through the SSRF-safe client
    webhook_sender: WebhookSender

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
