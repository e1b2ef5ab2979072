"""FileStore.list_keys pages on from a key (`start_after`, S3 ListObjectsV2's StartAfter) on each adapter:
listing page after page from the last key of each answers every key under the prefix once, in key order,
also past one listing's 1,000 keys (the storage recount lists a large page-range parse's outputs so)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.adapters.storage import BackendFileStore, LocalFileStore, RoutingFileStore, S3FileStore
from chalicelib.ports import FileStore
from chalicelib.ports.storage import MAX_LISTED_KEYS


@pytest.fixture(params=["local", "s3", "memory", "backend", "routing"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FileStore]:
    if request.param == "local":
        yield LocalFileStore(tmp_path / "files")
    elif request.param == "memory":
        yield MemoryFileStore("files")
    elif request.param == "routing":  # lists its default backend
        yield RoutingFileStore(MemoryFileStore("files"), {"other": MemoryFileStore("other")})
    else:
        with mock_aws():
            client = boto3.client("s3", region_name="us-east-1")
            client.create_bucket(Bucket="files")
            s3 = S3FileStore(client, "files")
            yield s3 if request.param == "s3" else BackendFileStore("b1", lambda: s3)


def every_key(store: FileStore, prefix: str, page: int) -> list[str]:
    keys: list[str] = []
    while True:
        listed = store.list_keys(prefix, page, keys[-1] if keys else "")
        keys += listed
        if len(listed) < page:
            return keys


KEYS = [
    "t/k/parsed/attempt-1.images.json",
    "t/k/parsed/attempt-1.md",
    "t/k/parsed/attempt-2.ranges/pages-000000.images.json",
    "t/k/parsed/attempt-2.ranges/pages-000000.md",
    "t/k/parsed/attempt-2.ranges/pages-000050.md",
    "t/k/parsed/attempt-2.ranges/plan.json",
    "t/k/parsed/attempt-2.ranges-x",  # before `attempt-2.ranges/…` in key order: '-' sorts before '/'
    "t/k/parsed/attempt-2.ranges/é.md",  # a key of non-ASCII characters: UTF-8 order is code point order
]


def test_pages_from_the_last_key_answer_every_key_once_in_order(store: FileStore) -> None:
    for key in [*reversed(KEYS), "t/k/parsed-not/x", "t/j/parsed/a.md", "t/l/parsed/b.md"]:
        store.save(key, b"x")
    assert store.list_keys("t/k/parsed/", 10) == sorted(KEYS)
    for page in (1, 2, 3, 7):
        assert every_key(store, "t/k/parsed/", page) == sorted(KEYS), page
    after = sorted(KEYS)[3]
    assert store.list_keys("t/k/parsed/", 10, after) == sorted(KEYS)[4:]  # the keys after it, not it
    assert store.list_keys("t/k/parsed/", 2, after) == sorted(KEYS)[4:6]
    assert store.list_keys("t/k/parsed/", 10, sorted(KEYS)[-1]) == []  # past the last
    assert store.list_keys("t/k/parsed/", 10, "t/a") == sorted(KEYS)  # before the prefix: all of it
    assert store.list_keys("t/k/parsed/", 10, "t/z") == []  # after the prefix: nothing
    assert store.list_keys("t/k/parsed/", 10, "t/k/parsed/attempt-2.ranges/pages-000001") == sorted(KEYS)[5:]


def test_a_prefix_of_more_keys_than_one_listing_is_listed_in_full(store: FileStore) -> None:
    keys = [f"t/k/parsed/attempt-1.ranges/pages-{n:06d}.md" for n in range(MAX_LISTED_KEYS + 5)]
    for key in keys:
        store.save(key, b"x")
    first = store.list_keys("t/k/parsed/", MAX_LISTED_KEYS)
    assert first == keys[:MAX_LISTED_KEYS]  # one listing: full, and short of the rest
    assert store.list_keys("t/k/parsed/", MAX_LISTED_KEYS, first[-1]) == keys[MAX_LISTED_KEYS:]
    assert every_key(store, "t/k/parsed/", MAX_LISTED_KEYS) == keys
