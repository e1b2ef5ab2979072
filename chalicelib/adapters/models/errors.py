"""Permanent model errors. Retryable ones are the ports' ModelThrottled / ModelUnavailable."""

from __future__ import annotations


class ModelRequestError(ValueError):
    """The provider rejected the request and the same request will fail again (validation, unknown
    model, bad input, malformed response). Never retry; fail the item with a clear message."""

    code = "model_request_invalid"

    def __init__(self, message: str, *, provider_code: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.provider_code = provider_code
        self.status = status


class ModelAuthError(ModelRequestError):
    """Credentials or permissions are wrong: a configuration problem, not a document problem."""

    code = "model_auth_failed"


class ModelEmptyResponse(ModelRequestError):
    """The model answered with no text (e.g. a reasoning model spent `max_tokens` before answering)."""

    code = "model_empty_response"
