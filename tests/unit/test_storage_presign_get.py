"""FileStore.presign_get on the adapters that can sign (S3, and the memory fake that stands in for it): the
link gives the object's bytes, names the attachment when asked, is signed for the given time, and a missing
grant or another store's URL is refused; `local://` says it cannot sign (the download route then signs a
copy in the bucket)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
import requests
from moto import mock_aws

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.adapters.storage import LocalFileStore, S3FileStore
from chalicelib.ports import FileStore


@pytest.fixture(params=["s3", "memory"])
def store(request: pytest.FixtureRequest) -> Iterator[FileStore]:
    if request.param == "memory":
        yield MemoryFileStore("files")
    else:
        with mock_aws():
            client = boto3.client("s3", region_name="us-east-1")
            client.create_bucket(Bucket="files")
            yield S3FileStore(client, "files")


def _fetch(store: FileStore, url: str) -> tuple[bytes, str]:
    if isinstance(store, MemoryFileStore):
        return store.get_presigned(url), ""
    response = requests.get(url, timeout=10)
    assert response.status_code == 200
    return response.content, response.headers.get("Content-Disposition", "")


def _lifetime(url: str) -> float:
    params = parse_qs(urlsplit(url).query)
    if "X-Amz-Expires" in params:
        return float(params["X-Amz-Expires"][0])
    stamp = params.get("Expires", params.get("expires"))
    assert stamp, url
    return float(stamp[0]) - time.time()


def test_a_signed_link_gives_the_bytes_for_the_given_time(store: FileStore) -> None:
    url = store.save("t1/k1/report.pdf", b"%PDF-1.7 bytes", "application/pdf")
    link = store.presign_get(url, 900, file_name="report.pdf")
    data, disposition = _fetch(store, link)
    assert data == b"%PDF-1.7 bytes"
    if isinstance(store, S3FileStore):
        assert disposition == 'attachment; filename="report.pdf"'
    assert 890 <= _lifetime(link) <= 905
    assert _lifetime(store.presign_get(url, 60)) <= 61


def test_a_link_is_only_for_its_own_store(store: FileStore) -> None:
    with pytest.raises(ValueError):
        store.presign_get("s3://another-bucket/t1/k1/x.md", 60)
    if isinstance(store, MemoryFileStore):
        with pytest.raises(PermissionError):
            store.get_presigned("https://files.mem.invalid/t1/k1/never-granted.md")


def test_local_storage_cannot_sign(tmp_path: Path) -> None:
    local = LocalFileStore(tmp_path / "files")
    url = local.save("t1/k1/a.md", b"a")
    with pytest.raises(NotImplementedError):
        local.presign_get(url, 60)
