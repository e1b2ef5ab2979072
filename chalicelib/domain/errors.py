"""Error types with stable codes (WeKnora's envelope codes) and the span error codes."""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class SpanErrorCode(StrEnum):
    DOCREADER_TIMEOUT = "DOCREADER_TIMEOUT"
    DOCREADER_UNAVAILABLE = "DOCREADER_UNAVAILABLE"
    DOCREADER_PARSE_FAILED = "DOCREADER_PARSE_FAILED"
    UNSUPPORTED_TYPE = "UNSUPPORTED_TYPE"
    CHUNKING_FAILED = "CHUNKING_FAILED"
    EMBEDDING_RATE_LIMIT = "EMBEDDING_RATE_LIMIT"
    EMBEDDING_PROVIDER_FAIL = "EMBEDDING_PROVIDER_FAIL"
    VECTORSTORE_WRITE_FAILED = "VECTORSTORE_WRITE_FAILED"
    MULTIMODAL_VLM_FAILED = "MULTIMODAL_VLM_FAILED"
    MULTIMODAL_ALL_FAILED = "MULTIMODAL_ALL_FAILED"
    UPSTREAM_FAILED = "UPSTREAM_FAILED"
    TASK_TIMEOUT = "TASK_TIMEOUT"
    ENQUEUE_FAILED = "ENQUEUE_FAILED"
    SUPERSEDED = "SUPERSEDED"
    QUOTA_EXCEEDED = "QUOTA_EXCEEDED"
    UNKNOWN = "UNKNOWN"


class AppError(Exception):
    """An error the API turns into `{success:false, error:{code, message}}` with an HTTP status."""

    status = 500
    code = "internal_error"

    def __init__(
        self, message: str, *, code: str | None = None, data: Any = None, details: Any = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.data = data
        self.details = details


class BadRequest(AppError):
    status = 400
    code = "bad_request"


class Unauthorized(AppError):
    status = 401
    code = "unauthorized"


class Forbidden(AppError):
    status = 403
    code = "forbidden"


class NotFound(AppError):
    status = 404
    code = "not_found"


class Conflict(AppError):
    status = 409
    code = "conflict"


class Gone(AppError):
    """It was there and is no more (an expired download link, a deleted file)."""

    status = 410
    code = "gone"


class PayloadTooLarge(AppError):
    status = 413
    code = "payload_too_large"


class ServiceUnavailable(AppError):
    """A provider the request needs (an embedding model) failed or throttled: try again later."""

    status = 503
    code = "service_unavailable"


class StageError(Exception):
    """A stage failure. `permanent` ones fail the knowledge at once; others are retried by the queue."""

    def __init__(self, message: str, *, code: SpanErrorCode = SpanErrorCode.UNKNOWN, permanent: bool = False):
        super().__init__(message)
        self.message = message
        self.code = code
        self.permanent = permanent


class PermanentStageError(StageError):
    def __init__(self, message: str, *, code: SpanErrorCode = SpanErrorCode.UNKNOWN):
        super().__init__(message, code=code, permanent=True)


class TransientStageError(StageError):
    def __init__(self, message: str, *, code: SpanErrorCode = SpanErrorCode.UNKNOWN):
        super().__init__(message, code=code, permanent=False)


class DeferredStageError(StageError):
    """The provider asked us to wait (throttling): put the message back with a delay instead of
    spending one of the stage's tries."""

    def __init__(
        self, message: str, *, delay_seconds: float, code: SpanErrorCode = SpanErrorCode.EMBEDDING_RATE_LIMIT
    ):
        super().__init__(message, code=code, permanent=False)
        self.delay_seconds = delay_seconds


class AwaitingTurn(DeferredStageError):
    """The tenant holds all its places in the pipeline (fairness between tenants): the document waits its
    turn behind the queue's other messages. Never a try, never a throttle deferral."""

    def __init__(self, message: str, *, delay_seconds: float):
        super().__init__(message, delay_seconds=delay_seconds, code=SpanErrorCode.UNKNOWN)


class ContinueLater(DeferredStageError):
    """The invocation used its slice (or is about to run out of time) and its progress is durable: a fresh
    message continues at `offset` (and, for embedding, after the chunk id `cursor`), behind the other
    documents' messages. Not a failed try, and not a throttle deferral."""

    def __init__(self, message: str, *, offset: int | None = None, cursor: str | None = None):
        super().__init__(message, delay_seconds=0, code=SpanErrorCode.UNKNOWN)
        self.offset = offset
        self.cursor = cursor
