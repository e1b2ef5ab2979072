"""OpenAI-compatible HTTP adapters: /v1/embeddings and /v1/chat/completions (vLLM, Ollama's /v1,
OpenAI and other hosted APIs).

HTTP goes through the small `HttpTransport` protocol; in the service it is `SafeTransport`, the SSRF-safe
client (validated, pinned addresses; no redirects; capped bodies). Tests pass their own transport.
`base_url` includes the version path, e.g. `http://localhost:11434/v1`. Error messages carry the HTTP status
and the provider's error code only: a provider's message text never reaches a tenant or a log.

Status mapping: 429 -> ModelThrottled (Retry-After / retry-after-ms honoured), except OpenAI's
`insufficient_quota` (billing: permanent); 408/409/5xx, timeouts, connection errors ->
ModelUnavailable; 401/403 -> ModelAuthError; other 4xx -> ModelRequestError. A 2xx whose body is not the
API's JSON (unasked-for SSE, invalid UTF-8) -> ModelReplyMalformed (permanent: the endpoint misbehaves, and
each retry is a paid call); a 2xx carrying `{"error": {"code": N}}` (OpenRouter's errors during generation)
is mapped by N as if it were the status.

Completions: the model's reasoning (`<think>` blocks) is removed here, once, so every reader gets the answer
only; `finish_reason: "length"` comes back as a ChatReply marked truncated. A lone surrogate the JSON spells
(`\\ud83d`: a server cut an emoji's pair) becomes U+FFFD (`charsets.well_formed`): the rest of the answer is
good, and the first store encoding it would otherwise fail the task on every paid retry.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from chalicelib.adapters.models._common import (
    clip_texts,
    parse_retry_after,
    provider_code,
    strip_reasoning,
    to_unit_vectors,
    vision_image,
)
from chalicelib.domain import metering
from chalicelib.domain.charsets import well_formed
from chalicelib.net.client import FetchError, SafeHttpClient
from chalicelib.ports import (
    ModelAuthError,
    ModelEmptyResponse,
    ModelRequestError,
    ModelThrottled,
    ModelUnavailable,
)
from chalicelib.ports.models import ChatReply, ModelReplyMalformed

if TYPE_CHECKING:
    from chalicelib.ports import Vectors

MAX_INPUT_CHARS = 20_000  # the spec's cap on embedding inputs

# Output sizes of common embedding models, so `dimensions` is known without a probe call.
KNOWN_DIMENSIONS: dict[str, int] = {
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
    "text-embedding-ada-002": 1536,
    "nomic-embed-text": 768,
    "nomic-embed-text-v1.5": 768,
    "mxbai-embed-large": 1024,
    "mxbai-embed-large-v1": 1024,
    "all-minilm": 384,
    "all-minilm-l6-v2": 384,
    "bge-m3": 1024,
    "bge-large-en-v1.5": 1024,
    "bge-base-en-v1.5": 768,
    "bge-small-en-v1.5": 384,
    "snowflake-arctic-embed": 1024,
    "multilingual-e5-large": 1024,
    "multilingual-e5-small": 384,
}


def known_dimensions(model: str) -> int | None:
    name = model.rsplit("/", 1)[-1].lower()
    return KNOWN_DIMENSIONS.get(name) or KNOWN_DIMENSIONS.get(name.split(":", 1)[0])


@dataclass
class HttpResponse:
    status: int
    body: bytes
    headers: Mapping[str, str] = field(default_factory=dict)  # lower-case names


class HttpTransport(Protocol):
    def post_json(
        self, url: str, payload: Mapping[str, Any], headers: Mapping[str, str], timeout: float
    ) -> HttpResponse:
        """POSTs JSON. Raises ModelUnavailable for timeouts and connection failures."""
        ...


class SafeTransport:
    """HttpTransport over the SSRF-safe client: every model call goes to a validated, pinned address
    (the operator's model hosts), redirects are refused and response bodies are capped."""

    def __init__(self, client: SafeHttpClient) -> None:
        self.client = client

    def post_json(
        self, url: str, payload: Mapping[str, Any], headers: Mapping[str, str], timeout: float
    ) -> HttpResponse:
        client = self.client.with_timeout(timeout)
        try:
            response = client.post(url, json.dumps(payload).encode(), headers)
        except FetchError as exc:
            # The reason names our own check (blocked, timed out, too large), never what the server said,
            # nor the endpoint's host (`unnamed`: errors name the model, the endpoint is the operator's);
            # not chained: the transport's cause can quote the bytes the server sent
            if exc.permanent:
                raise ModelRequestError(f"the model endpoint cannot be used: {exc.unnamed}") from None
            raise ModelUnavailable(f"the model endpoint did not answer: {exc.unnamed}") from None
        return HttpResponse(response.status, response.body, response.headers)


def _error_code(body: bytes) -> str:
    """The provider's machine-readable error code, if it sent a plain one. Its message is never kept:
    nothing a remote server answers may reach a tenant-visible field or a log line."""
    try:
        payload = json.loads(body)
    except (ValueError, TypeError):
        return ""
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict):
        return provider_code(error.get("code") or error.get("type"))
    return ""


def _status_in_body(body: Any) -> int | None:
    """The status a 2xx body's `error` names (a number, or a code made of digits), when the body is an error
    and not an answer; 400 (refused, not retried) for an error that names no status."""
    if not isinstance(body, dict) or "error" not in body or body.get("choices") or body.get("data"):
        return None
    error = body["error"]
    raw = error.get("code") if isinstance(error, dict) else None
    if isinstance(raw, int) and not isinstance(raw, bool) and 100 <= raw <= 599:
        return raw
    if isinstance(raw, str) and raw.isascii() and raw.isdigit() and 100 <= int(raw) <= 599:
        return int(raw)
    return 400


class _Client:
    def __init__(
        self, model: str, base_url: str, api_key: str | None, timeout: float, transport: HttpTransport | None
    ) -> None:
        #: how errors name the model: never its endpoint, which is the operator's business
        self.name = f"openai/{model}"
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = timeout
        if transport is None:
            raise ValueError("an OpenAI-compatible client needs a transport (the SSRF-safe one)")
        self.transport: HttpTransport = transport

    def post(self, path: str, payload: Mapping[str, Any]) -> Any:
        url = f"{self.base_url}/{path.lstrip('/')}"
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        response = self.transport.post_json(url, payload, headers, self.timeout)
        status = response.status
        if 200 <= status < 300:
            try:
                body = json.loads(response.body)
            except (ValueError, TypeError) as exc:  # UnicodeDecodeError is a ValueError
                raise ModelReplyMalformed(
                    f"{self.name}: HTTP {status} with a body that is not the API's JSON ({type(exc).__name__})"
                ) from None
            in_body = _status_in_body(body)
            if in_body is None:
                return body
            status = in_body
        code = _error_code(response.body)
        text = f"{self.name}: HTTP {response.status}" + (
            f" with error {status} in the body" if status != response.status else ""
        )
        text += f" ({code})" if code else ""
        if status == 429:
            if code == "insufficient_quota":  # OpenAI billing: waiting does not help
                raise ModelRequestError(text, provider_code=code, status=status)
            raise ModelThrottled(text, retry_after=parse_retry_after(response.headers))
        if status in (408, 409) or status >= 500:
            raise ModelUnavailable(text)
        if status in (401, 403):
            raise ModelAuthError(text, provider_code=code, status=status)
        raise ModelRequestError(text, provider_code=code, status=status)


class OpenAIEmbedding:
    """EmbeddingModel over POST {base_url}/embeddings.

    `dimensions`: sent to the API (OpenAI text-embedding-3 Matryoshka sizes) and expected back.
    `declared_dim`: the expected size without sending it. Neither: the built-in table, else the first
    access of `.dimensions` (or the first embed) learns it from a response.
    """

    max_input_chars: int

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None = None,
        model_id: str | None = None,
        dimensions: int | None = None,
        declared_dim: int | None = None,
        batch_size: int = 64,
        timeout: float = 60.0,
        max_input_chars: int = MAX_INPUT_CHARS,
        transport: HttpTransport | None = None,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.model = model
        self.model_id = model_id or f"openai/{model}@{base_url.rstrip('/')}"
        self.request_dimensions = dimensions
        self._dimensions = dimensions or declared_dim or known_dimensions(model)
        self.batch_size = batch_size
        self.max_input_chars = max_input_chars
        self._client = _Client(model, base_url, api_key, timeout, transport)
        self._lock = threading.Lock()

    @property
    def dimensions(self) -> int:
        if self._dimensions is None:
            with self._lock:
                if self._dimensions is None:
                    self._dimensions = int(self._request(["dimension probe"]).shape[1])
        return self._dimensions

    @dimensions.setter
    def dimensions(self, value: int) -> None:
        self._dimensions = value

    def _request(self, batch: list[str]) -> Vectors:
        payload: dict[str, Any] = {"model": self.model, "input": batch, "encoding_format": "float"}
        if self.request_dimensions:
            payload["dimensions"] = self.request_dimensions
        body = self._client.post("embeddings", payload)
        _count_usage(body, self.model_id)
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or len(data) != len(batch):
            raise ModelRequestError(f"{self._client.name}: expected {len(batch)} embeddings in 'data'")
        malformed = "malformed embedding items"
        try:
            # Servers may return items out of order; `index` is authoritative when present.
            ordered = (
                sorted(data, key=lambda item: int(item.get("index", 0)))
                if all(isinstance(item, dict) and "index" in item for item in data)
                else data
            )
            rows = [item["embedding"] for item in ordered]
            if rows and isinstance(rows[0], str):  # base64 despite encoding_format=float
                malformed = "malformed base64 embeddings"
                rows = [np.frombuffer(base64.b64decode(r), dtype="<f4").tolist() for r in rows]
        except (KeyError, TypeError, ValueError) as exc:  # binascii.Error is a ValueError
            # not chained: the error's text can quote the provider's values
            raise ModelRequestError(f"{self._client.name}: {malformed} ({type(exc).__name__})") from None
        return to_unit_vectors(rows, self._dimensions, self._client.name)

    def embed(self, texts: Sequence[str]) -> Vectors:
        clipped = clip_texts(texts, self.max_input_chars)
        if not clipped:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        parts = [
            self._request(clipped[i : i + self.batch_size]) for i in range(0, len(clipped), self.batch_size)
        ]
        if self._dimensions is None:
            self._dimensions = int(parts[0].shape[1])
        return np.concatenate(parts, axis=0)


def _count_usage(body: Any, model_id: str) -> None:
    usage = body.get("usage") if isinstance(body, dict) else None
    if isinstance(usage, dict):
        metering.record_tokens(model_id, usage.get("prompt_tokens"), usage.get("completion_tokens"))


_FINISH_REASON = re.compile(r"[a-z_]{1,32}")


def _completion_text(body: Any, model_id: str) -> ChatReply:
    """The answer of the first choice, its reasoning removed; truncated when the model hit max_tokens."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ModelRequestError(f"{model_id}: response has no choices")
    message = choices[0].get("message") or {}
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, list):  # content parts: only text ones (a null or an object is no text)
        content = "".join(
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    if isinstance(content, str):  # joined first: a pair split across two parts is one character again
        content = strip_reasoning(well_formed(content))
    # the server's word goes into our message only when it is one of the short codes servers use
    raw_reason = choices[0].get("finish_reason")
    reason = raw_reason if isinstance(raw_reason, str) and _FINISH_REASON.fullmatch(raw_reason) else ""
    if not isinstance(content, str) or not content.strip():
        hint = (
            " (max_tokens spent before answering? try max_tokens_field=max_completion_tokens)"
            if reason == "length"
            else ""
        )
        raise ModelEmptyResponse(
            f"{model_id}: empty answer, finish_reason={reason}{hint}", provider_code=reason
        )
    return ChatReply(content, truncated=reason == "length")


class OpenAIChatModel:
    """ChatModel over POST {base_url}/chat/completions."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        api_key: str | None = None,
        model_id: str | None = None,
        max_tokens_field: str = "max_tokens",
        timeout: float = 180.0,
        transport: HttpTransport | None = None,
    ) -> None:
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise ValueError("max_tokens_field must be max_tokens or max_completion_tokens")
        self.model = model
        self.model_id = model_id or f"openai/{model}@{base_url.rstrip('/')}"
        self.max_tokens_field = max_tokens_field
        self._client = _Client(model, base_url, api_key, timeout, transport)

    def _complete(self, messages: list[dict[str, Any]], temperature: float, max_tokens: int) -> ChatReply:
        payload = {
            "model": self.model,
            "messages": messages,
            "temperature": temperature,
            self.max_tokens_field: max_tokens,
        }
        body = self._client.post("chat/completions", payload)
        _count_usage(body, self.model_id)
        return _completion_text(body, self._client.name)

    def chat(
        self, messages: Sequence[Mapping[str, str]], *, temperature: float = 0.3, max_tokens: int = 2048
    ) -> str:
        wire = [{"role": str(m.get("role", "user")), "content": str(m.get("content", ""))} for m in messages]
        return self._complete(wire, temperature, max_tokens)


class OpenAIVisionModel(OpenAIChatModel):
    """VisionModel: one user message with the prompt and the image as a base64 data URI."""

    temperature = 0.2

    def describe(self, image: bytes, prompt: str, *, max_tokens: int = 1024) -> str:
        image, fmt = vision_image(image)
        data_uri = f"data:image/{fmt};base64,{base64.b64encode(image).decode('ascii')}"
        messages: list[dict[str, Any]] = [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": prompt},
                    {"type": "image_url", "image_url": {"url": data_uri}},
                ],
            }
        ]
        return self._complete(messages, self.temperature, max_tokens)


if TYPE_CHECKING:  # static proof that the adapters satisfy the ports
    from chalicelib.ports import ChatModel, EmbeddingModel, VisionModel

    _embedding: type[EmbeddingModel] = OpenAIEmbedding
    _chat: type[ChatModel] = OpenAIChatModel
    _vision: type[VisionModel] = OpenAIVisionModel
