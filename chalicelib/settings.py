"""Settings: the one place that reads the environment, into one frozen, typed object built once per process.

Over 600 lines: one object of every setting and the reading of each from the environment; split, a setting
and its variable would be read in one place and declared in another.

Nothing else in `chalicelib` reads `os.environ`; adapters and use cases receive what they need from here
through the composition root. `subprocess_env` is the single exception's home: a child process (tesseract,
LibreOffice) inherits the environment with a few variables changed.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from chalicelib.domain.process_config import EXTRACTIVE_SUMMARY
from chalicelib.domain.storage_backends import BACKEND_ID, PRESETS, REGION, default_endpoint

TABLES = (
    "tenants",
    "knowledge-bases",
    "knowledge",
    "dedupe",
    "chunks",
    "spans",
    "embedding-cache",
    "tasks",
    "graph",
    "wiki",
    "usage",
    "tags",
    "faq",
    "turns",
    "webhooks",
    "resources",
    "request-counts",
)
QUEUES = (
    "uploads",
    "docreader",
    "chunking",
    "embedding",
    "multimodal",
    "postprocess",
    "enrichment",
    "lifecycle",
    "wiki",
    "faq-import",
    "webhooks",
    # the webhooks' slow lane: the tries of degraded webhooks (stages/webhooks.py)
    "webhooks-slow",
)


def _variable_part(name: str) -> str:
    """A queue's or table's name as part of an environment variable (Lambda allows only [A-Za-z0-9_])."""
    return name.upper().replace("-", "_")


def queue_name_variable(queue: str) -> str:
    """The variable that overrides a stage queue's SQS name."""
    return "WEKNORA_QUEUE_" + _variable_part(queue)


def queue_url_variable(queue: str) -> str:
    """The variable that gives a function the URL of a stage queue it uses (infra/stack.py writes it from the
    queue's `Ref`): with it, the queue adapter makes no GetQueueUrl call."""
    return "WEKNORA_QUEUE_URL_" + _variable_part(queue)


def dead_letter_queue_url_variable(queue: str) -> str:
    """The variable that gives a function the URL of a stage queue's dead-letter queue."""
    return "WEKNORA_DLQ_URL_" + _variable_part(queue)


#: the local MiniLM model spaces (adapters/models/local_onnx.py): int8 arithmetic with 7-bit weights, the
#: same vectors on every CPU (the default); int8 arithmetic with 8-bit weights, without ONNX Runtime's
#: SkipLayerNormalization fusion and with it (both CPU-dependent); the shipped file (fp32 arithmetic). The
#: older ones stay offered, so knowledge bases that name them keep their vectors (ids, not defaults: a
#: model space never changes under a stored vector)
MINILM_QINT8_V3_MODEL_ID = "local/all-MiniLM-L6-v2-qint8-v3"
MINILM_QINT8_V2_MODEL_ID = "local/all-MiniLM-L6-v2-qint8-v2"
MINILM_QINT8_MODEL_ID = "local/all-MiniLM-L6-v2-qint8"
MINILM_MODEL_ID = "local/all-MiniLM-L6-v2-int8"
LOCAL_MINILM_MODEL_IDS = (
    MINILM_QINT8_V3_MODEL_ID,
    MINILM_QINT8_V2_MODEL_ID,
    MINILM_QINT8_MODEL_ID,
    MINILM_MODEL_ID,
)
DEFAULT_EMBEDDING_MODEL = MINILM_QINT8_V3_MODEL_ID
#: embedding models trained on English text alone (the local MiniLM spaces, Cohere's English model)
LATIN_ONLY_EMBEDDING_MODELS = frozenset({*LOCAL_MINILM_MODEL_IDS, "bedrock/cohere.embed-english-v3"})
DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"


MODEL_KINDS = ("embedding", "chat", "vision", "asr")


@dataclass(frozen=True)
class ModelCatalog:
    """The models the operator offers, by kind and name: a tenant picks a model by name from this list,
    never by endpoint, so no tenant can make the server call a host the operator did not configure.

    Each entry maps a name to a model spec (`provider/model[@base_url][#params]`, see
    adapters/models/registry.py). WEKNORA_MODELS (JSON, `{"chat": {"nova": "bedrock/..."}}`) adds to or
    replaces the defaults: the default embedding model and the offline extractive summariser."""

    entries: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def resolve(self, kind: str, name: str) -> str | None:
        """The spec a name stands for; a stored KB may also hold the spec itself (before names existed)."""
        offered = self.entries.get(kind, {})
        if name in offered:
            return offered[name]
        return name if name and name in offered.values() else None

    def names(self, kind: str) -> list[str]:
        return sorted(self.entries.get(kind, {}))

    def endpoints(self) -> list[str]:
        """Base URLs of the OpenAI-compatible models offered: the only model hosts the server may call."""
        urls = []
        for offered in self.entries.values():
            for spec in offered.values():
                model = spec.partition("#")[0]
                if "@" in model and model.rpartition("@")[2].startswith(("http://", "https://")):
                    urls.append(model.rpartition("@")[2])
        return urls


def _catalog(raw: str, default_embedding: str) -> ModelCatalog:
    entries: dict[str, dict[str, str]] = {
        "embedding": {
            **{model_id: model_id for model_id in LOCAL_MINILM_MODEL_IDS},
            default_embedding: default_embedding,
        },
        "chat": {EXTRACTIVE_SUMMARY: EXTRACTIVE_SUMMARY},
        "vision": {},
        "asr": {},
    }
    if raw:
        try:
            configured = json.loads(raw)
        except json.JSONDecodeError as error:
            raise ValueError("WEKNORA_MODELS is not valid JSON") from error
        if not isinstance(configured, dict) or set(configured) - set(MODEL_KINDS):
            raise ValueError(f"WEKNORA_MODELS must be an object with the keys {', '.join(MODEL_KINDS)}")
        for kind, offered in configured.items():
            if not isinstance(offered, dict) or not all(
                isinstance(k, str) and isinstance(v, str) and k and v for k, v in offered.items()
            ):
                raise ValueError(f"WEKNORA_MODELS.{kind} must map names to model specs")
            entries[kind].update(offered)
    return ModelCatalog(entries)


@dataclass(frozen=True)
class ModelSettings:
    """What the model adapters need from the environment (endpoints, keys, threads)."""

    region: str = "us-east-1"
    bedrock_region: str = ""
    bedrock_endpoint_url: str = ""
    openai_base_url: str = DEFAULT_OPENAI_BASE_URL
    openai_api_key: str = ""
    #: base URL -> API key for OpenAI-compatible endpoints (never stored in model ids)
    api_keys: Mapping[str, str] = field(default_factory=dict)
    onnx_threads: int = 1
    #: local MiniLM worker processes (1 = in-process); the local runtime sets one per core
    embed_workers: int = 1
    #: where assembled model files (Whisper's model.bin) are cached
    model_cache_dir: str = ""
    catalog: ModelCatalog = field(default_factory=lambda: _catalog("", DEFAULT_EMBEDDING_MODEL))


StorageProvider = Literal["cos", "oss", "tos", "obs", "ks3", "minio", "s3", "dummy"]
CREDENTIAL_SOURCES = ("secretsmanager:", "ssm:")


class StorageBackendConfig(BaseModel):
    """One named storage backend of WEKNORA_STORAGE_BACKENDS, checked at startup. The endpoint and the
    addressing style default to the provider's preset (chalicelib/domain/storage_backends.py). Keys are
    never part of it: `credentials` names where they are kept, a Secrets Manager secret
    (`secretsmanager:<name or ARN>`) or an SSM SecureString (`ssm:<parameter name>`), holding the JSON
    `{"access_key_id": …, "secret_access_key": …}`. Only `s3` may go without (the function's own role)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    id: str
    provider: StorageProvider
    bucket: str = ""
    region: str = ""
    endpoint: str = ""
    path_style: bool | None = None
    credentials: str = ""

    @model_validator(mode="after")
    def _check(self) -> StorageBackendConfig:
        preset = PRESETS[self.provider]
        if not BACKEND_ID.match(self.id):
            raise ValueError("a backend id is 1-63 of a-z, 0-9, '-' and '_', starting with a letter or digit")
        if preset.keeps_nothing:
            if self.bucket or self.endpoint or self.credentials:
                raise ValueError(
                    "the dummy backend keeps nothing: it takes no bucket, endpoint or credentials"
                )
            return self
        if not self.bucket:
            raise ValueError(f"a {self.provider} backend needs a bucket")
        if self.region and not REGION.match(self.region):
            raise ValueError(f"region {self.region!r} is not a region name")
        if preset.endpoint_pattern and not self.region and not self.endpoint:
            raise ValueError(
                f"a {self.provider} backend needs a region (its endpoint is made from it) or an endpoint"
            )
        if preset.needs_endpoint and not self.endpoint:
            raise ValueError(f"a {self.provider} backend needs an endpoint (http(s)://host:port)")
        if self.endpoint and not re.match(r"^https?://[^/?#@\s]+/?$", self.endpoint):
            raise ValueError(
                f"endpoint {self.endpoint!r} must be http(s)://host[:port], with no path or user"
            )
        if not self.credentials and self.provider != "s3":
            raise ValueError(
                f"a {self.provider} backend needs credentials: 'secretsmanager:<secret>' or 'ssm:<parameter>'"
            )
        if self.credentials and (
            not self.credentials.startswith(CREDENTIAL_SOURCES) or not self.credentials.partition(":")[2]
        ):
            raise ValueError(
                "credentials must be 'secretsmanager:<secret name or ARN>' or 'ssm:<parameter name>'"
            )
        return self

    @property
    def keeps_nothing(self) -> bool:
        return PRESETS[self.provider].keeps_nothing

    def region_or(self, default: str) -> str:
        return self.region or default

    def resolved_endpoint(self) -> str:
        """The endpoint the backend's client talks to ("" = the SDK's AWS resolution)."""
        return self.endpoint.rstrip("/") or default_endpoint(self.provider, self.region)

    def resolved_path_style(self) -> bool:
        return PRESETS[self.provider].path_style if self.path_style is None else self.path_style


def _storage_backends(raw: str) -> tuple[StorageBackendConfig, ...]:
    """WEKNORA_STORAGE_BACKENDS: `{"<backend id>": {"provider": "cos", "bucket": …, "region": …}}`."""
    if not raw:
        return ()
    try:
        configured = json.loads(raw)
    except json.JSONDecodeError as error:
        raise ValueError("WEKNORA_STORAGE_BACKENDS is not valid JSON") from error
    if not isinstance(configured, dict) or not all(isinstance(v, dict) for v in configured.values()):
        raise ValueError('WEKNORA_STORAGE_BACKENDS must be an object: {"<backend id>": {"provider": …}}')
    backends = []
    for backend_id, fields in configured.items():
        try:
            backends.append(StorageBackendConfig.model_validate({**fields, "id": backend_id}))
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'backend'}: {e['msg']}" for e in error.errors()
            )
            raise ValueError(f"WEKNORA_STORAGE_BACKENDS[{backend_id!r}]: {problems}") from None
    return tuple(backends)


@dataclass(frozen=True)
class Settings:
    prefix: str = "weknora"
    region: str = "us-east-1"
    #: AWS_ENDPOINT_URL: one endpoint for every AWS client (moto locally; empty on AWS)
    aws_endpoint_url: str = ""
    account_id: str = "123456789012"
    #: True inside a Lambda function (AWS_LAMBDA_FUNCTION_NAME is set): EMF metrics, JSON logs, tracing
    on_lambda: bool = False
    #: "local" (a directory, the local default) or "s3": the default backend's
    storage: str = "local"
    #: named storage backends a knowledge base may be bound to (WEKNORA_STORAGE_BACKENDS)
    storage_backends: tuple[StorageBackendConfig, ...] = ()
    state_dir: str = ".weknora"
    files_bucket: str = "weknora-files"
    #: where presigned uploads land; the bucket notification sends these keys to the uploads queue
    upload_prefix: str = "uploads/"
    state_machine_arn: str = ""
    #: "embedded" (SQLite FTS5 + numpy, the local default) or "opensearch"
    retrieval_engine: str = "embedded"
    opensearch_url: str = ""
    #: OpenSearch indexes: one per embedding model ("space", shared) or per model and tenant ("tenant"):
    #: adapters/index/opensearch_names.py
    opensearch_index_scope: str = "space"
    default_embedding_model: str = DEFAULT_EMBEDDING_MODEL
    #: SQS maxReceiveCount of every stage queue: a stage is tried at most this many times
    stage_max_receives: int = 4
    max_file_size: int = 50 * 1024 * 1024
    #: Lambda's 6 MB sync payload, less base64's third and the multipart framing
    api_max_body: int = 4_500_000
    presign_expires_seconds: int = 3600
    #: knowledge bases one tenant may own (creates past it answer 403 kb_limit_reached; 0: no limit)
    max_kbs_per_tenant: int = 1000
    #: knowledge bases other tenants may share with one tenant (409 share_limit_reached; 0: no limit)
    max_shares_per_tenant: int = 200
    #: requests a tenant's API keys may make a second, counted in 10 s windows (429 tenant_rate_limited past
    #: them); an operator's per-tenant `requests_per_second` replaces it (0: no limit for the tenants without one)
    tenant_requests_per_second: int = 20
    #: fairness between tenants: documents of one tenant in the ingest pipeline (docreader to indexing) at
    #: once; the rest wait their turn behind other tenants' documents (0: no limit)
    tenant_pipeline_cap: int = 8
    #: a place never given back (a crashed worker) frees itself after this long
    pipeline_lease_seconds: int = 1800
    #: how long a document waiting behind another tenant's stays out of sight before it is looked at again
    turn_wait_seconds: int = 2
    #: a document waiting for one of its tenant's places is woken when one is given back; this long at most
    #: if that wake is missed (the backstop; SQS delays 900 s at most)
    turn_backstop_seconds: int = 600
    #: a tenant counts as waiting at the door this long after its last document knocked or was queued
    turn_ttl_seconds: int = 120
    #: how long a download link (GET /knowledge/{id}/file-url) works
    download_url_seconds: int = 900
    #: origins whose browser pages may call the API (CORS); none: CORS is off
    cors_origins: tuple[str, ...] = ()
    #: the API's public base URL a download link (`<base>/r/{token}`) starts with; empty: taken from the
    #: request (its Host, X-Forwarded-Proto, and on API Gateway's own domain the stage)
    public_base_url: str = ""
    manual_max_runes: int = 200_000
    #: the specification's switch for the housekeeping sweeps (the schedule still fires; a sweep then does nothing)
    housekeeping_enabled: bool = True
    #: housekeeping: max(1 h, document timeout 2 h) + 10 min, as the specification sets it
    stale_after_seconds: int = 2 * 3600 + 600
    summary_stale_after_seconds: int = 3600
    #: housekeeping spares a row whose stage message waits in a busy queue for at most this long
    queue_wait_limit_seconds: int = 24 * 3600
    embed_batch_size: int = 16
    #: a PDF of more pages is parsed as page ranges in parallel (a fan-out on the docreader queue), each
    #: range in its own invocation: the range size bounds an invocation's time. A scanned page OCRs in about
    #: 2-4 s (Textract), so both sizes at 4 s a page fit the parse budget (Limits.parse_budget_s, 600 s):
    #: 200 pages in one piece and 100-page ranges had failed scans at 2-3.5 s a page against its 300 s
    parse_parallel_pages: int = 100
    parse_range_pages: int = 50
    #: one embedding invocation works at most this long or this many texts on one document, then hands the
    #: rest to a fresh message at the back of the queue: a big document never holds the stage for everyone
    embed_slice_seconds: float = 20.0
    embed_slice_max_texts: int = 2048
    #: a document of more text chunks than this is embedded as independent slices of this many chunk
    #: sequence numbers, run in parallel (issue 27); one of at most this many keeps the single chain
    embed_fanout_texts: int = 1024
    #: at most this many of one document's slices are queued at once (each finished slice queues the next),
    #: one per pipeline place of its tenant it holds: a tenant's slices stay within `tenant_pipeline_cap`,
    #: below the embedding stage's concurrency (10 on AWS)
    embed_fanout_parallel: int = 5
    #: chunks of one document given questions (a call each) or read for its graph (a call per 5): domain/plan
    max_question_chunks: int = 2000
    max_graph_chunks: int = 2000
    #: in-Lambda tries of one embedding batch (backoff with full jitter, honouring Retry-After)
    embed_max_attempts: int = 6
    embed_backoff_base: float = 0.5
    embed_backoff_max: float = 20.0
    #: how often a throttled stage may be put back on its queue (with a delay) before tries count
    max_throttle_deferrals: int = 12
    #: longest delay of one deferral (SQS DelaySeconds caps at 900)
    max_defer_seconds: int = 900
    #: the wiki's debounce (spec §1.18): an ingest runs this long after a document's wiki op, so the
    #: documents of one upload batch share it; the index is rebuilt this long after the last ingest
    wiki_ingest_delay_seconds: int = 30
    wiki_finalize_delay_seconds: int = 20
    index_write_attempts: int = 5
    #: "auto" (Debian tesseract, else RapidOCR, when installed), "textract" (AWS) or "none"
    ocr_provider: str = "auto"
    #: "auto" (Whisper from PyPI wheels, when installed), "transcribe" (AWS) or "none"
    asr_provider: str = "auto"
    local_api_key: str = "local-dev-key"
    #: SSRF allow-list entries the operator trusts: hosts, `*.domain`, CIDRs
    ssrf_allow: tuple[str, ...] = ()
    #: "json" (Lambda, CloudWatch) or "text" (a readable line per event, the local default)
    log_format: str = "text"
    log_level: str = "INFO"
    #: CloudWatch EMF metrics to stdout: on in Lambda, off locally (a debug log line instead)
    emit_metrics: bool = False
    metrics_namespace: str = "WeknoraIngest"
    tracing: bool = False
    models: ModelSettings = field(default_factory=ModelSettings)
    table_names: Mapping[str, str] = field(default_factory=dict)
    queue_names: Mapping[str, str] = field(default_factory=dict)
    #: the URLs of the stage queues and of their dead-letter queues this function is given (by queue name:
    #: `queue_url_variable`, `dead_letter_queue_url_variable`); a queue not given is looked up by name
    queue_urls: Mapping[str, str] = field(default_factory=dict)
    dead_letter_queue_urls: Mapping[str, str] = field(default_factory=dict)
    #: the key operators send as X-Operator-Key to the /admin routes, as a plain value (the local stack)
    operator_key: str = ""
    #: on AWS: the SSM SecureString parameter that holds it (read on the first admin request, cached); with
    #: neither set the admin routes are disabled
    operator_key_parameter: str = ""
    #: a JSON object of prices that overrides the built-in table (chalicelib/domain/pricing.py)
    prices_file: str = ""
    #: the EventBridge bus changes are announced on ("" = `{prefix}-events`)
    event_bus: str = ""
    #: webhook deliveries: tries before a delivery is parked in the webhooks DLQ, the first retry's delay
    #: (doubled each try, with jitter, at most 900 s) and how long one request may take
    webhook_max_attempts: int = 5
    webhook_backoff_seconds: int = 10
    webhook_timeout_seconds: float = 5.0

    def storage_backend(self, backend_id: str) -> StorageBackendConfig | None:
        return next((b for b in self.storage_backends if b.id == backend_id), None)

    def table(self, name: str) -> str:
        return self.table_names.get(name) or f"{self.prefix}-{name}"

    def queue(self, name: str) -> str:
        return self.queue_names.get(name) or f"{self.prefix}-{name}"

    @property
    def event_bus_name(self) -> str:
        return self.event_bus or f"{self.prefix}-events"


#: the webhooks function (app.py `webhook_delivery`): its SQS batch and its timeout (the default
#: `lambda_timeout` of .chalice/config.json); tests/service/test_webhook_settings_bounds.py holds them to those
WEBHOOK_BATCH_SIZE = 5
WEBHOOK_FUNCTION_SECONDS = 60
#: what a batch keeps for its claims, logs and sends beside the posts
WEBHOOK_MARGIN_SECONDS = 10
#: the longest WEKNORA_WEBHOOK_TIMEOUT_SECONDS: a batch whose every post waits all of it still ends in time
WEBHOOK_TIMEOUT_MAX_SECONDS = (WEBHOOK_FUNCTION_SECONDS - WEBHOOK_MARGIN_SECONDS) / WEBHOOK_BATCH_SIZE
#: the most WEKNORA_WEBHOOK_MAX_ATTEMPTS: a delivery message's attempt is read up to it (webhook_messages)
WEBHOOK_MAX_ATTEMPTS_LIMIT = 100

_ORIGIN = re.compile(r"https?://[A-Za-z0-9.-]+(:[0-9]{1,5})?")


class _Env:
    """Typed reads of one environment mapping; an empty value counts as unset."""

    def __init__(self, env: Mapping[str, str]):
        self.env = env

    def text(self, name: str, default: str = "") -> str:
        value = self.env.get(name)
        return value if value not in (None, "") else default

    def choice(self, name: str, allowed: tuple[str, ...]) -> str:
        """One of `allowed`; unset: the first."""
        value = self.text(name, allowed[0])
        if value not in allowed:
            raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        return value

    def per_name(self, names: Iterable[str], variable: Callable[[str], str]) -> dict[str, str]:
        """name → the value of its variable, for the names whose variable is set."""
        return {name: value for name in names if (value := self.text(variable(name)))}

    def int(self, name: str, default: int) -> int:
        raw = self.text(name, "")
        try:
            return int(raw) if raw else default
        except ValueError as error:
            raise ValueError(f"{name} must be an integer, got {raw!r}") from error

    def float(self, name: str, default: float) -> float:
        raw = self.text(name, "")
        try:
            return float(raw) if raw else default
        except ValueError as error:
            raise ValueError(f"{name} must be a number, got {raw!r}") from error

    def bool(self, name: str, default: bool) -> bool:
        raw = self.text(name, "").lower()
        return default if not raw else raw in ("1", "true", "yes", "on")

    def origins(self, name: str) -> tuple[str, ...]:
        """Comma-separated web origins (`https://app.example.com`, a port if not the default), exactly."""
        found = tuple(o.strip().rstrip("/") for o in self.text(name, "").split(",") if o.strip())
        for origin in found:
            if not _ORIGIN.fullmatch(origin):
                raise ValueError(f"{name}: {origin!r} is not an origin like https://app.example.com")
        return found

    def json_map(self, name: str) -> dict[str, str]:
        raw = self.text(name, "")
        if not raw:
            return {}
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as error:
            raise ValueError(f"{name} is not valid JSON") from error
        if not isinstance(value, dict):
            raise ValueError(f"{name} must be a JSON object")
        return {str(k).rstrip("/"): str(v) for k, v in value.items() if v}


def _within(name: str, value: float, low: float, high: float, why: str) -> None:
    """Refuses a value out of [low, high] when the settings load, saying why the bound is there."""
    if not low <= value <= high:
        raise ValueError(f"{name} must be from {low:g} to {high:g} ({why}), got {value:g}")


@lru_cache(maxsize=1)
def app_version() -> str:
    """The installed distribution's version (read on demand: it is off the cold-start path)."""
    from importlib import metadata

    try:
        return metadata.version("weknora-ingest")
    except metadata.PackageNotFoundError:  # a Lambda package ships the code, not the dist-info
        return "0.1.0"


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    e = _Env(os.environ if env is None else env)
    prefix = e.text("WEKNORA_PREFIX", "weknora")
    region = e.text("AWS_DEFAULT_REGION", e.text("AWS_REGION", "us-east-1"))
    on_lambda = bool(e.text("AWS_LAMBDA_FUNCTION_NAME"))
    ssrf = ",".join(p for p in (e.text("SSRF_WHITELIST"), e.text("SSRF_WHITELIST_EXTRA")) if p)
    webhook_max_attempts = e.int("WEKNORA_WEBHOOK_MAX_ATTEMPTS", 5)
    _within(
        "WEKNORA_WEBHOOK_MAX_ATTEMPTS",
        webhook_max_attempts,
        1,
        WEBHOOK_MAX_ATTEMPTS_LIMIT,
        "the attempts a delivery message carries",
    )
    webhook_timeout = e.float("WEKNORA_WEBHOOK_TIMEOUT_SECONDS", 5.0)
    _within(
        "WEKNORA_WEBHOOK_TIMEOUT_SECONDS",
        webhook_timeout,
        0.1,
        WEBHOOK_TIMEOUT_MAX_SECONDS,
        f"a batch of {WEBHOOK_BATCH_SIZE} posts that wait it all ends inside the {WEBHOOK_FUNCTION_SECONDS} s "
        f"function, {WEBHOOK_MARGIN_SECONDS} s to spare",
    )
    return Settings(
        prefix=prefix,
        region=region,
        aws_endpoint_url=e.text("AWS_ENDPOINT_URL"),
        account_id=e.text("AWS_ACCOUNT_ID", "123456789012"),
        on_lambda=on_lambda,
        storage=e.text("WEKNORA_STORAGE", "local"),
        storage_backends=_storage_backends(e.text("WEKNORA_STORAGE_BACKENDS")),
        state_dir=e.text("WEKNORA_STATE_DIR", ".weknora"),
        files_bucket=e.text("WEKNORA_FILES_BUCKET", f"{prefix}-files"),
        state_machine_arn=e.text("WEKNORA_STATE_MACHINE_ARN"),
        retrieval_engine=e.text("WEKNORA_RETRIEVAL_ENGINE", "embedded"),
        opensearch_url=e.text("OPENSEARCH_URL"),
        opensearch_index_scope=e.choice("WEKNORA_OPENSEARCH_INDEX_SCOPE", ("space", "tenant")),
        default_embedding_model=e.text("WEKNORA_EMBEDDING_MODEL", DEFAULT_EMBEDDING_MODEL),
        stage_max_receives=e.int("WEKNORA_STAGE_MAX_RECEIVES", 4),
        max_file_size=e.int("WEKNORA_MAX_FILE_SIZE", 50 * 1024 * 1024),
        api_max_body=e.int("WEKNORA_API_MAX_BODY", 4_500_000),
        housekeeping_enabled=e.bool("WEKNORA_HOUSEKEEPING_ENABLED", True),
        download_url_seconds=e.int("WEKNORA_DOWNLOAD_URL_SECONDS", 900),
        cors_origins=e.origins("WEKNORA_CORS_ORIGINS"),
        public_base_url=e.text("WEKNORA_PUBLIC_BASE_URL", "").rstrip("/"),
        max_kbs_per_tenant=e.int("WEKNORA_MAX_KBS_PER_TENANT", 1000),
        max_shares_per_tenant=e.int("WEKNORA_MAX_SHARES_PER_TENANT", 200),
        tenant_requests_per_second=max(0, e.int("WEKNORA_TENANT_REQUESTS_PER_SECOND", 20)),
        tenant_pipeline_cap=e.int("WEKNORA_TENANT_PIPELINE_CAP", 8),
        pipeline_lease_seconds=e.int("WEKNORA_PIPELINE_LEASE_SECONDS", 1800),
        turn_wait_seconds=e.int("WEKNORA_TURN_WAIT_SECONDS", 2),
        turn_backstop_seconds=e.int("WEKNORA_TURN_BACKSTOP_SECONDS", 600),
        turn_ttl_seconds=e.int("WEKNORA_TURN_TTL_SECONDS", 120),
        stale_after_seconds=e.int("WEKNORA_STALE_AFTER_SECONDS", 2 * 3600 + 600),
        summary_stale_after_seconds=e.int("WEKNORA_SUMMARY_STALE_AFTER_SECONDS", 3600),
        queue_wait_limit_seconds=e.int("WEKNORA_QUEUE_WAIT_LIMIT_SECONDS", 24 * 3600),
        embed_batch_size=e.int("WEKNORA_EMBED_BATCH_SIZE", 16),
        parse_parallel_pages=e.int("WEKNORA_PARSE_PARALLEL_PAGES", 100),
        parse_range_pages=e.int("WEKNORA_PARSE_RANGE_PAGES", 50),
        embed_slice_seconds=e.float("WEKNORA_EMBED_SLICE_SECONDS", 20.0),
        embed_slice_max_texts=e.int("WEKNORA_EMBED_SLICE_MAX_TEXTS", 2048),
        embed_fanout_texts=max(1, e.int("WEKNORA_EMBED_FANOUT_TEXTS", 1024)),
        embed_fanout_parallel=max(1, e.int("WEKNORA_EMBED_FANOUT_PARALLEL", 5)),
        max_question_chunks=max(1, e.int("WEKNORA_MAX_QUESTION_CHUNKS", 2000)),
        max_graph_chunks=max(1, e.int("WEKNORA_MAX_GRAPH_CHUNKS", 2000)),
        embed_max_attempts=e.int("WEKNORA_EMBED_MAX_ATTEMPTS", 6),
        embed_backoff_base=e.float("WEKNORA_EMBED_BACKOFF_BASE", 0.5),
        embed_backoff_max=e.float("WEKNORA_EMBED_BACKOFF_MAX", 20.0),
        max_throttle_deferrals=e.int("WEKNORA_MAX_THROTTLE_DEFERRALS", 12),
        max_defer_seconds=e.int("WEKNORA_MAX_DEFER_SECONDS", 900),
        wiki_ingest_delay_seconds=min(900, max(0, e.int("WEKNORA_WIKI_INGEST_DELAY_SECONDS", 30))),
        wiki_finalize_delay_seconds=min(900, max(0, e.int("WEKNORA_WIKI_FINALIZE_DELAY_SECONDS", 20))),
        local_api_key=e.text("WEKNORA_API_KEY", "local-dev-key"),
        ocr_provider=e.text("WEKNORA_OCR_PROVIDER", "auto"),
        asr_provider=e.text("WEKNORA_ASR_PROVIDER", "auto"),
        ssrf_allow=tuple(p.strip() for p in ssrf.split(",") if p.strip()),
        log_format=e.text("WEKNORA_LOG_FORMAT", "json" if on_lambda else "text"),
        log_level=e.text("POWERTOOLS_LOG_LEVEL", e.text("WEKNORA_LOG_LEVEL", "INFO")).upper(),
        emit_metrics=e.bool("WEKNORA_EMF_METRICS", on_lambda)
        and not e.bool("POWERTOOLS_METRICS_DISABLED", False),
        metrics_namespace=e.text("POWERTOOLS_METRICS_NAMESPACE", "WeknoraIngest"),
        tracing=on_lambda and not e.bool("POWERTOOLS_TRACE_DISABLED", False),
        models=ModelSettings(
            region=region,
            bedrock_region=e.text("BEDROCK_REGION"),
            bedrock_endpoint_url=e.text("BEDROCK_ENDPOINT_URL"),
            openai_base_url=e.text("OPENAI_BASE_URL", DEFAULT_OPENAI_BASE_URL).rstrip("/"),
            openai_api_key=e.text("OPENAI_API_KEY"),
            api_keys=e.json_map("WEKNORA_MODEL_API_KEYS"),
            onnx_threads=e.int("WEKNORA_ONNX_THREADS", 1),
            embed_workers=max(1, e.int("WEKNORA_EMBED_WORKERS", 1)),
            model_cache_dir=e.text("WEKNORA_MODEL_CACHE"),
            catalog=_catalog(
                e.text("WEKNORA_MODELS"), e.text("WEKNORA_EMBEDDING_MODEL", DEFAULT_EMBEDDING_MODEL)
            ),
        ),
        table_names=e.per_name(TABLES, lambda name: f"WEKNORA_TABLE_{_variable_part(name)}"),
        queue_names=e.per_name(QUEUES, queue_name_variable),
        queue_urls=e.per_name(QUEUES, queue_url_variable),
        dead_letter_queue_urls=e.per_name(QUEUES, dead_letter_queue_url_variable),
        operator_key=e.text("WEKNORA_OPERATOR_KEY"),
        operator_key_parameter=e.text("WEKNORA_OPERATOR_KEY_PARAMETER"),
        prices_file=e.text("WEKNORA_PRICES_FILE"),
        event_bus=e.text("WEKNORA_EVENT_BUS"),
        webhook_max_attempts=webhook_max_attempts,
        webhook_backoff_seconds=e.int("WEKNORA_WEBHOOK_BACKOFF_SECONDS", 10),
        webhook_timeout_seconds=webhook_timeout,
    )


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()


def pin_numeric_threads() -> None:
    """One core for this process: no BLAS/OpenMP threads, no Rust tokenizer pool (a worker process calls it
    before it loads a model; the variables are read when those libraries start)."""
    os.environ.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")


def subprocess_env(**changes: str) -> dict[str, str]:
    """The environment a child process (tesseract, LibreOffice) runs with: ours, with `changes`."""
    return {**os.environ, **changes}


def default_corpus(start: Path) -> Path:
    """The dev corpus: WEKNORA_CORPUS, else the nearest `shared/corpus` above `start` (a checkout beside
    `shared/`, or a worktree one level deeper), else `start/../shared/corpus`."""
    override = os.environ.get("WEKNORA_CORPUS")
    if override:
        return Path(override)
    start = start.resolve()
    found = next((p / "shared" / "corpus" for p in start.parents if (p / "shared" / "corpus").is_dir()), None)
    return found or start.parent / "shared" / "corpus"
