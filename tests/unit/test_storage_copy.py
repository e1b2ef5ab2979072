"""FileStore.copy on each adapter: the copy is its own object (deleting the source leaves it), a re-run
overwrites, a missing source is FileNotFoundError, and keys are checked as on save."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.adapters.storage import LocalFileStore, S3FileStore
from chalicelib.ports import FileStore


@pytest.fixture(params=["local", "s3", "memory"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FileStore]:
    if request.param == "local":
        yield LocalFileStore(tmp_path / "files")
    elif request.param == "memory":
        yield MemoryFileStore("files")
    else:
        with mock_aws():
            client = boto3.client("s3", region_name="us-east-1")
            client.create_bucket(Bucket="files")
            yield S3FileStore(client, "files")


def test_a_copy_is_its_own_object(store: FileStore) -> None:
    source = store.save("t1/k1/source.md", b"# Notes\n\nfirst", "text/markdown")
    copy = store.copy(source, "t1/k2/source.md")
    assert copy == store.url_for("t1/k2/source.md") and copy != source
    assert store.read(copy) == b"# Notes\n\nfirst" and store.size(copy) == store.size(source)
    store.delete(source)
    assert not store.exists(source) and store.read(copy) == b"# Notes\n\nfirst"
    again = store.save("t1/k1/source.md", b"second")
    assert store.copy(again, "t1/k2/source.md") == copy and store.read(copy) == b"second"  # overwrites


def test_copying_a_missing_object_or_to_an_unsafe_key_fails(store: FileStore) -> None:
    with pytest.raises(FileNotFoundError):
        store.copy(store.url_for("t1/nothing.md"), "t1/k2/x.md")
    source = store.save("t1/k1/a.md", b"a")
    with pytest.raises(ValueError):
        store.copy(source, "../escape.md")
    assert not store.exists(store.url_for("t1/k2/x.md"))
