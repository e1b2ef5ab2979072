"""FileStore.read of a missing object is FileNotFoundError on every adapter (the port's contract): on S3
it was botocore's NoSuchKey, which no caller catches, so e.g. deleting a document that never had a page
range plan failed its delete task on every try. Other S3 errors stay ClientErrors (transient)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber
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
        with pytest.raises(ClientError) as raised:
            store.read(store.url_for("t1/k1/a.md"))
    assert not isinstance(raised.value, FileNotFoundError)
