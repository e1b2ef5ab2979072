"""FileStore providers: `local://` (a directory; the local default), `s3://` (S3, or moto locally, and any
S3-compatible bucket), the `dummy` test backend, a named backend's `storage://<id>/…` objects and the
store that routes every URL to its backend."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError

from chalicelib.adapters.aws_errors import is_transient
from chalicelib.domain.storage_backends import backend_of, key_in_backend, storage_url
from chalicelib.domain.storage_keys import safe_object_key
from chalicelib.ports import CrossBackendOperation, FileStore, ObjectNotRetained, UnknownStorageBackend
from chalicelib.ports.storage import (
    READ_CHUNK_BYTES,
    ObjectTooLarge,
    PresignedPost,
    StorageRefused,
    StorageUnavailable,
    check_list_limit,
    check_read_limit,
)


class LocalFileStore:
    """Objects as files under one base directory. Keys are checked so nothing escapes it."""

    scheme = "local"

    def __init__(self, base_dir: str | Path):
        self.base = Path(base_dir).resolve()
        self.base.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        path = (self.base / safe_object_key(key)).resolve()
        if not path.is_relative_to(self.base):
            raise ValueError(f"key escapes the storage directory: {key!r}")
        return path

    def url_for(self, key: str) -> str:
        return f"local://{safe_object_key(key)}"

    def key_of(self, url: str) -> str:
        if not url.startswith("local://"):
            raise ValueError(f"not a local:// URL: {url!r}")
        return url[len("local://") :]

    def save(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # write-then-rename so a reader never sees half a file
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
        return self.url_for(key)

    def save_if_absent(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> bool:
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            with self._conditional_write():
                os.link(tmp, path)  # refuses an existing name, and a reader never sees half a file
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp)
        return True

    def replace_if_unchanged(
        self, key: str, expected: bytes, data: bytes, content_type: str = "application/octet-stream"
    ) -> bool:
        path = self._path(key)
        with self._conditional_write():
            try:
                if path.read_bytes() != expected:
                    return False
            except FileNotFoundError:
                return False
            self.save(key, data, content_type)
        return True

    @contextmanager
    def _conditional_write(self) -> Iterator[None]:
        """One conditional write at a time, across the processes and threads sharing the directory: a
        create-if-absent cannot land between a replace's comparison and its write."""
        with open(self.base / ".conditional-writes.lock", "ab") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield  # closing the file releases the lock

    def read(self, url: str, limit: int | None = None) -> bytes:
        path = self._path(self.key_of(url))
        with path.open("rb") as handle:
            check_read_limit(url, os.fstat(handle.fileno()).st_size, limit)
            return handle.read()

    def read_chunks(self, url: str, chunk_size: int = READ_CHUNK_BYTES) -> Iterator[bytes]:
        with self._path(self.key_of(url)).open("rb") as handle:
            while piece := handle.read(chunk_size):
                yield piece

    def delete(self, url: str) -> None:
        self._path(self.key_of(url)).unlink(missing_ok=True)

    def exists(self, url: str) -> bool:
        return self._path(self.key_of(url)).is_file()

    def size(self, url: str) -> int:
        return self._path(self.key_of(url)).stat().st_size

    def list_keys(self, prefix: str, limit: int, start_after: str = "") -> list[str]:
        check_list_limit(prefix, limit)
        folder = self._path(prefix.rsplit("/", 1)[0]) if "/" in prefix else self.base
        if not folder.is_dir():
            return []
        keys = (
            path.relative_to(self.base).as_posix()
            for path in folder.rglob("*")
            if path.is_file() and not path.name.startswith(".")  # a write's temporary file, the lock
        )
        return sorted(k for k in keys if k.startswith(prefix) and k > start_after)[:limit]

    def presign_put(self, key: str, expires_seconds: int, content_type: str = "") -> str:
        raise NotImplementedError("local:// storage has no presigned URLs; uploads stage in the S3 bucket")

    def presign_post(self, key: str, expires_seconds: int, max_bytes: int) -> PresignedPost:
        raise NotImplementedError("local:// storage has no presigned uploads; uploads stage in the S3 bucket")

    def copy(self, src_url: str, dst_key: str) -> str:
        source = self._path(self.key_of(src_url))
        if not source.is_file():
            raise FileNotFoundError(src_url)
        path = self._path(dst_key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        os.close(fd)
        shutil.copyfile(source, tmp)
        os.replace(tmp, path)
        return self.url_for(dst_key)

    def presign_get(self, url: str, expires_seconds: int, file_name: str = "") -> str:
        raise NotImplementedError("local:// storage has no presigned URLs; downloads are served from S3")


#: the error codes S3 answers a missing key with (GetObject: NoSuchKey; HeadObject: a bare 404)
_MISSING = ("404", "NoSuchKey", "NotFound")


def _missing(error: Any) -> bool:
    return error.response.get("Error", {}).get("Code") in _MISSING


#: the error codes an S3(-compatible) server answers a backend's wrong configuration with, which no retry
#: cures: keys or a policy it refuses, a bucket it does not have. A HEAD answer has no body: its code is the
#: bare status ("403").
_REFUSED = {
    "AccessDenied": StorageRefused.ACCESS_DENIED,
    "InvalidAccessKeyId": StorageRefused.ACCESS_DENIED,
    "SignatureDoesNotMatch": StorageRefused.ACCESS_DENIED,
    "403": StorageRefused.ACCESS_DENIED,
    "NoSuchBucket": StorageRefused.BUCKET_MISSING,
}


#: what S3 answers a conditional write whose condition does not hold
_CONDITION_FAILED = ("PreconditionFailed",)
#: S3's 409: a conflicting write (or delete) of the key is still under way, so whether the condition holds
#: is not known yet (it may fail and leave the key as it was): the write is tried once more after a pause
_CONDITION_CONFLICT = "ConditionalRequestConflict"
CONFLICT_RETRY_SECONDS = 0.2


def _code(error: Any) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _port_error(error: Any, operation: str) -> StorageRefused | StorageUnavailable:
    """The port's error a ClientError is, from its code and status only (never the server's message):
    throttling or a 5xx is StorageUnavailable (transient); a refusal of the keys or the bucket, and any
    other 4xx, StorageRefused (permanent)."""
    status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0)
    operation = str(getattr(error, "operation_name", "") or operation)
    if is_transient(error):
        return StorageUnavailable(operation=operation, http_status=status)
    code = _REFUSED.get(_code(error), StorageRefused.REQUEST_REFUSED)
    return StorageRefused(code, operation=operation, http_status=status)


def _read_body(body: Any, operation: str, amount: int | None = None) -> bytes:
    """An answer's body (its next `amount` bytes, given one): a connection broken mid-body (whose error can
    quote the bytes the server sent) is StorageUnavailable."""
    try:
        return bytes(body.read(amount))
    except BotoCoreError as error:
        failure = type(error).__name__
    raise StorageUnavailable(operation=operation, failure=failure)  # outside the handler: no context


class S3FileStore:
    """Objects of one bucket. A missing object raises FileNotFoundError, as `local://` does (callers tell a
    gone source, a permanent error, from S3 throttling, a 5xx or no answer: StorageUnavailable, transient).
    A bucket that refuses the keys, does not exist or refuses the request (another 4xx) raises
    StorageRefused (permanent: the operator's to fix). Neither carries the server's message, which is
    neither chained nor logged (an S3-compatible server writes it freely)."""

    def __init__(self, client: Any, bucket: str):
        self.client = client
        self.bucket = bucket

    def _call(self, operation: str, missing: str = "", passing: tuple[str, ...] = (), **params: Any) -> Any:
        """One S3 call. With `missing` (the object's URL) a missing object raises FileNotFoundError; an
        error whose code is in `passing` propagates as is (the caller reads its code); any other is the
        port's StorageRefused or StorageUnavailable (see `_port_error`). A botocore error that is not an
        answer (no connection, a timeout) is StorageUnavailable; missing credentials propagate (a bug)."""
        failure: Exception
        try:
            return getattr(self.client, operation)(**params)
        except self.client.exceptions.ClientError as error:
            if _code(error) in passing:
                raise
            missing_object = missing and _missing(error)
            failure = FileNotFoundError(missing) if missing_object else _port_error(error, operation)
        except BotoCoreError as error:
            if not is_transient(error):
                raise
            failure = StorageUnavailable(operation=operation, failure=type(error).__name__)
        raise failure  # outside the handler: the server's answer is not even its context

    def url_for(self, key: str) -> str:
        return f"s3://{self.bucket}/{safe_object_key(key)}"

    def key_of(self, url: str) -> str:
        # Not urlparse: a key is not a URL path, and `#` or `?` in one (a file name) would be cut off.
        prefix = f"s3://{self.bucket}/"
        if not url.startswith(prefix):
            raise ValueError(f"not an object of bucket {self.bucket}: {url!r}")
        return url[len(prefix) :]

    def save(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        key = safe_object_key(key)
        self._call("put_object", Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)
        return self.url_for(key)

    def save_if_absent(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> bool:
        return self._put_if(key, data, content_type, IfNoneMatch="*")

    def replace_if_unchanged(
        self, key: str, expected: bytes, data: bytes, content_type: str = "application/octet-stream"
    ) -> bool:
        key = safe_object_key(key)
        try:
            answer = self._call("get_object", missing=self.url_for(key), Bucket=self.bucket, Key=key)
        except FileNotFoundError:
            return False
        with closing(answer["Body"]) as body:
            if int(answer.get("ContentLength", -1)) != len(expected):
                return False
            if _read_body(body, "get_object") != expected:
                return False
        # If-Match the ETag just read: a write in between (another replace) makes this one fail
        return self._put_if(key, data, content_type, IfMatch=answer["ETag"])

    def _put_if(self, key: str, data: bytes, content_type: str, **condition: str) -> bool:
        """A conditional PutObject: False when its condition does not hold (or, for If-Match, the object
        is gone). A conflict still unsettled after one more try is StorageUnavailable (transient)."""
        key = safe_object_key(key)
        put: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "Body": data, "ContentType": content_type}
        passing = (*_CONDITION_FAILED, _CONDITION_CONFLICT, "NotImplemented")
        for attempt in range(2):
            if attempt:
                time.sleep(CONFLICT_RETRY_SECONDS)
            try:
                self._call("put_object", self.url_for(key), passing, **put, **condition)
            except FileNotFoundError:
                return False
            except self.client.exceptions.ClientError as error:
                if _code(error) == _CONDITION_CONFLICT:
                    continue
                if _code(error) in _CONDITION_FAILED:
                    return False
                # NotImplemented: an S3-compatible server that refuses the condition: written as one that
                # ignores it writes
                self._call("put_object", **put)
            return True
        raise StorageUnavailable(operation="put_object", http_status=409)

    def read(self, url: str, limit: int | None = None) -> bytes:
        answer = self._call("get_object", missing=url, Bucket=self.bucket, Key=self.key_of(url))
        body = answer["Body"]
        try:  # the answer's length comes before its body: a larger object is never read
            check_read_limit(url, int(answer.get("ContentLength", 0)), limit)
        except ObjectTooLarge:
            body.close()
            raise
        return _read_body(body, "get_object")

    def read_chunks(self, url: str, chunk_size: int = READ_CHUNK_BYTES) -> Iterator[bytes]:
        answer = self._call("get_object", missing=url, Bucket=self.bucket, Key=self.key_of(url))
        with closing(answer["Body"]) as body:  # a reader stopping early closes the connection
            while piece := _read_body(body, "get_object", chunk_size):
                yield piece

    def delete(self, url: str) -> None:
        self._call("delete_object", Bucket=self.bucket, Key=self.key_of(url))

    def exists(self, url: str) -> bool:
        return self._head(url) is not None

    def size(self, url: str) -> int:
        head = self._head(url)
        if head is None:
            raise FileNotFoundError(url)
        return int(head["ContentLength"])

    def list_keys(self, prefix: str, limit: int, start_after: str = "") -> list[str]:
        prefix = check_list_limit(prefix, limit)
        params: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": limit}
        if start_after:  # (S3 lists the keys after it, in key order: the next page of a full listing)
            params["StartAfter"] = start_after
        answer = self._call("list_objects_v2", **params)
        return [str(item["Key"]) for item in answer.get("Contents", [])]

    def _head(self, url: str) -> dict[str, Any] | None:
        try:
            return dict(self._call("head_object", missing=url, Bucket=self.bucket, Key=self.key_of(url)))
        except FileNotFoundError:
            return None

    def presign_put(self, key: str, expires_seconds: int, content_type: str = "") -> str:
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": safe_object_key(key)}
        if content_type:
            params["ContentType"] = content_type
        return str(self.client.generate_presigned_url("put_object", Params=params, ExpiresIn=expires_seconds))

    def presign_post(self, key: str, expires_seconds: int, max_bytes: int) -> PresignedPost:
        # botocore adds the exact `key` (and the bucket) to the policy's conditions: the form cannot name
        # another object, nor (content-length-range) carry a body over `max_bytes`: S3 answers 400 EntityTooLarge
        post = self.client.generate_presigned_post(
            self.bucket,
            safe_object_key(key),
            Conditions=[["content-length-range", 0, max_bytes]],
            ExpiresIn=expires_seconds,
        )
        return PresignedPost(url=str(post["url"]), fields={str(k): str(v) for k, v in post["fields"].items()})

    def copy(self, src_url: str, dst_key: str) -> str:
        """A server-side CopyObject (no bytes through the function) within the bucket."""
        key = safe_object_key(dst_key)
        source = {"Bucket": self.bucket, "Key": self.key_of(src_url)}
        self._call("copy_object", missing=src_url, Bucket=self.bucket, Key=key, CopySource=source)
        return self.url_for(key)

    def presign_get(self, url: str, expires_seconds: int, file_name: str = "") -> str:
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": self.key_of(url)}
        if file_name:
            params["ResponseContentDisposition"] = f'attachment; filename="{file_name}"'
        return str(self.client.generate_presigned_url("get_object", Params=params, ExpiresIn=expires_seconds))


class DummyFileStore:
    """The specification's `dummy` backend (a test backend): writes are accepted and kept nowhere, so a
    read raises ObjectNotRetained (a FileNotFoundError: permanent) and a document stored on it fails at
    the docreader with a clear reason instead of hanging. `exists` is always False."""

    def __init__(self, name: str = "dummy") -> None:
        self.name = name

    def url_for(self, key: str) -> str:
        return f"dummy://{self.name}/{safe_object_key(key)}"

    def key_of(self, url: str) -> str:
        prefix = f"dummy://{self.name}/"
        if not url.startswith(prefix):
            raise ValueError(f"not an object of dummy store {self.name}: {url!r}")
        return url[len(prefix) :]

    def save(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        return self.url_for(key)

    def save_if_absent(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> bool:
        self.url_for(key)
        return True  # nothing is ever there

    def replace_if_unchanged(
        self, key: str, expected: bytes, data: bytes, content_type: str = "application/octet-stream"
    ) -> bool:
        self.url_for(key)
        return False  # nothing is there to replace

    def read(self, url: str, limit: int | None = None) -> bytes:
        raise ObjectNotRetained(f"{url}: the dummy storage backend keeps no objects")

    def read_chunks(self, url: str, chunk_size: int = READ_CHUNK_BYTES) -> Iterator[bytes]:
        raise ObjectNotRetained(f"{url}: the dummy storage backend keeps no objects")

    def delete(self, url: str) -> None:
        self.key_of(url)

    def exists(self, url: str) -> bool:
        self.key_of(url)
        return False

    def size(self, url: str) -> int:
        raise ObjectNotRetained(f"{url}: the dummy storage backend keeps no objects")

    def list_keys(self, prefix: str, limit: int, start_after: str = "") -> list[str]:
        check_list_limit(prefix, limit)
        return []  # it keeps nothing

    def presign_put(self, key: str, expires_seconds: int, content_type: str = "") -> str:
        raise NotImplementedError("the dummy storage backend has no presigned URLs")

    def presign_post(self, key: str, expires_seconds: int, max_bytes: int) -> PresignedPost:
        raise NotImplementedError("the dummy storage backend has no presigned uploads")

    def copy(self, src_url: str, dst_key: str) -> str:
        raise ObjectNotRetained(f"{src_url}: the dummy storage backend keeps no objects")

    def presign_get(self, url: str, expires_seconds: int, file_name: str = "") -> str:
        raise ObjectNotRetained(f"{url}: the dummy storage backend keeps no objects")


class BackendFileStore:
    """One named backend, its objects addressed `storage://<backend id>/<key>` (the specification's
    backend-scoped path) over an inner store (an S3-compatible bucket, or the dummy one) that is built on
    first use: a backend's client and credentials are fetched only when a document touches it."""

    def __init__(self, backend_id: str, build: Callable[[], FileStore]) -> None:
        self.backend_id = backend_id
        self._build = build
        self._inner: FileStore | None = None
        self._lock = threading.Lock()

    @property
    def inner(self) -> FileStore:
        with self._lock:
            if self._inner is None:
                self._inner = self._build()
            return self._inner

    def _inner_url(self, url: str) -> str:
        if backend_of(url) != self.backend_id:
            raise CrossBackendOperation(f"{url!r} is not an object of storage backend {self.backend_id!r}")
        return self.inner.url_for(key_in_backend(url, self.backend_id))

    def url_for(self, key: str) -> str:
        return storage_url(self.backend_id, safe_object_key(key))

    def key_of(self, url: str) -> str:
        if backend_of(url) != self.backend_id:
            raise CrossBackendOperation(f"{url!r} is not an object of storage backend {self.backend_id!r}")
        return key_in_backend(url, self.backend_id)

    def save(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        self.inner.save(key, data, content_type)
        return self.url_for(key)

    def save_if_absent(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> bool:
        return self.inner.save_if_absent(key, data, content_type)

    def replace_if_unchanged(
        self, key: str, expected: bytes, data: bytes, content_type: str = "application/octet-stream"
    ) -> bool:
        return self.inner.replace_if_unchanged(key, expected, data, content_type)

    def read(self, url: str, limit: int | None = None) -> bytes:
        return self.inner.read(self._inner_url(url), limit)

    def read_chunks(self, url: str, chunk_size: int = READ_CHUNK_BYTES) -> Iterator[bytes]:
        return self.inner.read_chunks(self._inner_url(url), chunk_size)

    def delete(self, url: str) -> None:
        self.inner.delete(self._inner_url(url))

    def exists(self, url: str) -> bool:
        return self.inner.exists(self._inner_url(url))

    def size(self, url: str) -> int:
        return self.inner.size(self._inner_url(url))

    def list_keys(self, prefix: str, limit: int, start_after: str = "") -> list[str]:
        return self.inner.list_keys(prefix, limit, start_after)

    def presign_put(self, key: str, expires_seconds: int, content_type: str = "") -> str:
        return self.inner.presign_put(key, expires_seconds, content_type)

    def presign_post(self, key: str, expires_seconds: int, max_bytes: int) -> PresignedPost:
        return self.inner.presign_post(key, expires_seconds, max_bytes)

    def copy(self, src_url: str, dst_key: str) -> str:
        """Within the backend only (a server-side copy where it can): another backend's URL is refused."""
        self.inner.copy(self._inner_url(src_url), dst_key)
        return self.url_for(dst_key)

    def presign_get(self, url: str, expires_seconds: int, file_name: str = "") -> str:
        return self.inner.presign_get(self._inner_url(url), expires_seconds, file_name)


class RoutingFileStore:
    """Every backend behind one FileStore (the Storage port): a URL goes to the backend it names
    (`storage://<id>/…`), any other URL to the default backend (`local://`, `s3://`: unchanged). Writes
    by key go to the default backend; `backend(id)` is a named backend's store. An unknown backend id is
    an UnknownStorageBackend, a copy from one backend to another a CrossBackendOperation."""

    def __init__(self, default: FileStore, backends: Mapping[str, FileStore] | None = None) -> None:
        self.default = default
        self.backends = dict(backends or {})

    def backend(self, backend_id: str) -> FileStore:
        if not backend_id:
            return self.default
        store = self.backends.get(backend_id)
        if store is None:
            raise UnknownStorageBackend(f"storage backend {backend_id!r} is not configured here")
        return store

    def backend_ids(self) -> list[str]:
        return sorted(self.backends)

    def _for(self, url: str) -> FileStore:
        return self.backend(backend_of(url))

    def url_for(self, key: str) -> str:
        return self.default.url_for(key)

    def key_of(self, url: str) -> str:
        return self._for(url).key_of(url)

    def save(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        return self.default.save(key, data, content_type)

    def save_if_absent(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> bool:
        return self.default.save_if_absent(key, data, content_type)

    def replace_if_unchanged(
        self, key: str, expected: bytes, data: bytes, content_type: str = "application/octet-stream"
    ) -> bool:
        return self.default.replace_if_unchanged(key, expected, data, content_type)

    def read(self, url: str, limit: int | None = None) -> bytes:
        return self._for(url).read(url, limit)

    def read_chunks(self, url: str, chunk_size: int = READ_CHUNK_BYTES) -> Iterator[bytes]:
        return self._for(url).read_chunks(url, chunk_size)

    def delete(self, url: str) -> None:
        self._for(url).delete(url)

    def exists(self, url: str) -> bool:
        return self._for(url).exists(url)

    def size(self, url: str) -> int:
        return self._for(url).size(url)

    def list_keys(self, prefix: str, limit: int, start_after: str = "") -> list[str]:
        """The default backend's keys (the one `save` writes to)."""
        return self.default.list_keys(prefix, limit, start_after)

    def presign_put(self, key: str, expires_seconds: int, content_type: str = "") -> str:
        return self.default.presign_put(key, expires_seconds, content_type)

    def presign_post(self, key: str, expires_seconds: int, max_bytes: int) -> PresignedPost:
        return self.default.presign_post(key, expires_seconds, max_bytes)

    def copy(self, src_url: str, dst_key: str) -> str:
        """A copy within the source's backend, to `dst_key` there."""
        return self._for(src_url).copy(src_url, dst_key)

    def presign_get(self, url: str, expires_seconds: int, file_name: str = "") -> str:
        return self._for(url).presign_get(url, expires_seconds, file_name)
