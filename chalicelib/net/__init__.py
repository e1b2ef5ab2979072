"""SSRF-safe networking: URL validation, a pinned-address fetch client and URL document import."""

from .client import FetchError, FetchResponse, SafeHttpClient
from .ssrf import AllowList, URLBlocked, ValidatedURL, is_url_safe, validate_url
from .urlimport import fetch_url_document, is_file_url

__all__ = [
    "AllowList",
    "FetchError",
    "FetchResponse",
    "SafeHttpClient",
    "URLBlocked",
    "ValidatedURL",
    "fetch_url_document",
    "is_file_url",
    "is_url_safe",
    "validate_url",
]
