"""Stored objects, in memory."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from chalicelib.domain.storage_keys import safe_object_key
from chalicelib.ports.storage import READ_CHUNK_BYTES, PresignedPost, check_list_limit, check_read_limit

if TYPE_CHECKING:
    pass


class UploadRefused(ValueError):
    """What S3 answers a form upload its policy refuses (400 EntityTooLarge, AccessDenied for another key)."""


class MemoryFileStore:
    """Objects in a dict, addressed `mem://{name}/{key}`. URLs of another store are rejected, as an S3
    store rejects another bucket's; a missing object reads as FileNotFoundError, as `local://` does."""

    def __init__(self, name: str = "files") -> None:
        self.name = name
        self._objects: dict[str, tuple[bytes, str]] = {}
        self._presigned: dict[str, str] = {}  # presigned URL -> key
        self._posts: dict[str, tuple[str, int]] = {}  # a form's policy -> (key, max bytes)
        self._lock = threading.Lock()

    def url_for(self, key: str) -> str:
        return f"mem://{self.name}/{safe_object_key(key)}"

    def key_of(self, url: str) -> str:
        prefix = f"mem://{self.name}/"
        if not url.startswith(prefix):
            raise ValueError(f"not an object of store {self.name}: {url!r}")
        return url[len(prefix) :]

    def save(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> str:
        key = safe_object_key(key)
        with self._lock:
            self._objects[key] = (bytes(data), content_type)
        return self.url_for(key)

    def save_if_absent(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> bool:
        key = safe_object_key(key)
        with self._lock:
            if key in self._objects:
                return False
            self._objects[key] = (bytes(data), content_type)
        return True

    def replace_if_unchanged(
        self, key: str, expected: bytes, data: bytes, content_type: str = "application/octet-stream"
    ) -> bool:
        key = safe_object_key(key)
        with self._lock:
            held = self._objects.get(key)
            if held is None or held[0] != expected:
                return False
            self._objects[key] = (bytes(data), content_type)
        return True

    def read(self, url: str, limit: int | None = None) -> bytes:
        data = self._object(url)[0]
        check_read_limit(url, len(data), limit)
        return data

    def read_chunks(self, url: str, chunk_size: int = READ_CHUNK_BYTES) -> Iterator[bytes]:
        data = self._object(url)[0]
        for start in range(0, len(data), chunk_size):
            yield data[start : start + chunk_size]

    def delete(self, url: str) -> None:
        key = self.key_of(url)
        with self._lock:
            self._objects.pop(key, None)

    def exists(self, url: str) -> bool:
        key = self.key_of(url)
        with self._lock:
            return key in self._objects

    def size(self, url: str) -> int:
        return len(self._object(url)[0])

    def content_type(self, url: str) -> str:
        return self._object(url)[1]

    def _object(self, url: str) -> tuple[bytes, str]:
        key = self.key_of(url)
        with self._lock:
            if key not in self._objects:
                raise FileNotFoundError(url)
            return self._objects[key]

    def keys(self, prefix: str = "") -> list[str]:
        with self._lock:
            return sorted(k for k in self._objects if k.startswith(prefix))

    def list_keys(self, prefix: str, limit: int, start_after: str = "") -> list[str]:
        return [k for k in self.keys(check_list_limit(prefix, limit)) if k > start_after][:limit]

    def presign_put(self, key: str, expires_seconds: int, content_type: str = "") -> str:
        key = safe_object_key(key)
        url = f"https://{self.name}.mem.invalid/{key}?expires={int(time.time()) + expires_seconds}"
        with self._lock:
            self._presigned[url] = key
        return url

    def presign_post(self, key: str, expires_seconds: int, max_bytes: int) -> PresignedPost:
        key = safe_object_key(key)
        policy = f"{key}?expires={int(time.time()) + expires_seconds}&max={max_bytes}"
        with self._lock:
            self._posts[policy] = (key, max_bytes)
        return PresignedPost(url=f"https://{self.name}.mem.invalid/", fields={"key": key, "policy": policy})

    def post_presigned(self, fields: Mapping[str, str], data: bytes) -> str:
        """What a client's form upload (a grant's `fields`, then the file) does, as S3 checks its policy:
        the object is stored under the signed key, unless its body is over the signed size."""
        with self._lock:
            granted = self._posts.get(str(fields.get("policy")))
        if granted is None or granted[0] != fields.get("key"):
            raise UploadRefused(f"no form upload was signed for {fields.get('key')!r}")
        if len(data) > granted[1]:
            raise UploadRefused(f"EntityTooLarge: {len(data)} bytes, the policy allows {granted[1]}")
        return self.save(granted[0], data)

    def copy(self, src_url: str, dst_key: str) -> str:
        data, content_type = self._object(src_url)
        return self.save(dst_key, data, content_type)

    def put_presigned(self, url: str, data: bytes) -> str:
        """What a client's PUT to a presigned URL does: stores the object under the granted key."""
        with self._lock:
            key = self._presigned.get(url)
        if key is None:
            raise PermissionError(f"no presigned grant for {url!r}")
        return self.save(key, data)

    def presign_get(self, url: str, expires_seconds: int, file_name: str = "") -> str:
        key = self.key_of(url)
        signed = f"https://{self.name}.mem.invalid/{key}?expires={int(time.time()) + expires_seconds}&get=1"
        with self._lock:
            self._presigned[signed] = key
        return signed

    def get_presigned(self, url: str) -> bytes:
        """What a client's GET of a presigned URL returns."""
        with self._lock:
            key = self._presigned.get(url)
        if key is None:
            raise PermissionError(f"no presigned grant for {url!r}")
        return self.read(self.url_for(key))


# ---------------------------------------------------------------- queues
