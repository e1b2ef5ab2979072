"""The one composition root: builds real or local adapters from settings.

Heavy things (parsers, the ONNX model, the index engine) are built on first use, so the API function's
cold start only pays for boto3 and PynamoDB.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3

from .adapters.dynamo import (
    DynamoChunkRepo,
    DynamoKnowledgeBaseRepo,
    DynamoKnowledgeRepo,
    DynamoSpanRepo,
    DynamoTenantRepo,
    build_models,
    hash_api_key,
)
from .adapters.queues import SqsTaskQueue
from .adapters.storage import LocalFileStore, S3FileStore
from .adapters.workflow import StepFunctionsWorkflow
from .domain.types import Tenant
from .ports import (
    AsrEngine,
    DocReader,
    EmbeddingCache,
    EmbeddingModel,
    FileStore,
    IndexSpace,
    OcrEngine,
    RetrieveEngine,
)
from .settings import QUEUES, Settings, get_settings
from .spans import SpanTracker

log = logging.getLogger(__name__)

LOCAL_TENANT_ID = "local"


@dataclass
class Services:
    settings: Settings
    tenants: DynamoTenantRepo
    kbs: DynamoKnowledgeBaseRepo
    knowledge: DynamoKnowledgeRepo
    chunks: DynamoChunkRepo
    spans: DynamoSpanRepo
    files: FileStore
    inbox: S3FileStore
    queue: SqsTaskQueue
    workflow: StepFunctionsWorkflow
    tracker: SpanTracker
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _engines: dict[str, RetrieveEngine] = field(default_factory=dict)
    _embedders: dict[str, EmbeddingModel] = field(default_factory=dict)
    _docreader: DocReader | None = None
    _embedding_cache: EmbeddingCache | None = None
    #: how waits happen (backoff between retries); tests replace it to run without sleeping
    sleep: Callable[[float], None] = time.sleep
    _ocr: OcrEngine | bool | None = False  # False = not probed yet
    _asr: AsrEngine | bool | None = False
    overrides: dict[str, Any] = field(default_factory=dict)  # test seams: e.g. a fake remote model

    # -- index
    def engine(self, name: str = "") -> RetrieveEngine:
        name = name or self.settings.retrieval_engine
        with self._lock:
            if name not in self._engines:
                self._engines[name] = self._build_engine(name)
            return self._engines[name]

    def _build_engine(self, name: str) -> RetrieveEngine:
        if "engine" in self.overrides:
            return self.overrides["engine"]
        if name == "embedded":
            from .adapters.index.embedded import EmbeddedEngine

            return EmbeddedEngine(Path(self.settings.state_dir) / "index")
        if name == "opensearch":
            from .adapters.index.opensearch import OpenSearchEngine, build_opensearch_client

            client = build_opensearch_client(
                self.settings.opensearch_url,
                region=self.settings.region,
                aws_auth=".amazonaws.com" in self.settings.opensearch_url,
            )
            return OpenSearchEngine(client)
        raise ValueError(f"unknown retrieval engine {name!r}")

    # -- models
    def embedding_model(self, model_id: str = "") -> EmbeddingModel:
        model_id = model_id or self.settings.default_embedding_model
        with self._lock:
            if model_id not in self._embedders:
                if "embedding_model" in self.overrides:
                    self._embedders[model_id] = self.overrides["embedding_model"]
                else:
                    from .adapters.models.registry import build_embedding_model

                    self._embedders[model_id] = build_embedding_model(model_id)
            return self._embedders[model_id]

    def embedding_cache(self) -> EmbeddingCache:
        with self._lock:
            if self._embedding_cache is None:
                from .adapters.embedding_cache import DynamoEmbeddingCache, build_cache_model

                self._embedding_cache = DynamoEmbeddingCache(build_cache_model(self.settings))
            return self._embedding_cache

    def index_space(self, model: EmbeddingModel) -> IndexSpace:
        return IndexSpace(model.model_id, model.dimensions)

    # -- parsing
    def docreader(self) -> DocReader:
        with self._lock:
            if self._docreader is None:
                if "docreader" in self.overrides:
                    self._docreader = self.overrides["docreader"]
                else:
                    from .parsers import build_docreader

                    self._docreader = build_docreader(ocr=self.ocr(), asr=self.asr())
            assert self._docreader is not None
            return self._docreader

    def ocr(self) -> OcrEngine | None:
        if self._ocr is False:
            self._ocr = self.overrides["ocr"] if "ocr" in self.overrides else self._probe("ocr")
        return self._ocr if self._ocr not in (False, True) else None  # type: ignore[return-value]

    def asr(self) -> AsrEngine | None:
        if self._asr is False:
            self._asr = self.overrides["asr"] if "asr" in self.overrides else self._probe("asr")
        return self._asr if self._asr not in (False, True) else None  # type: ignore[return-value]

    def _probe(self, kind: str) -> Any:
        """The configured OCR/ASR engine: the offline defaults locally, Textract/Transcribe on AWS."""
        provider = self.settings.ocr_provider if kind == "ocr" else self.settings.asr_provider
        if provider == "none":
            return None
        if provider == "textract":
            from .parsers.ocr import TextractOcr

            return TextractOcr(_client("textract", self.settings))
        if provider == "transcribe":
            from .parsers.asr import TranscribeAsr

            def upload(audio: bytes, file_name: str) -> str:
                return self.inbox.save(f"transcribe/{uuid.uuid4().hex}-{file_name}", audio)

            return TranscribeAsr(
                _client("transcribe", self.settings),
                upload,
                self.inbox.read,
                output_bucket=self.settings.files_bucket,
            )
        try:
            if kind == "ocr":
                from .parsers.ocr import default_ocr

                return default_ocr()
            from .parsers.asr import default_asr

            return default_asr()
        except ImportError:  # the offline engines are optional extras
            return None

    def ocr_available(self) -> bool:
        return self.ocr() is not None

    def asr_available(self) -> bool:
        return self.asr() is not None

    def url_allow_list(self) -> Any:
        """Hosts, `*.domains` and CIDRs the operator trusts (SSRF_WHITELIST, SSRF_WHITELIST_EXTRA)."""
        from .net.ssrf import AllowList

        return AllowList.from_env()

    def check_url(self, url: str) -> None:
        """SSRF gate for URL imports: the handler, the service and again the worker call it."""
        from .domain.errors import BadRequest
        from .net.ssrf import URLBlocked, validate_url

        try:
            validate_url(url, self.url_allow_list())
        except URLBlocked as error:
            raise BadRequest(f"URL rejected: {error.reason}", code="ssrf_blocked") from error


def _client(service: str, settings: Settings) -> Any:
    factory: Any = boto3.client
    return factory(service, region_name=settings.region)  # AWS_ENDPOINT_URL points it at moto locally


def _resolve_state_machine_arn(settings: Settings, sfn: Any) -> str:
    if settings.state_machine_arn:
        return settings.state_machine_arn
    wanted = f"{settings.prefix}-knowledge"
    for page in sfn.get_paginator("list_state_machines").paginate():
        for machine in page["stateMachines"]:
            if machine["name"] == wanted:
                return str(machine["stateMachineArn"])
    account = os.environ.get("AWS_ACCOUNT_ID", "123456789012")
    return f"arn:aws:states:{settings.region}:{account}:stateMachine:{wanted}"


def build_services(settings: Settings | None = None) -> Services:
    settings = settings or get_settings()
    models = build_models(settings)
    knowledge = DynamoKnowledgeRepo(models, settings.region)
    spans = DynamoSpanRepo(models)
    s3 = _client("s3", settings)
    inbox = S3FileStore(s3, settings.files_bucket)
    files: FileStore = (
        inbox if settings.storage == "s3" else LocalFileStore(Path(settings.state_dir) / "files")
    )
    sfn = _client("stepfunctions", settings)
    return Services(
        settings=settings,
        tenants=DynamoTenantRepo(models),
        kbs=DynamoKnowledgeBaseRepo(models),
        knowledge=knowledge,
        chunks=DynamoChunkRepo(models),
        spans=spans,
        files=files,
        inbox=inbox,
        queue=SqsTaskQueue(_client("sqs", settings), {q: settings.queue(q) for q in QUEUES}),
        workflow=StepFunctionsWorkflow(sfn, _resolve_state_machine_arn(settings, sfn)),
        tracker=SpanTracker(spans, knowledge),
    )


_services: Services | None = None
_services_lock = threading.Lock()


def get_services() -> Services:
    global _services
    with _services_lock:
        if _services is None:
            _services = build_services()
        return _services


def set_services(services: Services | None) -> None:
    """Tests and the local runtime swap the process-wide services (None = rebuild on next use)."""
    global _services
    with _services_lock:
        _services = services


def ensure_local_tenant(api_key: str, services: Services | None = None) -> Tenant:
    """The default local tenant whose key `make run` prints."""
    svc = services or get_services()
    tenant = svc.tenants.get(LOCAL_TENANT_ID)
    if tenant is None:
        tenant = Tenant(LOCAL_TENANT_ID, "local", hash_api_key(api_key))
        svc.tenants.put(tenant)
    elif tenant.api_key_hash != hash_api_key(api_key):
        tenant.api_key_hash = hash_api_key(api_key)  # a new key; the tenant's settings stay
        svc.tenants.put(tenant)
    return tenant


def create_tenant(
    name: str, api_key: str | None = None, services: Services | None = None
) -> tuple[Tenant, str]:
    svc = services or get_services()
    key = api_key or f"wk-{uuid.uuid4().hex}"
    tenant = Tenant(str(uuid.uuid4()), name, hash_api_key(key))
    svc.tenants.put(tenant)
    return tenant, key
