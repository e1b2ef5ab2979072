"""What the document store holds, listed through the store the functions use (the bucket on S3)."""

from __future__ import annotations

from chalicelib.adapters.storage import BackendFileStore, LocalFileStore, RoutingFileStore, S3FileStore
from chalicelib.ports import FileStore


def stored_keys(files: FileStore, prefix: str) -> list[str]:
    """Every object key starting with `prefix` (e.g. `tenant/knowledge/`), sorted. A missing bucket fails.
    The routing store lists its default backend; a named backend's store lists its bucket."""
    if isinstance(files, RoutingFileStore):
        files = files.default
    if isinstance(files, BackendFileStore):
        files = files.inner
    if isinstance(files, S3FileStore):
        keys: list[str] = []
        pages = files.client.get_paginator("list_objects_v2").paginate(Bucket=files.bucket, Prefix=prefix)
        for page in pages:
            keys += [str(o["Key"]) for o in page.get("Contents", [])]
        return sorted(keys)
    if isinstance(files, LocalFileStore):
        root = files.base / prefix.rsplit("/", 1)[0] if "/" in prefix else files.base
        found = (p.relative_to(files.base).as_posix() for p in root.rglob("*") if p.is_file())
        return sorted(key for key in found if key.startswith(prefix))
    raise TypeError(f"cannot list a {type(files).__name__}")
