"""Where files live: the stored objects' port."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from chalicelib.domain.errors import AppError
from chalicelib.domain.storage_keys import safe_object_key

#: the piece `FileStore.read_chunks` hands out unless told otherwise
READ_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class PresignedPost:
    """An HTML-form upload a client POSTs to `url` (multipart/form-data: `fields` as they are, then the
    file as the last field, `file`); the store refuses a body over the size it was signed for."""

    url: str
    fields: dict[str, str] = field(default_factory=dict)


class FileStore(Protocol):
    """Object storage addressed by URLs (`s3://bucket/key`, `local://key`)."""

    def save(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        """Stores bytes under `key` and returns the object's URL."""
        ...

    def save_if_absent(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> bool:
        """Stores bytes under `key` only if no object is there, in one step: True when this call created it,
        False when an object was already there (it is left as it is). An S3-compatible server without
        conditional writes stores the bytes anyway and answers True: a caller that must be the only
        writer reads the object back."""
        ...

    def replace_if_unchanged(
        self, key: str, expected: bytes, data: bytes, content_type: str = "application/octet-stream"
    ) -> bool:
        """Replaces the object under `key` with `data` only if it still holds exactly `expected`, in one step
        (two callers that read the same `expected` cannot both replace it): True when replaced, False when
        it holds other bytes or is gone. The same caveat as `save_if_absent` for servers without them."""
        ...

    def read(self, url: str, limit: int | None = None) -> bytes:
        """The object's bytes; raises FileNotFoundError when it is missing (callers treat that as permanent)
        and, given a `limit`, ObjectTooLarge for an object of more bytes, before its bytes are read."""
        ...

    def read_chunks(self, url: str, chunk_size: int = READ_CHUNK_BYTES) -> Iterator[bytes]:
        """The object's bytes in order, in pieces of at most `chunk_size` bytes, one piece held at a time: for
        a reader that goes through a big object once (or needs only its beginning) without holding it whole.
        A missing object raises FileNotFoundError at the latest when the first piece is asked for; a reader
        may stop early (the object is closed when the iterator is closed or dropped)."""
        ...

    def delete(self, url: str) -> None:
        """Deletes the object; a missing object is not an error."""
        ...

    def exists(self, url: str) -> bool: ...

    def list_keys(self, prefix: str, limit: int, start_after: str = "") -> list[str]:
        """The keys of at most `limit` objects whose key starts with `prefix`, in key order: one listing
        (S3 ListObjectsV2, which answers at most 1,000 keys: a bigger `limit` is a ValueError). Given
        `start_after` (a key; S3's StartAfter), only the keys after it: the last key of a full listing
        pages on to the next."""
        ...

    def size(self, url: str) -> int: ...

    def url_for(self, key: str) -> str:
        """The URL an object under `key` would have, without touching storage."""
        ...

    def key_of(self, url: str) -> str: ...

    def presign_put(self, key: str, expires_seconds: int, content_type: str = "") -> str:
        """An HTTP URL a client can PUT the object's bytes to (of any size: S3 takes up to 5 GB)."""
        ...

    def presign_post(self, key: str, expires_seconds: int, max_bytes: int) -> PresignedPost:
        """A form upload of exactly `key` that the store itself refuses when its body is over `max_bytes`
        (S3's `content-length-range` policy condition). A backend without one raises NotImplementedError."""
        ...

    def copy(self, src_url: str, dst_key: str) -> str:
        """Copies an object of this store to `dst_key` (server side where the backend can) and returns the
        copy's URL; raises FileNotFoundError when the source is missing. Overwrites: a re-run is a no-op."""
        ...

    def presign_get(self, url: str, expires_seconds: int, file_name: str = "") -> str:
        """An HTTP URL a client can GET the object from (as an attachment named `file_name`, if given)."""
        ...


#: the most keys one listing answers (S3 ListObjectsV2's page)
MAX_LISTED_KEYS = 1000


def check_list_limit(prefix: str, limit: int) -> str:
    """The one rule every store applies to `list_keys`: a key prefix that is safe (a trailing `/` kept)
    and a limit one listing can answer. Returns the prefix."""
    if not 0 < limit <= MAX_LISTED_KEYS:
        raise ValueError(f"a listing answers 1 to {MAX_LISTED_KEYS} keys, not {limit}")
    safe_object_key(prefix)
    return prefix


class ObjectTooLarge(ValueError):
    """An object bigger than the reader's limit (a presigned PUT replayed with a bigger file, an object
    replaced behind the service's back): refused before its bytes are read into memory."""

    def __init__(self, url: str, size: int, limit: int) -> None:
        super().__init__(f"{url}: {size} bytes, more than the {limit} bytes allowed")
        self.size = size
        self.limit = limit


def check_read_limit(url: str, size: int, limit: int | None) -> None:
    """The one rule every store applies to `read(url, limit)`."""
    if limit is not None and size > limit:
        raise ObjectTooLarge(url, size, limit)


class ObjectNotRetained(FileNotFoundError):
    """A read from a backend that keeps nothing (the `dummy` test backend): the object was accepted and
    dropped. Permanent, like any missing object, but with its own reason for the document's error."""


class StorageRefused(AppError):
    """A storage backend refused a call for a reason no retry cures: it rejects the keys it was given (access
    denied, an unknown key id, a signature that does not match) or its bucket does not exist. The
    operator's configuration is at fault, not the tenant's request: the API answers 503 with the stable
    `code`, and a stage fails the document with it at once. It carries the call and the HTTP status only,
    never the text the server answered (an S3-compatible server writes its error message freely)."""

    status = 503
    ACCESS_DENIED = "storage_access_denied"
    BUCKET_MISSING = "storage_bucket_missing"
    #: any other 4xx answer (a request the backend does not accept): a retry sends the same request
    REQUEST_REFUSED = "storage_request_refused"

    def __init__(self, code: str, *, operation: str, http_status: int) -> None:
        what = {
            self.ACCESS_DENIED: "denies access",
            self.BUCKET_MISSING: "has no such bucket",
        }.get(code, "refuses the request")
        super().__init__(
            f"the storage backend {what} ({operation}, HTTP {http_status}); "
            "the operator must fix the storage backend's configuration",
            code=code,
        )
        self.operation = operation
        self.http_status = http_status


class StorageUnavailable(AppError):
    """A storage backend did not serve a call, for a reason a later try may cure: it throttled, answered a
    5xx, or did not answer at all. Transient: the API answers 503 with the stable code, and a stage's
    message is retried. Like StorageRefused it carries the call, the HTTP status (0: no answer) and the
    failure's class only, never the server's text, neither in its message nor as its cause."""

    status = 503
    code = "storage_unavailable"

    def __init__(self, *, operation: str, http_status: int = 0, failure: str = "") -> None:
        answer = f"HTTP {http_status}" if http_status else (failure or "no answer")
        super().__init__(f"the storage backend did not serve {operation} ({answer}); try again later")
        self.operation = operation
        self.http_status = http_status


class UnknownStorageBackend(ValueError):
    """A URL or a knowledge base names a backend id this deployment does not configure."""


class CrossBackendOperation(ValueError):
    """An operation that would span two backends (a copy from one to another) where one is expected."""


class Storage(FileStore, Protocol):
    """The documents' storage: every configured backend behind one FileStore. URL operations (read,
    delete, exists, size, copy, presign_get) go to the backend the URL names; `save`, `url_for` and
    `presign_put` are the default backend's. `backend(id)` is one backend's own store: a document's
    objects are written through the store of its knowledge base's backend."""

    def backend(self, backend_id: str) -> FileStore:
        """The store of a named backend ("" = the default one); UnknownStorageBackend otherwise."""
        ...

    def backend_ids(self) -> list[str]:
        """The named backends configured (the default one has no id)."""
        ...
