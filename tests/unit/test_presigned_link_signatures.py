"""Presigned links of the files bucket and of a named backend are Signature V4, on the bucket's regional host.

botocore presigns S3 links with Signature V2 in most regions unless told otherwise: buckets made since June
2020 refuse V2, and V2 signs the Content-Type header, which a browser adds to the console's upload (403
SignatureDoesNotMatch). A link on the global host is redirected (307) for a new bucket's first day, and a
browser's CORS preflight does not follow a redirect."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest

from chalicelib.adapters.storage import S3FileStore
from chalicelib.adapters.storage_backends import s3_compatible_client
from chalicelib.settings import StorageBackendConfig


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    # the suite points botocore at the local stack through these: a link on AWS is what is checked here
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)


def _files_client(region: str, endpoint_url: str) -> object:
    """A new files-bucket client as the composition root makes it (not the process's cached one)."""
    from chalicelib.bootstrap import _shared_client

    return _shared_client.__wrapped__("s3", region, endpoint_url)


def _signed_v4_on(url: str, host: str) -> None:
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    assert query.get("X-Amz-Algorithm") == ["AWS4-HMAC-SHA256"], url
    assert "Signature" not in query and "AWSAccessKeyId" not in query
    assert parts.hostname == host


@pytest.mark.parametrize("region", ["us-west-2", "eu-west-1", "ap-southeast-1"])
def test_the_files_buckets_links_are_v4_on_the_regional_host(region: str) -> None:
    store = S3FileStore(_files_client(region, ""), "weknora-files")
    host = f"weknora-files.s3.{region}.amazonaws.com"
    _signed_v4_on(store.presign_put("uploads/t/a.pdf", 300), host)
    _signed_v4_on(store.presign_get("s3://weknora-files/parsed/a.md", 300), host)
    post = store.presign_post("uploads/t/a.pdf", 300, 10)
    assert post.fields["x-amz-algorithm"] == "AWS4-HMAC-SHA256"
    assert urlsplit(post.url).hostname == host


def test_the_files_bucket_keeps_path_style_on_a_local_endpoint() -> None:
    store = S3FileStore(_files_client("us-east-1", "http://127.0.0.1:5000"), "weknora-files")
    url = store.presign_put("uploads/t/a.pdf", 300)
    assert url.startswith("http://127.0.0.1:5000/weknora-files/uploads/t/a.pdf?")
    assert parse_qs(urlsplit(url).query)["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]


def test_a_backends_links_are_v4() -> None:
    config = StorageBackendConfig(id="b", provider="s3", bucket="other-bucket", region="eu-west-1")
    store = S3FileStore(s3_compatible_client(config, "us-east-1", None), "other-bucket")
    _signed_v4_on(store.presign_put("uploads/t/a.pdf", 300), "other-bucket.s3.eu-west-1.amazonaws.com")
