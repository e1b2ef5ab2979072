"""Model ports (embedding, chat, vision, OCR, ASR) and the errors every provider maps to."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # numpy stays off the API function's cold-start path
    import numpy as np
    import numpy.typing as npt

    Vectors = npt.NDArray[np.float32]

    from chalicelib.ports.index import IndexSpace


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


class ModelReplyMalformed(ModelRequestError):
    """The model answered, but not in a shape we can read safely (a body that is not the API's JSON, a
    reply too large or nested too deeply). Never retried: the same paid call would come back the same."""

    code = "model_reply_malformed"


class ModelReplyTruncated(ModelRequestError):
    """The model stopped at `max_tokens` and nothing complete can be read from what it wrote."""

    code = "model_reply_truncated"


class ChatReply(str):
    """What a chat or vision model answered, its reasoning removed. `truncated`: the model stopped at
    `max_tokens`, so the text ends mid-way (a reader keeps only what is complete)."""

    truncated: bool

    def __new__(cls, text: str, *, truncated: bool = False) -> ChatReply:
        reply = super().__new__(cls, text)
        reply.truncated = truncated
        return reply


def was_truncated(reply: str) -> bool:
    """Whether the adapter said this answer was cut off at `max_tokens` (a plain string never is)."""
    return isinstance(reply, ChatReply) and reply.truncated


class EmbeddingCache(Protocol):
    """Vectors by (tenant, model space, content hash). Written batch by batch as embedding proceeds, it is
    both the checkpoint a retried stage resumes from and the cache a reparse or clone hits for unchanged
    text. Never shared across tenants: another tenant's hit (`cache_hits` in spans and task progress)
    would tell that someone embedded the same text or searched the same phrase."""

    def get_many(
        self, tenant_id: str, space: IndexSpace, content_hashes: Sequence[str]
    ) -> dict[str, Vectors]: ...

    def put_many(self, tenant_id: str, space: IndexSpace, vectors: Mapping[str, Vectors]) -> None: ...


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
