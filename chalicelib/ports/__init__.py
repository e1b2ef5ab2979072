"""The interfaces between use cases and adapters. Use cases depend on these; adapters implement them.

Nothing here imports boto3 or a model runtime. Embeddings travel as float32 numpy arrays of
shape (n, dimensions), L2-normalised, because every engine and model adapter speaks numpy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from chalicelib.ports.dependencies import Dependencies, ProgressTracker
from chalicelib.ports.events import (
    DeliveryRecord,
    EventPublisher,
    Webhook,
    WebhookAnswer,
    WebhookRepo,
    WebhookSender,
)
from chalicelib.ports.faq import FaqLease, FaqRepo
from chalicelib.ports.index import (
    IndexEntry,
    IndexSpace,
    IndexUnavailable,
    IndexWriteError,
    RetrieveEngine,
    SearchHit,
)
from chalicelib.ports.models import (
    AsrEngine,
    ChatModel,
    EmbeddingCache,
    EmbeddingModel,
    ModelAuthError,
    ModelEmptyResponse,
    ModelRequestError,
    ModelThrottled,
    ModelUnavailable,
    OcrEngine,
    UnknownModel,
    VisionModel,
)
from chalicelib.ports.network import FetchedDocument, FetchFailed, HealthProbe, SecretSource, UrlImporter
from chalicelib.ports.parsing import (
    DocReader,
    ImageResolver,
    ParsedImage,
    ReadRequest,
    ReadResult,
    ResolvedImages,
    SaveImage,
    StoredImage,
    iter_batches,
)
from chalicelib.ports.queues import DeadLetter, ServiceUnreachable, TaskQueue, Workflow, WorkflowStart
from chalicelib.ports.request_counts import RequestCounter
from chalicelib.ports.resources import ResourceCatalog
from chalicelib.ports.state import (
    ApiKeyRepo,
    ChunkRepo,
    DuplicateKnowledge,
    GraphEdge,
    GraphNeighbourhood,
    GraphNode,
    GraphRepo,
    KnowledgeBaseRepo,
    KnowledgeRepo,
    Page,
    ShareRepo,
    SpanRepo,
    StorageQuotaExceeded,
    StoredReport,
    TagRepo,
    TaskExists,
    TaskRepo,
    TenantRepo,
    UsageEntry,
    UsageRepo,
    WikiOp,
    WikiPageRecord,
    WikiRepo,
)
from chalicelib.ports.storage import (
    CrossBackendOperation,
    FileStore,
    ObjectNotRetained,
    ObjectTooLarge,
    Storage,
    UnknownStorageBackend,
)
from chalicelib.ports.turns import TurnBook, TurnBookBusy

if TYPE_CHECKING:  # numpy stays off the API function's cold-start path
    from chalicelib.ports.models import Vectors as Vectors

__all__ = [
    "ApiKeyRepo",
    "AsrEngine",
    "ChatModel",
    "ChunkRepo",
    "CrossBackendOperation",
    "DeadLetter",
    "DeliveryRecord",
    "Dependencies",
    "DocReader",
    "DuplicateKnowledge",
    "EmbeddingCache",
    "EmbeddingModel",
    "EventPublisher",
    "FaqLease",
    "FaqRepo",
    "FetchFailed",
    "FetchedDocument",
    "FileStore",
    "GraphEdge",
    "GraphNeighbourhood",
    "GraphNode",
    "GraphRepo",
    "HealthProbe",
    "ImageResolver",
    "IndexEntry",
    "IndexSpace",
    "IndexUnavailable",
    "IndexWriteError",
    "KnowledgeBaseRepo",
    "KnowledgeRepo",
    "ModelAuthError",
    "ModelEmptyResponse",
    "ModelRequestError",
    "ModelThrottled",
    "ModelUnavailable",
    "ObjectNotRetained",
    "ObjectTooLarge",
    "OcrEngine",
    "Page",
    "ParsedImage",
    "ProgressTracker",
    "ReadRequest",
    "ReadResult",
    "RequestCounter",
    "ResolvedImages",
    "ResourceCatalog",
    "RetrieveEngine",
    "SaveImage",
    "SearchHit",
    "SecretSource",
    "ServiceUnreachable",
    "ShareRepo",
    "SpanRepo",
    "Storage",
    "StorageQuotaExceeded",
    "StoredImage",
    "StoredReport",
    "TagRepo",
    "TaskExists",
    "TaskQueue",
    "TaskRepo",
    "TenantRepo",
    "TurnBook",
    "TurnBookBusy",
    "UnknownModel",
    "UnknownStorageBackend",
    "UrlImporter",
    "UsageEntry",
    "UsageRepo",
    "VisionModel",
    "Webhook",
    "WebhookAnswer",
    "WebhookRepo",
    "WebhookSender",
    "WikiOp",
    "WikiPageRecord",
    "WikiRepo",
    "Workflow",
    "WorkflowStart",
    "iter_batches",
]
