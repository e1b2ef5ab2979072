"""FileStore.presign_post (the FAQ import's upload form): on S3 a policy that names the one key and bounds the
body (`content-length-range`, which S3 enforces and moto does not), that a form POST with `requests` (the
CLI's `put_presigned`) stores under that key; the memory fake refuses what S3 would; `local://` and `dummy`
say they cannot sign; the backend and routing stores hand it to their store."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.adapters.memory.files import UploadRefused
from chalicelib.adapters.storage import (
    BackendFileStore,
    DummyFileStore,
    LocalFileStore,
    RoutingFileStore,
    S3FileStore,
)
from chalicelib.local.cli.client import ApiClient

KEY = "faq-imports/t1/kb1/uploads/0123456789abcdef0123456789abcdef.csv"


@pytest.fixture
def s3() -> Iterator[S3FileStore]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="files")
        yield S3FileStore(client, "files")


def test_the_s3_form_names_its_key_and_bounds_the_body(s3: S3FileStore, tmp_path: Path) -> None:
    form = s3.presign_post(KEY, 600, 1000)
    assert form.fields["key"] == KEY and "files" in form.url
    policy = json.loads(base64.b64decode(form.fields["policy"]))
    assert ["content-length-range", 0, 1000] in policy["conditions"]
    assert {"key": KEY} in policy["conditions"]  # exactly this key, not a prefix
    path = tmp_path / "faq.csv"
    path.write_bytes(b"question,answers\nq,a\n")
    # the CLI's upload of a grant the FAQ upload URL answers
    ApiClient.put_presigned({"method": "POST", "url": form.url, "fields": form.fields}, path)
    assert s3.read(s3.url_for(KEY)) == path.read_bytes()


def test_the_memory_fake_refuses_what_s3_would() -> None:
    store = MemoryFileStore("inbox")
    form = store.presign_post(KEY, 600, 10)
    with pytest.raises(UploadRefused, match="EntityTooLarge"):
        store.post_presigned(form.fields, b"x" * 11)
    with pytest.raises(UploadRefused):
        store.post_presigned({**form.fields, "key": KEY + ".other"}, b"x")
    assert store.keys() == []
    assert store.read(store.post_presigned(form.fields, b"x" * 10)) == b"x" * 10


def test_stores_that_cannot_sign_say_so_and_the_wrappers_hand_it_on(tmp_path: Path) -> None:
    for store in (LocalFileStore(tmp_path), DummyFileStore()):
        with pytest.raises(NotImplementedError):
            store.presign_post(KEY, 600, 10)
    inner = MemoryFileStore("inbox")
    for wrapper in (BackendFileStore("b1", lambda: inner), RoutingFileStore(inner)):
        form = wrapper.presign_post(KEY, 600, 10)
        assert inner.read(inner.post_presigned(form.fields, b"ok")) == b"ok"
