"""Issue 27: a document's chunks go to DynamoDB as BatchWriteItem requests of 25, several in flight, and the
items DynamoDB leaves unprocessed are sent again (with a growing, jittered wait once PynamoDB's own immediate
resends are spent) until every chunk is stored; other errors are raised at once."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pynamodb.exceptions import PutError

from chalicelib.adapters.dynamo import build_models
from chalicelib.adapters.dynamo.chunks import BATCH_ITEMS, BATCH_SENDS, DynamoChunkRepo
from chalicelib.domain import metering
from chalicelib.domain.errors import TransientStageError
from chalicelib.domain.types import Chunk
from chalicelib.settings import get_settings


class FlakyTable:
    """A TableConnection stand-in: leaves the last item of the first `stubborn` requests unprocessed."""

    def __init__(self, table: str, stubborn: int = 0, error: Exception | None = None):
        self.table = table
        self.stubborn = stubborn
        self.error = error
        self.lock = threading.Lock()
        self.stored: set[str] = set()
        self.requests = 0
        self.threads: set[str] = set()

    def batch_write_item(self, put_items: Any = None, delete_items: Any = None, **_: Any) -> dict[str, Any]:
        if self.error is not None:
            raise self.error
        items = list(put_items or [])
        with self.lock:
            self.requests += 1
            self.threads.add(threading.current_thread().name)
            left = items[-1:] if self.stubborn > 0 else []
            self.stubborn -= 1 if left else 0
            self.stored.update(item["chunk_id"]["S"] for item in items if item not in left)
        return {"UnprocessedItems": {self.table: [{"PutRequest": {"Item": i}} for i in left]}}


def repo_on(table: FlakyTable, sleeps: list[float]) -> DynamoChunkRepo:
    repo = DynamoChunkRepo(build_models(get_settings()), sleep=sleeps.append, rng=lambda: 1.0)
    repo.model._get_connection = lambda: table  # every batch of this repo's model goes to the fake
    return repo


def chunks(n: int) -> list[Chunk]:
    return [Chunk(f"c{i:05d}", "t1", "kb1", "k1", i, f"text {i}") for i in range(n)]


def table_name() -> str:
    return str(build_models(get_settings()).chunk.Meta.table_name)


def test_every_chunk_is_stored_in_batches_of_25_from_several_threads() -> None:
    table, sleeps = FlakyTable(table_name()), []
    repo_on(table, sleeps).put_many(chunks(10 * BATCH_ITEMS + 3))
    assert table.stored == {c.id for c in chunks(10 * BATCH_ITEMS + 3)}
    assert table.requests == 11 and sleeps == []
    assert len(table.threads) > 1  # in parallel, not one request after another


def test_unprocessed_items_are_sent_again_after_a_wait_once_the_immediate_resends_are_spent() -> None:
    # PynamoDB sends a batch three times without waiting; the fourth unprocessed answer raises PutError,
    # and the repository waits and sends the batch again
    table, sleeps = FlakyTable(table_name(), stubborn=4), []
    repo_on(table, sleeps).put_many(chunks(BATCH_ITEMS))
    assert table.stored == {c.id for c in chunks(BATCH_ITEMS)}
    assert len(sleeps) == 1 and 0 < sleeps[0] <= 2.0


def test_items_left_unprocessed_for_good_fail_the_try_as_transient() -> None:
    table, sleeps = FlakyTable(table_name(), stubborn=10_000), []
    with pytest.raises(TransientStageError, match="unprocessed"):
        repo_on(table, sleeps).put_many(chunks(3))
    assert len(sleeps) == BATCH_SENDS - 1
    assert sleeps == sorted(sleeps)  # the wait grows (rng fixed at its top: the ceiling itself)


def test_an_error_a_resend_does_not_cure_is_raised_at_once() -> None:
    table, sleeps = FlakyTable(table_name(), error=PutError("Failed to batch write items: validation")), []
    with pytest.raises(PutError):
        repo_on(table, sleeps).put_many(chunks(3))
    assert sleeps == []


def test_the_writer_threads_cpu_time_is_the_invocations_work() -> None:
    table = FlakyTable(table_name())
    with metering.metering() as meter:
        repo_on(table, []).put_many(chunks(40 * BATCH_ITEMS))
    assert meter.offloaded_seconds > 0  # serialising 1,000 items on the pool threads is counted
