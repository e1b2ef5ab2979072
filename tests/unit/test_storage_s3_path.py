"""What the S3 path got wrong, on every FileStore adapter.

- read of a missing object is FileNotFoundError (the port's contract): on S3 it was botocore's NoSuchKey,
  which no caller catches, so e.g. deleting a document that never had a page range plan failed its delete
  task on every try. Other S3 errors are the port's StorageUnavailable (transient).
- a key is taken back from its URL whole: `#` and `?` (kept in presigned upload keys, which carry the file
  name) were cut off by URL parsing, so the uploaded object looked missing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.adapters.storage import LocalFileStore, S3FileStore
from chalicelib.ports import FileStore
from chalicelib.ports.storage import StorageUnavailable


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


def test_reading_a_missing_object_is_file_not_found(store: FileStore) -> None:
    with pytest.raises(FileNotFoundError):
        store.read(store.url_for("t1/k1/parsed/attempt-1.md"))
    url = store.save("t1/k1/a.md", b"a")
    store.delete(url)
    with pytest.raises(FileNotFoundError):
        store.read(url)


def test_an_s3_failure_other_than_a_missing_key_is_not_file_not_found() -> None:
    client = boto3.client("s3", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    store = S3FileStore(client, "files")
    with Stubber(client) as stub:
        stub.add_client_error("get_object", service_error_code="SlowDown", http_status_code=503)
        with pytest.raises(StorageUnavailable) as raised:
            store.read(store.url_for("t1/k1/a.md"))
    assert not isinstance(raised.value, FileNotFoundError)


@pytest.mark.parametrize("name", ["notes #1.md", "a?b.md", "50% off.md", "a;b=c.md", "x+y.md"])
def test_a_key_comes_back_whole_from_its_url(store: FileStore, name: str) -> None:
    key = f"uploads/t1/kb1/k1/{name}"
    url = store.save(key, b"body")
    assert store.key_of(url) == key
    assert store.exists(url) and store.read(url) == b"body" and store.size(url) == 4
    store.delete(url)
    assert not store.exists(url)


def test_a_url_of_another_bucket_is_refused() -> None:
    store = S3FileStore(boto3.client("s3", region_name="us-east-1"), "files")
    for url in ("s3://other/t1/a.md", "s3://files-other/t1/a.md", "local://t1/a.md", "s3://files"):
        with pytest.raises(ValueError):
            store.key_of(url)
