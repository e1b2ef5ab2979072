"""Amazon Bedrock adapters (bedrock-runtime client injected; tests use botocore's Stubber).

- BedrockTitanEmbedding: amazon.titan-embed-text-v2:0 (and v1), one text per InvokeModel call,
  run on a small thread pool (boto3 clients are thread-safe).
- BedrockCohereEmbedding: cohere.embed-english-v3 / cohere.embed-multilingual-v3 (and v4), up to 96
  texts per InvokeModel call, input_type search_document.
  Both meter the input tokens Bedrock bills: Titan's body count, else the x-amzn-bedrock-input-token-count
  response header (Cohere's only source).
- BedrockChatModel / BedrockVisionModel: the Converse API (vision: an image content block).

Errors: throttling codes / HTTP 429 -> ModelThrottled; 5xx, ModelNotReady, model timeouts and
connection/read timeouts -> ModelUnavailable; access denied -> ModelAuthError; validation and
other 4xx -> ModelRequestError (permanent).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    HTTPClientError,
    NoCredentialsError,
    PartialCredentialsError,
)
from botocore.exceptions import (
    ConnectionError as BotoConnectionError,
)

from chalicelib.adapters.models._common import (
    clip_texts,
    parse_retry_after,
    provider_code,
    split_system,
    strip_reasoning,
    to_unit_vectors,
    vision_image,
)
from chalicelib.domain import metering
from chalicelib.domain.charsets import well_formed
from chalicelib.ports import (
    ModelAuthError,
    ModelEmptyResponse,
    ModelRequestError,
    ModelThrottled,
    ModelUnavailable,
)
from chalicelib.ports.models import ChatReply

if TYPE_CHECKING:
    from chalicelib.ports import Vectors

T = TypeVar("T")

THROTTLE_CODES = frozenset(
    {
        "ThrottlingException",
        "TooManyRequestsException",
        "ServiceQuotaExceededException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "Throttling",
    }
)
UNAVAILABLE_CODES = frozenset(
    {
        "ModelNotReadyException",
        "InternalServerException",
        "ServiceUnavailableException",
        "ModelTimeoutException",
        "ModelErrorException",
        "ModelStreamErrorException",
        "InternalFailure",
        "ServiceUnavailable",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)
AUTH_CODES = frozenset(
    {
        "AccessDeniedException",
        "UnrecognizedClientException",
        "ExpiredTokenException",
        "InvalidSignatureException",
        "MissingAuthenticationTokenException",
    }
)

MAX_INPUT_CHARS = 20_000  # the spec's cap on embedding inputs
COHERE_V3_MAX_CHARS = 2048  # Bedrock rejects longer Cohere v3 texts
COHERE_MAX_BATCH = 96


def map_bedrock_error(exc: Exception, model_id: str) -> Exception:
    """The port/adapter exception for a botocore error (returned, so callers `raise ... from None`: the
    botocore error's text is the endpoint's message)."""
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        # The code only, and only if it is one: Bedrock's message (and a `Code` that is free text, which
        # botocore takes from whatever the endpoint sent) is a remote answer, never for a tenant or a log.
        code = provider_code(error.get("Code"))
        message = f"bedrock {model_id}: {code or 'error'}"
        meta = exc.response.get("ResponseMetadata", {})
        status = int(meta.get("HTTPStatusCode") or 0)
        # Codes first: ModelNotReadyException arrives as HTTP 429 but means "loading, retry".
        if code in UNAVAILABLE_CODES:
            return ModelUnavailable(message)
        if code in THROTTLE_CODES or status == 429:
            headers = {str(k).lower(): str(v) for k, v in (meta.get("HTTPHeaders") or {}).items()}
            return ModelThrottled(message, retry_after=parse_retry_after(headers))
        if status >= 500 or status == 408:
            return ModelUnavailable(message)
        if code in AUTH_CODES or status in (401, 403):
            return ModelAuthError(message, provider_code=code, status=status or None)
        return ModelRequestError(message, provider_code=code, status=status or None)
    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return ModelAuthError(f"bedrock {model_id}: no AWS credentials")
    if isinstance(exc, BotoConnectionError | HTTPClientError):
        return ModelUnavailable(f"bedrock {model_id}: {type(exc).__name__}")
    if isinstance(exc, BotoCoreError):
        return ModelUnavailable(f"bedrock {model_id}: {type(exc).__name__}")
    return exc


def _call(model_id: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except (ClientError, BotoCoreError) as exc:
        raise map_bedrock_error(exc, model_id) from None


#: InvokeModel reports the input tokens it bills in this response header, whatever the model's body says
INPUT_TOKENS_HEADER = "x-amzn-bedrock-input-token-count"


def _header_input_tokens(response: Mapping[str, Any]) -> int | None:
    """The billed input tokens from the response header (botocore lowercases header names); None when the
    header is absent or not a number."""
    headers = (response.get("ResponseMetadata") or {}).get("HTTPHeaders") or {}
    value = str(headers.get(INPUT_TOKENS_HEADER, "")).strip()
    # ASCII digits only, and few (`isdigit` takes '²', which int() refuses; int() refuses 4,300+ digits)
    return int(value) if value.isascii() and value.isdigit() and len(value) <= 18 else None


def _invoke_json(client: Any, bedrock_model: str, body: Mapping[str, Any]) -> tuple[Any, int | None]:
    """The parsed response body and the input tokens the response header reports."""

    def run() -> tuple[Any, int | None]:
        response = client.invoke_model(
            modelId=bedrock_model,
            body=json.dumps(body).encode("utf-8"),
            contentType="application/json",
            accept="application/json",
        )
        return response["body"].read(), _header_input_tokens(response)

    raw, input_tokens = _call(bedrock_model, run)
    try:
        return json.loads(raw), input_tokens
    except (ValueError, TypeError) as exc:
        raise ModelUnavailable(
            f"bedrock {bedrock_model}: response is not JSON ({type(exc).__name__})"
        ) from None


class BedrockTitanEmbedding:
    """Titan Text Embeddings v2 (dimensions 256/512/1024, normalize=true) or v1 (1536)."""

    max_input_chars: int

    def __init__(
        self,
        client: Any,
        bedrock_model: str = "amazon.titan-embed-text-v2:0",
        *,
        model_id: str | None = None,
        dimensions: int | None = None,
        concurrency: int = 4,
    ) -> None:
        self.client = client
        self.bedrock_model = bedrock_model
        self.model_id = model_id or f"bedrock/{bedrock_model}"
        self.v2 = "titan-embed-text-v2" in bedrock_model
        if self.v2:
            dims = dimensions or 1024
            if dims not in (256, 512, 1024):
                raise ValueError("Titan v2 supports dimensions 256, 512 or 1024")
        else:
            if dimensions not in (None, 1536):
                raise ValueError("Titan v1 embeddings have 1536 dimensions")
            dims = 1536
        self.dimensions = dims
        self.max_input_chars = MAX_INPUT_CHARS
        self.concurrency = max(1, concurrency)

    def _one(self, text: str) -> list[float]:
        body: dict[str, Any] = {"inputText": text}
        if self.v2:
            body.update(dimensions=self.dimensions, normalize=True)
        payload, header_tokens = _invoke_json(self.client, self.bedrock_model, body)
        body_tokens = payload.get("inputTextTokenCount") if isinstance(payload, dict) else None
        metering.record_tokens(self.model_id, body_tokens if body_tokens is not None else header_tokens)
        embedding = payload.get("embedding") if isinstance(payload, dict) else None
        if not isinstance(embedding, list):
            raise ModelRequestError(f"bedrock {self.bedrock_model}: response has no 'embedding'")
        return embedding

    def embed(self, texts: Sequence[str]) -> Vectors:
        clipped = clip_texts(texts, self.max_input_chars)
        if len(clipped) <= 1 or self.concurrency == 1:
            rows = [self._one(t) for t in clipped]
        else:
            with ThreadPoolExecutor(max_workers=min(self.concurrency, len(clipped))) as pool:
                # each call in the caller's context: the tokens it reports go to the caller's meter
                futures = [pool.submit(metering.thread_work(self._one), text) for text in clipped]
                rows = [future.result() for future in futures]  # re-raises the first failure, in order
        if not rows:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        return to_unit_vectors(rows, self.dimensions, self.model_id)


class BedrockCohereEmbedding:
    """Cohere embed on Bedrock: v3 english/multilingual (1024 dims, <= 2048 chars per text) or v4."""

    max_input_chars: int

    def __init__(
        self,
        client: Any,
        bedrock_model: str = "cohere.embed-english-v3",
        *,
        model_id: str | None = None,
        dimensions: int | None = None,
        batch_size: int | None = None,
        input_type: str = "search_document",
    ) -> None:
        self.client = client
        self.bedrock_model = bedrock_model
        self.model_id = model_id or f"bedrock/{bedrock_model}"
        self.v4 = "embed-v4" in bedrock_model
        if self.v4:
            dims = dimensions or 1536
            if dims not in (256, 512, 1024, 1536):
                raise ValueError("Cohere embed v4 supports dimensions 256, 512, 1024 or 1536")
        else:
            if dimensions not in (None, 1024):
                raise ValueError("Cohere embed v3 has 1024 dimensions")
            dims = 1024
        self.dimensions = dims
        self.max_input_chars = MAX_INPUT_CHARS if self.v4 else COHERE_V3_MAX_CHARS
        self.batch_size = min(COHERE_MAX_BATCH, batch_size or COHERE_MAX_BATCH)
        self.input_type = input_type  # "search_query" when embedding questions for retrieval

    def embed(self, texts: Sequence[str]) -> Vectors:
        clipped = clip_texts(texts, self.max_input_chars)
        rows: list[Any] = []
        for start in range(0, len(clipped), self.batch_size):
            batch = clipped[start : start + self.batch_size]
            body: dict[str, Any] = {"texts": batch, "input_type": self.input_type, "truncate": "END"}
            if self.v4:
                body.update(embedding_types=["float"], output_dimension=self.dimensions)
            payload, input_tokens = _invoke_json(self.client, self.bedrock_model, body)
            metering.record_tokens(self.model_id, input_tokens)  # Cohere's body on Bedrock has no count
            embeddings = payload.get("embeddings") if isinstance(payload, dict) else None
            if isinstance(embeddings, dict):  # response_type "embeddings_by_type"
                embeddings = embeddings.get("float")
            if not isinstance(embeddings, list) or len(embeddings) != len(batch):
                raise ModelRequestError(f"bedrock {self.bedrock_model}: expected {len(batch)} embeddings")
            rows.extend(embeddings)
        if not rows:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        return to_unit_vectors(rows, self.dimensions, self.model_id)


def bedrock_embedding(
    client: Any,
    bedrock_model: str,
    *,
    model_id: str | None = None,
    dimensions: int | None = None,
    batch_size: int | None = None,
) -> BedrockTitanEmbedding | BedrockCohereEmbedding:
    """The embedding adapter for a Bedrock model id (Titan or Cohere families)."""
    if "titan-embed-text" in bedrock_model:
        return BedrockTitanEmbedding(client, bedrock_model, model_id=model_id, dimensions=dimensions)
    if "cohere.embed" in bedrock_model:
        return BedrockCohereEmbedding(
            client, bedrock_model, model_id=model_id, dimensions=dimensions, batch_size=batch_size
        )
    raise ValueError(f"unsupported Bedrock embedding model {bedrock_model!r} (Titan text or Cohere embed)")


def _converse_text(response: Mapping[str, Any], bedrock_model: str, model_id: str) -> ChatReply:
    usage = response.get("usage")
    if isinstance(usage, dict):
        metering.record_tokens(model_id, usage.get("inputTokens"), usage.get("outputTokens"))
    content = response.get("output", {}).get("message", {}).get("content", [])
    # text blocks only (reasoningContent blocks are the model's thinking); reasoning written inline in the
    # text (`<think>`) is removed as the OpenAI-compatible adapter removes it, and a lone surrogate the JSON
    # spelled becomes U+FFFD as there (`charsets.well_formed`)
    text = strip_reasoning(
        well_formed(
            "".join(
                block["text"]
                for block in content
                if isinstance(block, dict) and isinstance(block.get("text"), str)
            )
        )
    )
    stop = provider_code(response.get("stopReason"))
    if not text.strip():
        raise ModelEmptyResponse(
            f"bedrock {bedrock_model}: empty answer (stopReason={stop or 'unknown'})", provider_code=stop
        )
    return ChatReply(text, truncated=stop == "max_tokens")


class BedrockChatModel:
    """ChatModel over the Converse API (works with any Converse-capable model or inference profile)."""

    def __init__(self, client: Any, bedrock_model: str, *, model_id: str | None = None) -> None:
        self.client = client
        self.bedrock_model = bedrock_model
        self.model_id = model_id or f"bedrock/{bedrock_model}"

    def chat(
        self, messages: Sequence[Mapping[str, str]], *, temperature: float = 0.3, max_tokens: int = 2048
    ) -> str:
        system, turns = split_system(messages)
        request: dict[str, Any] = {
            "modelId": self.bedrock_model,
            "messages": [{"role": role, "content": [{"text": text}]} for role, text in turns],
            "inferenceConfig": {"maxTokens": max_tokens, "temperature": temperature},
        }
        if system:
            request["system"] = [{"text": text} for text in system]
        response = _call(self.bedrock_model, lambda: self.client.converse(**request))
        return _converse_text(response, self.bedrock_model, self.model_id)


class BedrockVisionModel:
    """VisionModel over the Converse API: one user turn with an image block and the prompt."""

    def __init__(
        self, client: Any, bedrock_model: str, *, model_id: str | None = None, temperature: float = 0.2
    ) -> None:
        self.client = client
        self.bedrock_model = bedrock_model
        self.model_id = model_id or f"bedrock/{bedrock_model}"
        self.temperature = temperature

    def describe(self, image: bytes, prompt: str, *, max_tokens: int = 1024) -> str:
        image, fmt = vision_image(image)
        request: dict[str, Any] = {
            "modelId": self.bedrock_model,
            "messages": [
                {
                    "role": "user",
                    "content": [{"image": {"format": fmt, "source": {"bytes": image}}}, {"text": prompt}],
                }
            ],
            "inferenceConfig": {"maxTokens": max_tokens, "temperature": self.temperature},
        }
        response = _call(self.bedrock_model, lambda: self.client.converse(**request))
        return _converse_text(response, self.bedrock_model, self.model_id)


if TYPE_CHECKING:  # static proof that the adapters satisfy the ports
    from chalicelib.ports import ChatModel, EmbeddingModel, VisionModel

    _titan: type[EmbeddingModel] = BedrockTitanEmbedding
    _cohere: type[EmbeddingModel] = BedrockCohereEmbedding
    _chat: type[ChatModel] = BedrockChatModel
    _vision: type[VisionModel] = BedrockVisionModel
