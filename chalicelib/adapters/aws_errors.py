"""Which botocore errors a later retry of the same call can cure (throttling, a 5xx, the network), told
apart from the ones it cannot (a refused permission, a wrong name, a bad request), which are bugs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, PartialCredentialsError

from chalicelib.ports import ServiceUnreachable

#: error codes AWS services answer when they are throttling or briefly unable to serve
TRANSIENT_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceededException",
        "RequestThrottled",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "InternalFailure",
        "InternalServerError",
        "InternalError",
        "RequestTimeout",
        "RequestTimeoutException",
    }
)


def is_transient(error: BaseException) -> bool:
    """True for throttling, a 5xx or 408/429 answer, and a connection that failed or timed out."""
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
        return code in TRANSIENT_CODES or status >= 500 or status in (408, 429)
    if isinstance(error, NoCredentialsError | PartialCredentialsError):
        return False  # a deployment fault, not the service's
    return isinstance(error, BotoCoreError)


@contextmanager
def unanswered_is_unreachable(service: str) -> Iterator[None]:
    """Inside: a transient botocore error becomes the port's ServiceUnreachable, without the botocore error
    as its cause or shown context (its message may quote the server; S3FileStore._call drops it too); any
    other one propagates."""
    try:
        yield
    except (BotoCoreError, ClientError) as error:
        if is_transient(error):
            raise ServiceUnreachable(f"{service} did not answer ({type(error).__name__})") from None
        raise
