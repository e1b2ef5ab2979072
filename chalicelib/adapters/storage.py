"""FileStore providers: `local://` (a directory; the local default) and `s3://` (S3, or moto locally)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from chalicelib.domain.storage_keys import safe_object_key


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

    def read(self, url: str) -> bytes:
        return self._path(self.key_of(url)).read_bytes()

    def delete(self, url: str) -> None:
        self._path(self.key_of(url)).unlink(missing_ok=True)

    def exists(self, url: str) -> bool:
        return self._path(self.key_of(url)).is_file()

    def size(self, url: str) -> int:
        return self._path(self.key_of(url)).stat().st_size

    def presign_put(self, key: str, expires_seconds: int, content_type: str = "") -> str:
        raise NotImplementedError("local:// storage has no presigned URLs; uploads stage in the S3 bucket")

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


class S3FileStore:
    """Objects of one bucket. A missing object raises FileNotFoundError, as `local://` does (callers tell a
    gone source, a permanent error, from S3 throttling or 5xx, which stay ClientErrors: transient)."""

    def __init__(self, client: Any, bucket: str):
        self.client = client
        self.bucket = bucket

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
        self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)
        return self.url_for(key)

    def read(self, url: str) -> bytes:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self.key_of(url))["Body"]
        except self.client.exceptions.ClientError as error:
            if _missing(error):
                raise FileNotFoundError(url) from error
            raise
        return bytes(body.read())

    def delete(self, url: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self.key_of(url))

    def exists(self, url: str) -> bool:
        return self._head(url) is not None

    def size(self, url: str) -> int:
        head = self._head(url)
        if head is None:
            raise FileNotFoundError(url)
        return int(head["ContentLength"])

    def _head(self, url: str) -> dict[str, Any] | None:
        try:
            return dict(self.client.head_object(Bucket=self.bucket, Key=self.key_of(url)))
        except self.client.exceptions.ClientError as error:
            if _missing(error):
                return None
            raise

    def presign_put(self, key: str, expires_seconds: int, content_type: str = "") -> str:
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": safe_object_key(key)}
        if content_type:
            params["ContentType"] = content_type
        return str(self.client.generate_presigned_url("put_object", Params=params, ExpiresIn=expires_seconds))

    def copy(self, src_url: str, dst_key: str) -> str:
        """A server-side CopyObject (no bytes through the function) within the bucket."""
        key = safe_object_key(dst_key)
        source = {"Bucket": self.bucket, "Key": self.key_of(src_url)}
        try:
            self.client.copy_object(Bucket=self.bucket, Key=key, CopySource=source)
        except self.client.exceptions.ClientError as error:
            if _missing(error):
                raise FileNotFoundError(src_url) from error
            raise
        return self.url_for(key)

    def presign_get(self, url: str, expires_seconds: int, file_name: str = "") -> str:
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": self.key_of(url)}
        if file_name:
            params["ResponseContentDisposition"] = f'attachment; filename="{file_name}"'
        return str(self.client.generate_presigned_url("get_object", Params=params, ExpiresIn=expires_seconds))
