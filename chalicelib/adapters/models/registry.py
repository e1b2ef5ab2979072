"""Builds model adapters from a model id string (what a knowledge base stores).

Id scheme::

    <provider>/<model>[@<base_url>][#<key>=<value>[&<key>=<value>...]]

Embedding ids (build_embedding_model):

    ""  or  local/all-MiniLM-L6-v2-qint8-v3 in-process MiniLM ONNX with int8 arithmetic, 384 dims (the
                                            default; quantised once from the shipped weights with 7-bit
                                            weights, cached; the same vectors on every CPU)
    local/all-MiniLM-L6-v2-qint8-v2         8-bit weights, without ONNX Runtime's SkipLayerNormalization
                                            fusion: its own model space (its vectors depend on the CPU)
    local/all-MiniLM-L6-v2-qint8            the same file with every fusion: its own model space
    local/all-MiniLM-L6-v2-int8             the shipped MiniLM int8 file as it is (fp32 arithmetic), its
                                            own model space (vectors differ slightly from -qint8)
    hashing/<dim>                           HashingEmbedding, a deterministic TEST DOUBLE (not semantic)
    bedrock/amazon.titan-embed-text-v2:0    Titan Text Embeddings v2; #dimensions=256|512|1024 (default 1024)
    bedrock/amazon.titan-embed-text-v1      Titan v1, 1536 dims
    bedrock/cohere.embed-english-v3         Cohere embed v3 (also cohere.embed-multilingual-v3), 1024 dims;
                                            cohere.embed-v4:0 takes #dimensions=256|512|1024|1536
    openai/<model>                          OpenAI-compatible endpoint from the settings' OPENAI_BASE_URL
                                            (default https://api.openai.com/v1)
    openai/<model>@<base_url>               explicit endpoint, base URL incl. `/v1`, e.g.
                                            openai/nomic-embed-text@http://localhost:11434/v1 (Ollama),
                                            openai/BAAI/bge-m3@http://vllm:8000/v1 (vLLM)

Chat / vision ids (build_chat_model / build_vision_model; "" means "not configured" → None):

    bedrock/<model id or inference profile>   Converse API, e.g. bedrock/us.amazon.nova-lite-v1:0
    openai/<model>[@<base_url>]               /chat/completions (vision: image_url data URI)

Parameters after `#` (a URL fragment is never sent to a server, so `#` cannot clash with base URLs):

    dimensions=<n>   embeddings: request n dims (Titan v2, OpenAI text-embedding-3) and expect n back
    dim=<n>          embeddings: declare the output size without sending it (vLLM/Ollama models not
                     in the built-in table; without either, the first call probes it)
    batch=<n>        embeddings: texts per request (OpenAI-compatible default 64; Cohere max 96)
    region=<r>       bedrock: region (default BEDROCK_REGION, else the AWS region)
    max_tokens_field=max_completion_tokens   openai chat: for models that reject `max_tokens`
    timeout=<seconds>                        openai: read timeout (default 60 embeddings, 180 chat)

Configuration comes from `settings.ModelSettings` (WEKNORA_ONNX_THREADS: MiniLM intra-op threads, default
1, faster on 2 shared cores; WEKNORA_EMBED_WORKERS: MiniLM worker processes, default 1 = in-process, the
local runtime sets one per core; WEKNORA_MODEL_CACHE: where the quantised file is cached). Importing this module is cheap (no numpy, boto3 or model runtime): adapters
import on build.

Secrets never go in ids (ids are stored and become index names). API keys for OpenAI-compatible
endpoints: WEKNORA_MODEL_API_KEYS = JSON {"<base_url>": "<key>"}; otherwise OPENAI_API_KEY, sent only to
the configured default base URL. Bedrock uses the normal AWS credential chain; BEDROCK_ENDPOINT_URL
overrides its endpoint. An embedding adapter's `model_id` is the id it was built from, so
`registry.embedding(model.model_id)` round-trips ("" normalises to the int8-arithmetic MiniLM id).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from chalicelib.domain.process_config import EXTRACTIVE_SUMMARY
from chalicelib.net.ssrf import AllowList
from chalicelib.settings import (
    DEFAULT_EMBEDDING_MODEL,
    DEFAULT_OPENAI_BASE_URL,
    LOCAL_MINILM_MODEL_IDS,
    ModelSettings,
)

# The local model ids, defined once in settings; re-exported as this module's part of the id scheme.
from chalicelib.settings import MINILM_MODEL_ID as MINILM_MODEL_ID
from chalicelib.settings import MINILM_QINT8_MODEL_ID as MINILM_QINT8_MODEL_ID
from chalicelib.settings import MINILM_QINT8_V2_MODEL_ID as MINILM_QINT8_V2_MODEL_ID
from chalicelib.settings import MINILM_QINT8_V3_MODEL_ID as MINILM_QINT8_V3_MODEL_ID

if TYPE_CHECKING:
    from chalicelib.ports import ChatModel, EmbeddingModel, VisionModel

#: embeddings of a batch of 64 texts at 3,072 dimensions are ~4 MB of JSON
MAX_MODEL_RESPONSE_BYTES = 32 * 1024 * 1024
_URL_SPLIT = re.compile(r"^(?P<model>.+?)@(?P<url>https?://.+)$")


@dataclass(frozen=True)
class ModelSpec:
    provider: str
    model: str
    base_url: str = ""
    params: Mapping[str, str] = field(default_factory=dict)


def parse_model_id(model_id: str) -> ModelSpec:
    """Splits an id into provider, model, base URL and `#` parameters. Raises ValueError if malformed."""
    text = model_id.strip()
    if not text:
        return parse_model_id(DEFAULT_EMBEDDING_MODEL)
    params: dict[str, str] = {}
    if "#" in text:
        text, _, raw = text.partition("#")
        for pair in filter(None, raw.split("&")):
            key, sep, value = pair.partition("=")
            if not sep or not key:
                raise ValueError(f"model id {model_id!r}: parameter {pair!r} is not key=value")
            params[key.strip()] = value.strip()
    provider, sep, rest = text.partition("/")
    if not sep or not provider or not rest:
        raise ValueError(f"model id {model_id!r} is not '<provider>/<model>'")
    base_url = ""
    match = _URL_SPLIT.match(rest)
    if match:
        rest, base_url = match.group("model"), match.group("url").rstrip("/")
    return ModelSpec(provider.lower(), rest, base_url, params)


def _int_param(spec: ModelSpec, key: str) -> int | None:
    raw = spec.params.get(key)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValueError(f"parameter {key}={raw!r} is not an integer") from exc
    if value < 1:
        raise ValueError(f"parameter {key} must be >= 1")
    return value


def _bedrock_client(spec: ModelSpec, settings: ModelSettings, read_timeout: int) -> Any:
    import boto3
    from botocore.config import Config

    region = spec.params.get("region") or settings.bedrock_region or settings.region or "us-east-1"
    # Few SDK retries: throttling is retried by call_with_backoff / the stage queue, with Retry-After.
    config = Config(
        region_name=region,
        connect_timeout=5,
        read_timeout=read_timeout,
        retries={"mode": "standard", "total_max_attempts": 2},
    )
    return boto3.client("bedrock-runtime", config=config, endpoint_url=settings.bedrock_endpoint_url or None)


def _openai_endpoint(spec: ModelSpec, settings: ModelSettings) -> tuple[str, str | None]:
    default_base = (settings.openai_base_url or DEFAULT_OPENAI_BASE_URL).rstrip("/")
    base_url = spec.base_url or default_base
    key = settings.api_keys.get(base_url)
    if key:
        return base_url, key
    if base_url == default_base and settings.openai_api_key:
        return base_url, settings.openai_api_key
    return base_url, None


def _timeout(spec: ModelSpec, default: float) -> float:
    raw = spec.params.get("timeout")
    return float(raw) if raw else default


def model_hosts_allow_list(settings: ModelSettings) -> AllowList:
    """Exactly the hosts and ports of the OpenAI-compatible endpoints the operator's catalog names."""
    entries = []
    for url in settings.catalog.endpoints():
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        host = f"[{parts.hostname}]" if parts.hostname and ":" in parts.hostname else parts.hostname
        entries.append(f"{host}:{port}")
    return AllowList.parse(entries)


class ModelRegistry:
    """Builds and caches model adapters by spec (clients are reused across warm invocations). Callers
    resolve a tenant's model *name* through the operator's catalog first (bootstrap does); the specs here
    are operator configuration. OpenAI-compatible calls go through the SSRF-safe client, allowed to reach
    exactly the catalog's model hosts."""

    def __init__(self, settings: ModelSettings | None = None, transport: Any = None) -> None:
        self.settings = settings or ModelSettings()
        if transport is None:
            from chalicelib.adapters.models.openai_compat import SafeTransport
            from chalicelib.net.client import SafeHttpClient

            transport = SafeTransport(
                SafeHttpClient(model_hosts_allow_list(self.settings), max_bytes=MAX_MODEL_RESPONSE_BYTES)
            )
        self.transport = transport
        self._cache: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    def _cached(self, kind: str, model_id: str, build: Callable[[], Any]) -> Any:
        with self._lock:
            if (kind, model_id) not in self._cache:
                self._cache[(kind, model_id)] = build()
            return self._cache[(kind, model_id)]

    def embedding(self, model_id: str) -> EmbeddingModel:
        """The EmbeddingModel for `model_id` (see the module docstring). Raises ValueError for bad ids."""
        return self._cached(
            "embed", model_id, lambda: _build_embedding(model_id, self.settings, self.transport)
        )

    def chat(self, model_id: str) -> ChatModel | None:
        """The ChatModel for `model_id`, or None when `model_id` is empty (not configured)."""
        if not model_id.strip() or model_id == EXTRACTIVE_SUMMARY:  # the offline summariser needs no model
            return None
        return self._cached(
            "chat", model_id, lambda: _build_generative(model_id, self.settings, self.transport, vision=False)
        )

    def vision(self, model_id: str) -> VisionModel | None:
        """The VisionModel for `model_id`, or None when `model_id` is empty (not configured)."""
        if not model_id.strip():
            return None
        return self._cached(
            "vision",
            model_id,
            lambda: _build_generative(model_id, self.settings, self.transport, vision=True),
        )


def _build_embedding(model_id: str, settings: ModelSettings, transport: Any) -> EmbeddingModel:
    spec = parse_model_id(model_id)
    if spec.provider == "local":
        local_id = f"local/{spec.model}"
        if local_id not in LOCAL_MINILM_MODEL_IDS:
            raise ValueError(
                f"unknown local embedding model {model_id!r}; known: {', '.join(LOCAL_MINILM_MODEL_IDS)}"
            )
        if settings.embed_workers > 1:
            from chalicelib.adapters.models.embed_pool import PooledMiniLm

            return PooledMiniLm(local_id, workers=settings.embed_workers, cache_dir=settings.model_cache_dir)
        from chalicelib.adapters.models.local_onnx import MiniLmEmbedding

        return MiniLmEmbedding(
            model_id=local_id, intra_op_threads=settings.onnx_threads, cache_dir=settings.model_cache_dir
        )
    if spec.provider == "hashing":
        from chalicelib.adapters.models.hashing import HashingEmbedding

        try:
            dims = int(spec.model)
        except ValueError as exc:
            raise ValueError(f"hashing embedding id must be 'hashing/<dim>', got {model_id!r}") from exc
        return HashingEmbedding(dims)
    if spec.provider == "bedrock":
        from chalicelib.adapters.models.bedrock import bedrock_embedding

        client = _bedrock_client(spec, settings, read_timeout=60)
        return bedrock_embedding(
            client,
            spec.model,
            model_id=model_id,
            dimensions=_int_param(spec, "dimensions"),
            batch_size=_int_param(spec, "batch"),
        )
    if spec.provider == "openai":
        from chalicelib.adapters.models.openai_compat import OpenAIEmbedding

        base_url, api_key = _openai_endpoint(spec, settings)
        return OpenAIEmbedding(
            spec.model,
            base_url=base_url,
            api_key=api_key,
            model_id=model_id,
            dimensions=_int_param(spec, "dimensions"),
            declared_dim=_int_param(spec, "dim"),
            batch_size=_int_param(spec, "batch") or 64,
            timeout=_timeout(spec, 60.0),
            transport=transport,
        )
    raise ValueError(f"unknown embedding provider in {model_id!r} (local, hashing, bedrock, openai)")


def _build_generative(model_id: str, settings: ModelSettings, transport: Any, *, vision: bool) -> Any:
    spec = parse_model_id(model_id)
    if spec.provider == "bedrock":
        from chalicelib.adapters.models.bedrock import BedrockChatModel, BedrockVisionModel

        client = _bedrock_client(spec, settings, read_timeout=180)
        cls: Any = BedrockVisionModel if vision else BedrockChatModel
        return cls(client, spec.model, model_id=model_id)
    if spec.provider == "openai":
        from chalicelib.adapters.models.openai_compat import OpenAIChatModel, OpenAIVisionModel

        base_url, api_key = _openai_endpoint(spec, settings)
        ocls: Any = OpenAIVisionModel if vision else OpenAIChatModel
        return ocls(
            spec.model,
            base_url=base_url,
            api_key=api_key,
            model_id=model_id,
            max_tokens_field=spec.params.get("max_tokens_field", "max_tokens"),
            timeout=_timeout(spec, 180.0),
            transport=transport,
        )
    raise ValueError(
        f"no {'vision' if vision else 'chat'} model for {model_id!r} (providers: bedrock, openai)"
    )
