"""SSRF-safe networking: URL validation, a pinned-address fetch client and URL document import."""

from chalicelib.net.client import FetchError, FetchResponse, SafeHttpClient
from chalicelib.net.ssrf import AllowList, URLBlocked, ValidatedURL, is_url_safe, validate_url
from chalicelib.net.urlimport import fetch_url_document, is_file_url

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
