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

from chalicelib.adapters import storage
from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.adapters.storage import BackendFileStore, DummyFileStore, LocalFileStore, S3FileStore
from chalicelib.ports import FileStore
from chalicelib.ports.storage import StorageUnavailable

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


class _ConflictFirst:
    """S3 answers the first `conflicts` conditional PutObjects 409 ConditionalRequestConflict (another write
    of the key under way), after running `meanwhile` (what that other write does), then answers as S3."""

    def __init__(self, client: Any, conflicts: int, meanwhile: Callable[[], object] = lambda: None) -> None:
        self._client = client
        self.exceptions = client.exceptions
        self.conflicts = conflicts
        self.meanwhile = meanwhile
        self.conditional_puts = 0

    def put_object(self, **params: Any) -> Any:
        if "IfNoneMatch" in params or "IfMatch" in params:
            self.conditional_puts += 1
            if self.conditional_puts <= self.conflicts:
                self.meanwhile()
                error = {
                    "Error": {"Code": "ConditionalRequestConflict"},
                    "ResponseMetadata": {"HTTPStatusCode": 409},
                }
                raise self._client.exceptions.ClientError(error, "PutObject")
        return self._client.put_object(**params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@pytest.fixture
def s3_client(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setattr(storage, "CONFLICT_RETRY_SECONDS", 0, raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="files")
        yield client


def test_a_conflict_is_not_a_loss_the_write_is_tried_again(s3_client: Any) -> None:
    """S3's 409: a conflicting write was under way, not won; if it fails, this write's retry takes the key
    (before, the claim was refused and nobody held it)."""
    conflicted = _ConflictFirst(s3_client, conflicts=1)
    store = S3FileStore(conflicted, "files")
    assert store.save_if_absent(KEY, b"first") is True
    assert conflicted.conditional_puts == 2
    assert store.read(store.url_for(KEY)) == b"first"
    conflicted.conflicts = 3
    assert store.replace_if_unchanged(KEY, b"first", b"mine") is True
    assert store.read(store.url_for(KEY)) == b"mine"


def test_a_conflicting_write_that_won_makes_the_retry_lose(s3_client: Any) -> None:
    """The other write landed during the 409: the retry's condition fails (412), as a plain loss."""
    plain = S3FileStore(s3_client, "files")
    store = S3FileStore(_ConflictFirst(s3_client, 1, lambda: plain.save(KEY, b"theirs")), "files")
    assert store.save_if_absent(KEY, b"mine") is False
    assert store.read(store.url_for(KEY)) == b"theirs"
    store = S3FileStore(_ConflictFirst(s3_client, 1, lambda: plain.save(KEY, b"changed")), "files")
    assert store.replace_if_unchanged(KEY, b"theirs", b"mine") is False
    assert store.read(store.url_for(KEY)) == b"changed"


def test_a_conflict_that_outlasts_the_retry_is_transient(s3_client: Any) -> None:
    """Still 409 on the second try: StorageUnavailable (the stage's message is retried), nothing written."""
    conflicted = _ConflictFirst(s3_client, conflicts=100)
    store = S3FileStore(conflicted, "files")
    with pytest.raises(StorageUnavailable):
        store.save_if_absent(KEY, b"first")
    assert conflicted.conditional_puts == 2
    assert not store.exists(store.url_for(KEY))
    store.save(KEY, b"stale")
    with pytest.raises(StorageUnavailable):
        store.replace_if_unchanged(KEY, b"stale", b"mine")
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
