"""Error types with stable codes (WeKnora's envelope codes) and the span error codes."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Any


class SpanErrorCode(StrEnum):
    """Why a stage failed: lower case, as every code the API answers (WeKnora writes them in upper case;
    a row or span stored in upper case reads back as the same code)."""

    @classmethod
    def _missing_(cls, value: object) -> SpanErrorCode | None:
        return cls.__members__.get(value.upper()) if isinstance(value, str) else None

    DOCREADER_TIMEOUT = "docreader_timeout"
    DOCREADER_UNAVAILABLE = "docreader_unavailable"
    DOCREADER_PARSE_FAILED = "docreader_parse_failed"
    UNSUPPORTED_TYPE = "unsupported_type"
    CHUNKING_FAILED = "chunking_failed"
    EMBEDDING_RATE_LIMIT = "embedding_rate_limit"
    EMBEDDING_PROVIDER_FAIL = "embedding_provider_fail"
    VECTORSTORE_WRITE_FAILED = "vectorstore_write_failed"
    MULTIMODAL_VLM_FAILED = "multimodal_vlm_failed"
    MULTIMODAL_ALL_FAILED = "multimodal_all_failed"
    UPSTREAM_FAILED = "upstream_failed"
    TASK_TIMEOUT = "task_timeout"
    ENQUEUE_FAILED = "enqueue_failed"
    SUPERSEDED = "superseded"
    QUOTA_EXCEEDED = "quota_exceeded"
    #: the document's storage backend keeps nothing (the `dummy` test backend): there is no file to read
    STORAGE_NOT_RETAINED = "storage_not_retained"
    #: the stored source is bigger than the file size limit (an object replaced after it was accepted)
    FILE_TOO_LARGE = "file_too_large"
    #: a URL import the worker refused (its URL or a redirect's target): the API's codes for a refused URL
    SSRF_BLOCKED = "ssrf_blocked"
    HOST_UNRESOLVED = "host_unresolved"
    #: a URL import whose server was asked and did not give the document (no answer, HTTP error, too large)
    URL_FETCH_FAILED = "url_fetch_failed"
    UNKNOWN = "unknown"


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


class WriteRefused(Exception):
    """A store refused a write for good (an item or a key too large for it): the same write is refused
    again. Not a model's fault: the work that made it fails at once with the class's stable `code` (its
    message never carries the store's words), instead of a retry that would pay again for what it wrote."""

    code = "write_refused"


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
    """The document may not enter the pipeline yet (fairness between tenants): its message comes back after
    `delay_seconds` carrying `ticket`, its turn at the door (or sooner, woken when a place is given back).
    Never a try, never a throttle deferral."""

    def __init__(self, message: str, *, delay_seconds: float, ticket: str = ""):
        super().__init__(message, delay_seconds=delay_seconds, code=SpanErrorCode.UNKNOWN)
        self.ticket = ticket


class ContinueLater(DeferredStageError):
    """The invocation used its slice (or is about to run out of time) and its progress is durable: a fresh
    message continues at `offset` (and, for embedding, after the chunk id `cursor`), behind the other
    documents' messages. Not a failed try, and not a throttle deferral."""

    def __init__(
        self,
        message: str,
        *,
        offset: int | None = None,
        cursor: str | None = None,
        counts: dict[str, int] | None = None,
    ):
        super().__init__(message, delay_seconds=0, code=SpanErrorCode.UNKNOWN)
        self.offset = offset
        self.cursor = cursor
        #: what the slice counted so far (carried in the next message)
        self.counts = counts


#: a provider's machine-readable error code (an AWS error code, a model's stop reason) is kept only when it is
#: one: anything else is a remote server's free text, which never reaches a tenant-visible field or a log line
_PROVIDER_CODE = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def provider_code(raw: object) -> str:
    """`raw` when it looks like a code (letters, digits, `_ . -`, at most 64), else ''."""
    code = "" if raw is None else str(raw)
    return code if _PROVIDER_CODE.fullmatch(code) else ""
