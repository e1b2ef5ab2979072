"""FileStore.save_if_absent and replace_if_unchanged on each adapter: a create-if-absent and a
compare-and-swap in one step, so two writers racing for the same key cannot both win (a page range's claim,
services/page_range_store.py)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.adapters.storage import BackendFileStore, DummyFileStore, LocalFileStore, S3FileStore
from chalicelib.ports import FileStore

KEY = "t1/k1/attempt-1.ranges/pages-000000.claim.json"


@pytest.fixture(params=["local", "s3", "memory", "routed backend"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FileStore]:
    if request.param == "local":
        yield LocalFileStore(tmp_path / "files")
    elif request.param == "memory":
        yield MemoryFileStore("files")
    elif request.param == "routed backend":
        yield BackendFileStore("b1", MemoryFileStore)
    else:
        with mock_aws():
            client = boto3.client("s3", region_name="us-east-1")
            client.create_bucket(Bucket="files")
            yield S3FileStore(client, "files")


def test_only_the_first_save_if_absent_creates_the_object(store: FileStore) -> None:
    assert store.save_if_absent(KEY, b"first", "application/json") is True
    assert store.save_if_absent(KEY, b"second", "application/json") is False
    assert store.read(store.url_for(KEY)) == b"first"  # left as it was
    store.delete(store.url_for(KEY))
    assert store.save_if_absent(KEY, b"third") is True and store.read(store.url_for(KEY)) == b"third"


def test_a_replace_needs_the_bytes_it_expects_and_an_object_there(store: FileStore) -> None:
    assert store.replace_if_unchanged(KEY, b"stale", b"mine") is False  # nothing there: nothing created
    assert not store.exists(store.url_for(KEY))
    store.save(KEY, b"stale")
    assert store.replace_if_unchanged(KEY, b"other", b"mine") is False
    assert store.replace_if_unchanged(KEY, b"stale", b"mine", "application/json") is True
    assert store.replace_if_unchanged(KEY, b"stale", b"yours") is False  # it changed: the second taker loses
    assert store.read(store.url_for(KEY)) == b"mine"


def test_unsafe_keys_are_refused_as_on_save(store: FileStore) -> None:
    with pytest.raises(ValueError):
        store.save_if_absent("../escape", b"x")
    with pytest.raises(ValueError):
        store.replace_if_unchanged("../escape", b"x", b"y")


def _race(writers: Sequence[Callable[[], bool]]) -> list[bool]:
    start = threading.Barrier(len(writers))
    results: list[bool] = []
    lock = threading.Lock()

    def run(write: Callable[[], bool]) -> None:
        start.wait(timeout=10)
        won = write()
        with lock:
            results.append(won)

    threads = [threading.Thread(target=run, args=(write,)) for write in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


@pytest.mark.parametrize("kind", ["local", "memory"])
def test_of_many_concurrent_writers_exactly_one_wins(kind: str, tmp_path: Path) -> None:
    """Threads released together (moto serialises its requests, so S3 is left to the tests above)."""
    store: FileStore = LocalFileStore(tmp_path) if kind == "local" else MemoryFileStore()
    creators = [partial(store.save_if_absent, KEY, f"creator {n}".encode()) for n in range(8)]
    assert sorted(_race(creators)) == [False] * 7 + [True]
    held = store.read(store.url_for(KEY))
    takers = [partial(store.replace_if_unchanged, KEY, held, f"taker {n}".encode()) for n in range(8)]
    assert sorted(_race(takers)) == [False] * 7 + [True]
    assert store.read(store.url_for(KEY)).startswith(b"taker ")


def test_the_dummy_backend_keeps_nothing_so_nothing_is_ever_there() -> None:
    store = DummyFileStore()
    assert store.save_if_absent(KEY, b"first") is True and store.save_if_absent(KEY, b"again") is True
    assert store.replace_if_unchanged(KEY, b"first", b"mine") is False


class _ConditionAnswered:
    """An S3(-compatible) client whose server answers a conditional PutObject with `code` (and `status`)."""

    def __init__(self, client: Any, code: str, status: int) -> None:
        self._client = client
        self.exceptions = client.exceptions
        self._error = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}

    def put_object(self, **params: Any) -> Any:
        if "IfNoneMatch" in params or "IfMatch" in params:
            raise self._client.exceptions.ClientError(self._error, "PutObject")
        return self._client.put_object(**params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_a_conflicting_conditional_write_in_flight_loses() -> None:
    """S3's 409 ConditionalRequestConflict: another conditional write to the key was under way and won."""
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="files")
        store = S3FileStore(_ConditionAnswered(client, "ConditionalRequestConflict", 409), "files")
        assert store.save_if_absent(KEY, b"first") is False
        store.save(KEY, b"stale")
        assert store.replace_if_unchanged(KEY, b"stale", b"mine") is False
        assert store.read(store.url_for(KEY)) == b"stale"


def test_a_server_that_refuses_conditions_is_written_as_one_that_ignores_them() -> None:
    """No worse than a plain save: the caller that needs to be the only writer reads the object back."""
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="files")
        store = S3FileStore(_ConditionAnswered(client, "NotImplemented", 501), "files")
        assert store.save_if_absent(KEY, b"first") is True
        assert store.save_if_absent(KEY, b"second") is True
        assert store.read(store.url_for(KEY)) == b"second"
        assert store.replace_if_unchanged(KEY, b"second", b"third") is True
        assert (
            store.replace_if_unchanged(KEY, b"second", b"fourth") is False
        )  # its own comparison still holds
        assert store.read(store.url_for(KEY)) == b"third"
