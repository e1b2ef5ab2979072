"""`FileStore.read_chunks` on each adapter: the object's bytes in order, in pieces of at most the size asked
for; a missing object is FileNotFoundError (the dummy backend's ObjectNotRetained); an S3 body is closed when
the reader stops early, and a connection broken mid-body is StorageUnavailable, as for `read`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ReadTimeoutError
from moto import mock_aws

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.adapters.storage import (
    BackendFileStore,
    DummyFileStore,
    LocalFileStore,
    RoutingFileStore,
    S3FileStore,
)
from chalicelib.ports import FileStore, ObjectNotRetained
from chalicelib.ports.storage import StorageUnavailable

DATA = bytes(range(256)) * 41  # 10,496 bytes


@pytest.fixture(params=["local", "s3", "memory", "routed backend"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FileStore]:
    if request.param == "local":
        yield LocalFileStore(tmp_path / "files")
    elif request.param == "memory":
        yield MemoryFileStore("files")
    elif request.param == "routed backend":
        yield RoutingFileStore(LocalFileStore(tmp_path), {"b1": BackendFileStore("b1", MemoryFileStore)})
    else:
        with mock_aws():
            client = boto3.client("s3", region_name="us-east-1")
            client.create_bucket(Bucket="files")
            yield S3FileStore(client, "files")


def stored(store: FileStore, data: bytes) -> str:
    if isinstance(store, RoutingFileStore):
        return store.backend("b1").save("t1/k1/parsed.md", data)  # a storage://b1/ URL, routed
    return store.save("t1/k1/parsed.md", data)


@pytest.mark.parametrize("size", [1, 1000, 10_496, 1 << 20])
def test_the_pieces_spell_the_object_each_at_most_the_size_asked(store: FileStore, size: int) -> None:
    url = stored(store, DATA)
    pieces = list(store.read_chunks(url, size))
    assert b"".join(pieces) == DATA and all(0 < len(p) <= size for p in pieces)
    assert len(pieces) == -(-len(DATA) // size)


def test_an_empty_object_has_no_piece_and_a_missing_one_is_not_found(store: FileStore) -> None:
    url = stored(store, b"")
    assert list(store.read_chunks(url)) == []
    store.delete(url)
    with pytest.raises(FileNotFoundError):
        list(store.read_chunks(url))


def test_the_dummy_backend_keeps_nothing_to_read() -> None:
    store = DummyFileStore()
    with pytest.raises(ObjectNotRetained):
        list(store.read_chunks(store.save("t1/k1/parsed.md", DATA)))


class Body:
    """An S3 answer's body that breaks after `pieces` reads, noting each read and its closing."""

    def __init__(self, pieces: int) -> None:
        self.pieces, self.reads, self.closed = pieces, 0, False

    def read(self, amount: int | None = None) -> bytes:
        self.reads += 1
        if self.reads > self.pieces:
            raise ReadTimeoutError(endpoint_url="https://s3.example/REMOTE")
        return b"x" * (amount or 1)

    def close(self) -> None:
        self.closed = True


class Client:
    def __init__(self, body: Body) -> None:
        self.body = body

    def get_object(self, **_: Any) -> dict[str, Any]:
        return {"Body": self.body, "ContentLength": 1 << 30}


def test_an_s3_body_is_closed_when_the_reader_stops_early_and_a_break_is_unavailable() -> None:
    body = Body(pieces=100)
    store = S3FileStore(Client(body), "docs")
    pieces = store.read_chunks(store.url_for("t1/k1/parsed.md"), 10)
    assert next(pieces) == b"x" * 10 and not body.closed
    del pieces  # dropped (as a reader that stops at a table's end drops it)
    assert body.closed and body.reads == 1

    body = Body(pieces=2)
    store = S3FileStore(Client(body), "docs")
    with pytest.raises(StorageUnavailable) as broken:
        list(store.read_chunks(store.url_for("t1/k1/parsed.md"), 10))
    assert body.closed and "REMOTE" not in str(broken.value) and broken.value.__context__ is None
