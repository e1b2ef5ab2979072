"""The one composition root: builds the real or local adapters from settings and hands them, typed by the
ports (`ports.Dependencies`), to the handlers. Only app.py, functions/, local/ and bench import it.

Nothing heavy happens at import: boto3, PynamoDB, the parsers, the ONNX model and the index engine are built
on first use, so the API function's cold start pays only for what a request touches.

It is over 600 lines on purpose: every port's real and local adapters are wired here and nowhere else (one
composition root), and splitting the wiring would spread that one decision over several files.
"""

from __future__ import annotations

import functools
import json
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chalicelib.domain.storage_keys import PARSER_ENGINES_REPORT_KEY
from chalicelib.ports import (
    ApiKeyRepo,
    AsrEngine,
    ChatModel,
    ChunkRepo,
    DocReader,
    EmbeddingCache,
    EmbeddingModel,
    EventPublisher,
    FaqRepo,
    FileStore,
    GraphRepo,
    HealthProbe,
    ImageResolver,
    KnowledgeBaseRepo,
    KnowledgeRepo,
    OcrEngine,
    ProgressTracker,
    RequestCounter,
    ResourceCatalog,
    RetrieveEngine,
    SaveImage,
    SecretSource,
    ShareRepo,
    SpanRepo,
    Storage,
    TagRepo,
    TaskQueue,
    TaskRepo,
    TenantRepo,
    TurnBook,
    UnknownModel,
    UrlImporter,
    UsageRepo,
    VisionModel,
    WebhookRepo,
    WebhookSender,
    WikiRepo,
    Workflow,
)
from chalicelib.settings import QUEUES, Settings, get_settings

NOT_PROBED: Any = object()


@dataclass
class Services:
    """The Dependencies every use case receives. Repositories and queues are built eagerly (cheap clients);
    engines, models and parsers on first use. `replace_*` methods are the seams tests use for fakes."""

    settings: Settings
    tenants: TenantRepo
    api_keys: ApiKeyRepo
    shares: ShareRepo
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
    files: Storage
    inbox: FileStore
    queue: TaskQueue
    workflow: Workflow
    tracker: ProgressTracker
    urls: UrlImporter
    health: HealthProbe
    faq: FaqRepo
    turns: TurnBook
    requests: RequestCounter
    events: EventPublisher
    webhooks: WebhookRepo
    webhook_sender: WebhookSender
    #: how waits happen (backoff between retries); tests replace it to run without sleeping
    sleeper: Callable[[float], None] = time.sleep
    build_engine: Callable[[Settings, str], RetrieveEngine] | None = None
    build_embedding_cache: Callable[[], EmbeddingCache] | None = None
    models: Any = None  # adapters.models.registry.ModelRegistry
    #: where the operator key comes from on AWS (SSM), built on the first admin request
    build_operator_key: Callable[[Settings], SecretSource] | None = None
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _engines: dict[str, RetrieveEngine] = field(default_factory=dict)
    _embedders: dict[str, EmbeddingModel] = field(default_factory=dict)
    _embedding_cache: EmbeddingCache | None = None
    _docreader: DocReader | None = None
    _engines_reported: bool = False
    _ocr: Any = NOT_PROBED
    _asr: Any = NOT_PROBED
    _operator_key: SecretSource | None = None

    def sleep(self, seconds: float) -> None:
        self.sleeper(seconds)

    # -- index
    def engine(self, name: str = "") -> RetrieveEngine:
        name = name or self.settings.retrieval_engine
        with self._lock:
            if name not in self._engines:
                assert self.build_engine is not None
                self._engines[name] = self.build_engine(self.settings, name)
            return self._engines[name]

    def embedding_cache(self) -> EmbeddingCache:
        with self._lock:
            if self._embedding_cache is None:
                assert self.build_embedding_cache is not None
                self._embedding_cache = self.build_embedding_cache()
            return self._embedding_cache

    # -- models
    def _registry(self) -> Any:
        with self._lock:
            if self.models is None:
                from chalicelib.adapters.models.registry import ModelRegistry

                self.models = ModelRegistry(self.settings.models)
            return self.models

    def _spec(self, kind: str, name: str) -> str:
        """A tenant names a model; only the operator's catalog says what (and where) it is."""
        spec = self.settings.models.catalog.resolve(kind, name)
        if spec is None and kind == "embedding" and name == self.settings.default_embedding_model:
            spec = name  # the operator's default is always offered
        if spec is None:
            raise UnknownModel(f"{kind} model {name!r} is not offered here")
        return spec

    def embedding_model(self, model_id: str = "") -> EmbeddingModel:
        name = model_id or self.settings.default_embedding_model
        with self._lock:
            if name not in self._embedders:
                self._embedders[name] = self._registry().embedding(self._spec("embedding", name))
            return self._embedders[name]

    def chat_model(self, model_id: str) -> ChatModel | None:
        return self._registry().chat(self._spec("chat", model_id)) if model_id else None

    def vision_model(self, model_id: str) -> VisionModel | None:
        return self._registry().vision(self._spec("vision", model_id)) if model_id else None

    # -- parsing
    def docreader(self) -> DocReader:
        with self._lock:
            if self._docreader is None:
                from chalicelib.parsers import build_docreader

                self._docreader = build_docreader(ocr=self.ocr(), asr=self.asr())
            return self._docreader

    def parser_engines(self) -> list[dict[str, Any]]:
        if not self.settings.on_lambda:  # parsing happens in this very process
            return self.docreader().engines()
        url = self.inbox.url_for(PARSER_ENGINES_REPORT_KEY)
        if not self.inbox.exists(url):
            return []  # the docreader function has not run yet
        return list(json.loads(self.inbox.read(url)))

    def report_parser_engines(self) -> None:
        """The docreader function tells the API what it can parse (once per cold start)."""
        if self.settings.on_lambda and not self._engines_reported:
            payload = json.dumps(self.docreader().engines()).encode()
            self.inbox.save(PARSER_ENGINES_REPORT_KEY, payload, "application/json")
            self._engines_reported = True

    def ocr(self) -> OcrEngine | None:
        with self._lock:
            if self._ocr is NOT_PROBED:
                self._ocr = _build_ocr(self.settings)
            return self._ocr

    def asr(self) -> AsrEngine | None:
        with self._lock:
            if self._asr is NOT_PROBED:
                self._asr = _build_asr(self.settings, self.inbox)
            return self._asr

    def image_resolver(self, save: SaveImage) -> ImageResolver:
        from chalicelib.net.ssrf import AllowList
        from chalicelib.parsers.images import ImageResolver as MarkdownImageResolver
        from chalicelib.parsers.images import remote_image_client

        return MarkdownImageResolver(
            save, http=remote_image_client(AllowList.parse(self.settings.ssrf_allow))
        )

    # -- operators
    def operator_key(self) -> str | None:
        if self.settings.operator_key or not self.settings.operator_key_parameter:
            return self.settings.operator_key  # the local stack's plain value, or "" (admin API off)
        with self._lock:
            if self._operator_key is None:
                assert self.build_operator_key is not None
                self._operator_key = self.build_operator_key(self.settings)
            source = self._operator_key
        return source.read()

    # -- test seams: swap an adapter for a fake (the next use gets it)
    def replace_engine(self, engine: RetrieveEngine) -> None:
        with self._lock:
            self._engines.clear()
            self.build_engine = lambda _settings, _name: engine

    def replace_embedding_model(self, model: EmbeddingModel) -> None:
        with self._lock:
            self._embedders.clear()
            self.models = _FixedModels(model, self._registry())

    def replace_docreader(self, reader: DocReader) -> None:
        with self._lock:
            self._docreader = reader

    def replace_ocr_asr(self, ocr: OcrEngine | None, asr: AsrEngine | None) -> None:
        with self._lock:
            self._ocr, self._asr, self._docreader = ocr, asr, None

    def replace_operator_key(self, source: SecretSource) -> None:
        with self._lock:
            self._operator_key = source


class _FixedModels:
    """A registry whose every embedding id resolves to one model (a test seam)."""

    def __init__(self, model: EmbeddingModel, inner: Any) -> None:
        self.model, self.inner = model, inner

    def embedding(self, model_id: str) -> EmbeddingModel:
        return self.model

    def chat(self, model_id: str) -> ChatModel | None:
        return self.inner.chat(model_id)

    def vision(self, model_id: str) -> VisionModel | None:
        return self.inner.vision(model_id)


#: connections each shared AWS client keeps open: one client serves every thread of the process (the API's
#: request threads, each queue's concurrent invocations and their thread pools locally), and botocore's
#: default of 10 made urllib3 drop the extra ones with "Connection pool is full, discarding connection"
AWS_MAX_POOL_CONNECTIONS = 64


def _client(service: str, settings: Settings) -> Any:
    return _shared_client(service, settings.region, settings.aws_endpoint_url)


@functools.cache
def _shared_client(service: str, region: str, endpoint_url: str) -> Any:
    """One metered client per service and endpoint for the process: botocore clients are thread-safe, and
    building one (service model, endpoint rules) is the slow part of a cold start."""
    import boto3
    from botocore.config import Config

    from chalicelib.adapters.aws_metering import meter_client

    factory: Any = boto3.client
    config = Config(max_pool_connections=AWS_MAX_POOL_CONNECTIONS)
    if service == "s3":  # the files bucket: the storage clients' short waits, bounded tries and signatures
        from chalicelib.adapters.storage_backends import storage_client_config

        # on AWS virtual-hosted on the region's own host (a presigned link on the global host is redirected
        # for a new bucket's first day, which a browser's CORS preflight does not follow); locally the path
        style = "path" if endpoint_url else "virtual"
        config = storage_client_config(
            max_pool_connections=AWS_MAX_POOL_CONNECTIONS, s3={"addressing_style": style}
        )
    return meter_client(
        factory(service, region_name=region, endpoint_url=endpoint_url or None, config=config)
    )


def _build_ocr(settings: Settings) -> OcrEngine | None:
    """The configured OCR engine: the offline defaults locally, Textract on AWS."""
    if settings.ocr_provider == "none":
        return None
    if settings.ocr_provider == "textract":
        from chalicelib.parsers.ocr import TextractOcr

        return TextractOcr(_client("textract", settings))
    from chalicelib.parsers.ocr import default_ocr

    return default_ocr()


def _build_asr(settings: Settings, inbox: FileStore) -> AsrEngine | None:
    """The configured speech recognition: Whisper from PyPI wheels locally, Transcribe on AWS."""
    if settings.asr_provider == "none":
        return None
    if settings.asr_provider == "transcribe":
        from chalicelib.parsers.asr import TranscribeAsr

        # The media copy and the transcript live under transcribe/ in the files bucket (the inbox's)
        return TranscribeAsr(
            _client("transcribe", settings),
            inbox,
            bucket=settings.files_bucket,
            job_prefix=f"{settings.prefix}-",
        )
    try:
        from chalicelib.parsers.asr import default_asr
    except ImportError:  # faster-whisper is an optional extra
        return None
    return default_asr(settings.models.model_cache_dir)


def build_storage(settings: Settings, default: FileStore) -> Storage:
    """The default backend plus every named one (WEKNORA_STORAGE_BACKENDS), each with a client of its
    own built on first use, its credentials read then from Secrets Manager or SSM."""
    from chalicelib.adapters.storage import RoutingFileStore

    if not settings.storage_backends:
        return RoutingFileStore(default)
    from chalicelib.adapters.secrets import SsmParameter
    from chalicelib.adapters.storage_backends import SecretsManagerSecret, backend_store

    def secret_source(kind: str, name: str) -> SecretSource:
        if kind == "ssm":
            return SsmParameter(_client("ssm", settings), name)
        return SecretsManagerSecret(_client("secretsmanager", settings), name)

    named = {b.id: backend_store(b, settings.region, secret_source) for b in settings.storage_backends}
    return RoutingFileStore(default, named)


def _build_operator_key(settings: Settings) -> SecretSource:
    """The SecureString `make deploy` creates, cached (one GetParameter per cold start, then per TTL)."""
    from chalicelib.adapters.secrets import CachedSecret, SsmParameter

    return CachedSecret(SsmParameter(_client("ssm", settings), settings.operator_key_parameter))


def build_engine(
    settings: Settings, name: str, kb_tenant: Callable[[str], str | None] | None = None
) -> RetrieveEngine:
    """The retrieval engine `name` as the deployment configures it (also for operator tools). `kb_tenant`:
    a knowledge base's tenant, which names its OpenSearch index under the "tenant" index scope (an engine
    built without it, an operator tool's, refuses to name one there)."""
    if name == "embedded":
        from chalicelib.adapters.index.embedded import EmbeddedEngine

        return EmbeddedEngine(Path(settings.state_dir) / "index")
    if name == "opensearch":
        from chalicelib.adapters.index.opensearch import OpenSearchEngine, build_opensearch_client

        client = build_opensearch_client(
            settings.opensearch_url,
            region=settings.region,
            aws_auth=".amazonaws.com" in settings.opensearch_url,
        )
        if settings.opensearch_index_scope != "tenant":
            return OpenSearchEngine(client)
        return OpenSearchEngine(client, tenant_of=kb_tenant or _no_kb_tenant)
    raise ValueError(f"unknown retrieval engine {name!r}")


def _no_kb_tenant(kb_id: str) -> str | None:
    raise RuntimeError("this engine was built without the knowledge bases: no tenant index can be named")


def _kb_tenant(kbs: KnowledgeBaseRepo) -> Callable[[str], str | None]:
    """A knowledge base's tenant (None: gone), read consistently: one just created is already found."""

    def tenant_of(kb_id: str) -> str | None:
        kb = kbs.get(kb_id, consistent=True)
        return None if kb is None else kb.tenant_id

    return tenant_of


def _build_embedding_cache(settings: Settings, dynamodb: Any) -> EmbeddingCache:
    from chalicelib.adapters.dynamo import share_one_connection
    from chalicelib.adapters.dynamo.embedding_cache import (  # numpy: workers only
        DynamoEmbeddingCache,
        build_cache_model,
    )

    model = build_cache_model(settings)
    share_one_connection(dynamodb, model)
    return DynamoEmbeddingCache(model)


def _build_faq_repo(settings: Settings, dynamodb: Any) -> FaqRepo:
    from chalicelib.adapters.dynamo import share_one_connection
    from chalicelib.adapters.dynamo.faq import DynamoFaqRepo, build_faq_model

    model = build_faq_model(settings)
    share_one_connection(dynamodb, model)
    return DynamoFaqRepo(model)


def _build_webhook_repo(settings: Settings, dynamodb: Any) -> WebhookRepo:
    from chalicelib.adapters.dynamo import share_one_connection
    from chalicelib.adapters.dynamo.webhooks import DynamoWebhookRepo, build_webhook_model

    model = build_webhook_model(settings)
    share_one_connection(dynamodb, model)
    return DynamoWebhookRepo(model)


def _build_request_counter(settings: Settings, dynamodb: Any) -> RequestCounter:
    from chalicelib.adapters.dynamo import share_one_connection
    from chalicelib.adapters.dynamo.request_counts import DynamoRequestCounter, build_request_count_model

    model = build_request_count_model(settings)
    share_one_connection(dynamodb, model)
    return DynamoRequestCounter(model)


def _webhook_sender(settings: Settings) -> WebhookSender:
    from chalicelib.net.ssrf import AllowList
    from chalicelib.net.webhooks import SafeWebhookSender

    return SafeWebhookSender(AllowList.parse(settings.ssrf_allow), timeout=settings.webhook_timeout_seconds)


def _state_machine_arn(settings: Settings, sfn: Any) -> str:
    if settings.state_machine_arn:
        return settings.state_machine_arn
    wanted = f"{settings.prefix}-knowledge"
    for page in sfn.get_paginator("list_state_machines").paginate():
        for machine in page["stateMachines"]:
            if machine["name"] == wanted:
                return str(machine["stateMachineArn"])
    return f"arn:aws:states:{settings.region}:{settings.account_id}:stateMachine:{wanted}"


def build_services(settings: Settings | None = None) -> Services:
    """The AWS adapters (S3, DynamoDB, SQS, Step Functions; moto locally through AWS_ENDPOINT_URL)."""
    from chalicelib.adapters.aws_metering import meter_pynamodb
    from chalicelib.adapters.dynamo import (
        DynamoApiKeyRepo,
        DynamoChunkRepo,
        DynamoGraphRepo,
        DynamoKnowledgeBaseRepo,
        DynamoKnowledgeRepo,
        DynamoShareRepo,
        DynamoSpanRepo,
        DynamoTagRepo,
        DynamoTaskRepo,
        DynamoTenantRepo,
        DynamoWikiRepo,
        build_models,
        share_one_connection,
        shared_connection,
    )
    from chalicelib.adapters.dynamo.resources import DynamoResourceCatalog
    from chalicelib.adapters.dynamo.turns import DynamoTurnBook
    from chalicelib.adapters.dynamo.usage import DynamoUsageRepo, build_report_model, build_usage_model
    from chalicelib.adapters.events import EventBridgePublisher
    from chalicelib.adapters.health import AwsHealthProbe
    from chalicelib.adapters.queues import SqsTaskQueue
    from chalicelib.adapters.storage import LocalFileStore, S3FileStore
    from chalicelib.adapters.workflow import LazyStepFunctionsWorkflow
    from chalicelib.net.ssrf import AllowList
    from chalicelib.net.urlimport import SafeUrlImporter
    from chalicelib.services.stage_spans import SpanTracker

    settings = settings or get_settings()
    meter_pynamodb()
    models = build_models(settings)
    usage_model, report_model = build_usage_model(settings), build_report_model(settings)
    dynamodb = shared_connection(settings.region, settings.aws_endpoint_url)
    share_one_connection(dynamodb, *models.all(), usage_model, report_model)
    knowledge = DynamoKnowledgeRepo(models, settings.region)
    spans = DynamoSpanRepo(models)
    s3 = _client("s3", settings)
    sqs = _client("sqs", settings)
    inbox = S3FileStore(s3, settings.files_bucket)
    default_files: FileStore = (
        inbox if settings.storage == "s3" else LocalFileStore(Path(settings.state_dir) / "files")
    )
    files = build_storage(settings, default_files)
    queue = SqsTaskQueue(
        sqs,
        {q: settings.queue(q) for q in QUEUES},
        urls=settings.queue_urls,
        dead_letter_urls=settings.dead_letter_queue_urls,
    )
    kbs = DynamoKnowledgeBaseRepo(models)
    return Services(
        settings=settings,
        tenants=DynamoTenantRepo(models),
        api_keys=DynamoApiKeyRepo(models),
        shares=DynamoShareRepo(models),
        resources=DynamoResourceCatalog(models),
        kbs=kbs,
        tasks=DynamoTaskRepo(models),
        graph=DynamoGraphRepo(models),
        wiki=DynamoWikiRepo(models),
        tags=DynamoTagRepo(models, settings.region),
        knowledge=knowledge,
        chunks=DynamoChunkRepo(models),
        spans=spans,
        usage=DynamoUsageRepo(usage_model, report_model),
        files=files,
        inbox=inbox,
        queue=queue,
        workflow=LazyStepFunctionsWorkflow(
            lambda: _client("stepfunctions", settings), lambda sfn: _state_machine_arn(settings, sfn)
        ),
        tracker=SpanTracker(spans, knowledge),
        urls=SafeUrlImporter(AllowList.parse(settings.ssrf_allow), max_bytes=settings.max_file_size),
        health=AwsHealthProbe(
            knowledge_table=lambda: models.knowledge.describe_table(),
            queue=queue,
            queues=[q for q in QUEUES],
            bucket=lambda: s3.head_bucket(Bucket=settings.files_bucket),
        ),
        faq=_build_faq_repo(settings, dynamodb),
        turns=DynamoTurnBook(models),
        requests=_build_request_counter(settings, dynamodb),
        events=EventBridgePublisher(_client("events", settings), settings.event_bus_name),
        webhooks=_build_webhook_repo(settings, dynamodb),
        webhook_sender=_webhook_sender(settings),
        build_engine=lambda current, name: build_engine(current, name, _kb_tenant(kbs)),
        build_embedding_cache=lambda: _build_embedding_cache(settings, dynamodb),
        build_operator_key=_build_operator_key,
    )


def memory_deps(
    settings: Settings | None = None,
    *,
    index_dir: str | Path | None = None,
    embedding: EmbeddingModel | None = None,
    urls: UrlImporter | None = None,
) -> Services:
    """The in-memory adapters (adapters/memory/, never shipped) for fast service-level tests: no AWS, no network. The
    span tracker is the real one; the model is the HashingEmbedding test double; waits are recorded by an
    InstantSleep; the retrieval engine is the real embedded one under `index_dir` (a temporary directory,
    made on first use and removed with the returned Services, when not given)."""
    from chalicelib.adapters.memory import (
        InstantSleep,
        MemoryApiKeyRepo,
        MemoryChunkRepo,
        MemoryEmbeddingCache,
        MemoryEventPublisher,
        MemoryFaqRepo,
        MemoryFileStore,
        MemoryGraphRepo,
        MemoryHealthProbe,
        MemoryKnowledgeBaseRepo,
        MemoryKnowledgeRepo,
        MemoryResourceCatalog,
        MemoryShareRepo,
        MemorySpanRepo,
        MemoryTagRepo,
        MemoryTaskQueue,
        MemoryTaskRepo,
        MemoryTenantRepo,
        MemoryTurnBook,
        MemoryUsageRepo,
        MemoryWebhookRepo,
        MemoryWikiRepo,
        MemoryWorkflow,
        ScriptedUrlImporter,
        memory_settings,
    )
    from chalicelib.adapters.memory.request_counts import MemoryRequestCounter
    from chalicelib.adapters.models.hashing import HashingEmbedding
    from chalicelib.services.stage_spans import SpanTracker

    settings = settings or memory_settings()
    tenants = MemoryTenantRepo()
    knowledge = MemoryKnowledgeRepo(tenants)
    spans = MemorySpanRepo()
    cache = MemoryEmbeddingCache()
    scratch: list[tempfile.TemporaryDirectory[str]] = []  # held by build_engine, so as long as the services

    def build_engine(settings: Settings, name: str) -> RetrieveEngine:
        from chalicelib.adapters.index.embedded import EmbeddedEngine

        if name != "embedded":
            raise ValueError(f"the in-memory set has only the embedded engine, not {name!r}")
        if index_dir is not None:
            return EmbeddedEngine(Path(index_dir))
        scratch.append(tempfile.TemporaryDirectory(prefix="weknora-memory-index-"))
        return EmbeddedEngine(Path(scratch[-1].name))

    services = Services(
        settings=settings,
        tenants=tenants,
        api_keys=MemoryApiKeyRepo(),
        shares=MemoryShareRepo(),
        resources=MemoryResourceCatalog(),
        kbs=MemoryKnowledgeBaseRepo(),
        tasks=MemoryTaskRepo(),
        graph=MemoryGraphRepo(),
        wiki=MemoryWikiRepo(),
        tags=MemoryTagRepo(),
        knowledge=knowledge,
        chunks=MemoryChunkRepo(),
        spans=spans,
        usage=MemoryUsageRepo(),
        files=_memory_storage(settings, MemoryFileStore),
        inbox=MemoryFileStore(settings.files_bucket),
        queue=MemoryTaskQueue(max_receives=settings.stage_max_receives),
        workflow=MemoryWorkflow(),
        tracker=SpanTracker(spans, knowledge),
        urls=urls or ScriptedUrlImporter(),
        health=MemoryHealthProbe(),
        faq=MemoryFaqRepo(),
        turns=MemoryTurnBook(),
        requests=MemoryRequestCounter(),
        events=MemoryEventPublisher(),
        webhooks=MemoryWebhookRepo(),
        webhook_sender=_webhook_sender(settings),
        sleeper=InstantSleep(),
        build_engine=build_engine,
        build_embedding_cache=lambda: cache,
        build_operator_key=_no_operator_key,
    )
    services.replace_embedding_model(embedding or HashingEmbedding(64))
    services.replace_ocr_asr(None, None)
    return services


def _memory_storage(settings: Settings, store: Callable[[str], FileStore]) -> Storage:
    """The in-memory set's storage: the default store `files` and one in-memory store per configured
    backend (a `dummy` one keeps nothing, as on AWS), addressed as on AWS (`storage://<id>/<key>`)."""
    from chalicelib.adapters.storage import BackendFileStore, DummyFileStore, RoutingFileStore

    def inner(backend_id: str, keeps_nothing: bool) -> Callable[[], FileStore]:
        return lambda: DummyFileStore(backend_id) if keeps_nothing else store(f"backend-{backend_id}")

    named = {b.id: BackendFileStore(b.id, inner(b.id, b.keeps_nothing)) for b in settings.storage_backends}
    return RoutingFileStore(store("files"), named)


def _no_operator_key(settings: Settings) -> SecretSource:
    """The in-memory set has no parameter store: a named parameter is missing (`replace_operator_key`)."""
    from chalicelib.adapters.secrets import StaticSecret

    return StaticSecret(None)


_deps: Services | None = None
_deps_lock = threading.Lock()


def get_deps() -> Services:
    global _deps
    with _deps_lock:
        if _deps is None:
            _deps = build_services()
        return _deps


def set_deps(services: Services | None) -> None:
    """Tests and the local runtime swap the process-wide dependencies (None = rebuild on next use)."""
    global _deps
    with _deps_lock:
        _deps = services
