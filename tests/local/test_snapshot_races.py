"""Issue 24, defect 13: `make run` died when its periodic snapshot raced a delete (an object listed, then
deleted, then read: NoSuchKey). Anything that vanishes between a list and a read is skipped, and no error of
a periodic snapshot stops the stack."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests
from botocore.exceptions import BotoCoreError

from chalicelib.local.moto_server import MotoServer
from chalicelib.local.snapshot import MotoSnapshot

RACED = "snapshot-race"


class _DeletesBeforeRead:
    """An S3 client whose every `get_object` finds its object deleted a moment before (the race)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.exceptions = real.exceptions

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def get_object(self, **kwargs: Any) -> Any:
        if kwargs["Bucket"] == RACED:
            self.real.delete_object(**kwargs)
        return self.real.get_object(**kwargs)


class _RacingSnapshot(MotoSnapshot):
    def _client(self, service: str) -> Any:
        client = super()._client(service)
        return _DeletesBeforeRead(client) if service == "s3" else client


@pytest.fixture
def bucket(moto_server: MotoServer) -> Any:
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=moto_server.url)
    name = RACED
    s3.create_bucket(Bucket=name)
    s3.put_object(Bucket=name, Key="kept-before.txt", Body=b"x")
    yield s3, name
    for entry in s3.list_objects_v2(Bucket=name).get("Contents", []):
        s3.delete_object(Bucket=name, Key=entry["Key"])
    s3.delete_bucket(Bucket=name)


def test_an_object_deleted_between_the_listing_and_the_read_is_skipped(
    moto_server: MotoServer, bucket: Any, tmp_path: Path
) -> None:
    s3, name = bucket
    racing = _RacingSnapshot(tmp_path, moto_server.url)
    racing.save()
    assert racing.exists()
    s3.put_object(Bucket=name, Key="after.txt", Body=b"y")
    MotoSnapshot(tmp_path, moto_server.url).save()  # the next snapshot reads what is there
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        saved = {key for (key,) in db.execute("SELECT key FROM objects WHERE bucket = ?", (name,))}
    assert saved == {"after.txt"}


def test_a_periodic_snapshot_that_fails_is_reported_and_the_stack_goes_on(tmp_path: Path) -> None:
    gone = MotoSnapshot(tmp_path, "http://127.0.0.1:9")  # nothing listens: every call fails to connect
    # no endpoint (or, in a bare environment, no credentials); the change log is asked first
    with pytest.raises((BotoCoreError, requests.ConnectionError)):
        gone.save()
    assert gone.save_while_running() is None
