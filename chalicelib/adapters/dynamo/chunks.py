"""Chunks in DynamoDB."""

from __future__ import annotations

import builtins
import random
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any, TypeVar

from pynamodb.exceptions import DoesNotExist, PutError

from chalicelib.adapters.aws_errors import TRANSIENT_CODES  # what a resend cures; the rest raises
from chalicelib.adapters.dynamo.tables import Models, _condition_failed
from chalicelib.domain import metering
from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.errors import TransientStageError
from chalicelib.domain.image_info import with_image_fields
from chalicelib.domain.types import (
    Chunk,
    ChunkType,
)


def chunk_to_body(chunk: Chunk) -> dict[str, Any]:
    body = asdict(chunk)
    body["created_at"] = to_iso(chunk.created_at)
    return body


def chunk_from_body(body: Mapping[str, Any]) -> Chunk:
    data = dict(body)
    data["chunk_type"] = ChunkType(data.get("chunk_type", "text"))
    data["created_at"] = from_iso(data["created_at"])
    return Chunk(**data)


#: items per BatchWriteItem (DynamoDB's limit) and requests in flight at once: a 16,000-chunk document is
#: 640 requests, written eight at a time instead of one after another (issue 27)
BATCH_ITEMS = 25
WRITERS = 8
#: sends of one batch whose items DynamoDB leaves unprocessed (throttling, a hot partition), with full-jitter
#: backoff between them, before the stage's own retry takes over
BATCH_SENDS = 6
BACKOFF_BASE_SECONDS = 0.05
BACKOFF_MAX_SECONDS = 2.0
#: reads and conditional puts of one metadata change (or repoint) while other writes keep changing the chunk
METADATA_TRIES = 3

_Job = TypeVar("_Job")
_Done = TypeVar("_Done")


class DynamoChunkRepo:
    def __init__(
        self,
        models: Models,
        writers: int = WRITERS,
        sleep: Callable[[float], None] = time.sleep,
        rng: Callable[[], float] = random.random,
    ):
        self.model = models.chunk
        self.writers = max(1, writers)
        self.sleep = sleep
        self.rng = rng

    def _commit(self, group: Sequence[tuple[bool, Any]]) -> None:
        """One BatchWriteItem of at most 25 puts/deletes. PynamoDB resends the items DynamoDB leaves
        unprocessed straight away (no wait, three sends); when some are still left, or the request is
        throttled, the batch is sent again after a jittered, growing wait (a put or delete of the same key
        twice is harmless), and after BATCH_SENDS the stage's retry takes over."""
        for send in range(BATCH_SENDS):
            try:
                with self.model.batch_write() as batch:
                    for save, value in group:
                        if save:
                            batch.save(self.model(value.knowledge_id, value.id, body=chunk_to_body(value)))
                        else:
                            batch.delete(value)
                return
            except PutError as error:
                left = getattr(batch, "failed_operations", None)
                if not left and error.cause_response_code not in TRANSIENT_CODES:
                    raise
                if send + 1 == BATCH_SENDS:
                    raise TransientStageError(  # its code alone: the message is AWS's text
                        f"DynamoDB left chunk writes unprocessed after {BATCH_SENDS} sends "
                        f"({error.cause_response_code or type(error).__name__})"
                    ) from error
                ceiling = min(BACKOFF_MAX_SECONDS, BACKOFF_BASE_SECONDS * 2**send)
                self.sleep(self.rng() * ceiling)

    def _write(self, saves: Sequence[Chunk], deletes: Sequence[Any] = ()) -> None:
        """BatchWriteItem requests of 25 items, up to `writers` at once, unprocessed items sent again
        (`_commit`); a retried stage rewrites the same rows."""
        ops: builtins.list[tuple[bool, Any]] = [(False, item) for item in deletes]
        ops += [(True, chunk) for chunk in saves]
        self._fan_out(self._commit, [ops[i : i + BATCH_ITEMS] for i in range(0, len(ops), BATCH_ITEMS)])

    def _fan_out(self, work: Callable[[_Job], _Done], jobs: Sequence[_Job]) -> builtins.list[_Done]:
        """`work` done on each job, up to `writers` at once; the answers in the jobs' order."""
        if len(jobs) <= 1 or self.writers == 1:
            return [work(job) for job in jobs]
        with ThreadPoolExecutor(
            max_workers=min(self.writers, len(jobs)), thread_name_prefix="chunks"
        ) as pool:
            # each job in the invocation's context (its meter), its thread's CPU time counted as its work
            futures = [pool.submit(metering.thread_work(work), job) for job in jobs]
            return [future.result() for future in futures]

    def _items(self, knowledge_id: str, prefix: str = "") -> list[Any]:
        condition = self.model.chunk_id.startswith(prefix) if prefix else None
        return list(self.model.query(knowledge_id, range_key_condition=condition, consistent_read=True))

    def list(self, knowledge_id: str) -> list[Chunk]:
        chunks = [chunk_from_body(item.body) for item in self._items(knowledge_id)]
        chunks.sort(key=lambda c: (c.chunk_type != ChunkType.PARENT_TEXT, c.seq))
        return chunks

    def list_page(
        self, knowledge_id: str, *, prefix: str = "", after: str | None = None, limit: int
    ) -> tuple[Sequence[Chunk], str | None]:
        """One Query of at most limit + 1 items (the extra one only says whether a next page exists)."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        key = self.model.chunk_id
        # One condition on the range key: past the cursor, or the prefix's range on the first page. Past
        # the cursor the Query may run on beyond the prefix: the first id outside it ends the listing.
        condition = key > after if after is not None else key.startswith(prefix) if prefix else None
        items = self.model.query(
            knowledge_id,
            range_key_condition=condition,
            consistent_read=True,
            limit=limit + 1,
            page_size=limit + 1,
        )
        chunks: builtins.list[Chunk] = []
        for item in items:
            if not item.chunk_id.startswith(prefix):
                break
            chunks.append(chunk_from_body(item.body))
        more = len(chunks) > limit
        chunks = chunks[:limit]
        return chunks, (chunks[-1].id if more else None)

    def get_many(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Chunk]:
        items = self.model.batch_get(list(dict.fromkeys(keys)))
        return {(item.knowledge_id, item.chunk_id): chunk_from_body(item.body) for item in items}

    def put_many(self, chunks: Sequence[Chunk]) -> None:
        self._write(chunks)

    def put_unchanged(self, before: Chunk, after: Chunk) -> bool:
        """A put conditional on the body read (`_put_changed`), while that body is still `before`."""
        if (after.knowledge_id, after.id) != (before.knowledge_id, before.id):
            raise ValueError("put_unchanged writes the chunk it read")
        body = chunk_to_body(after)

        def unchanged(read: dict[str, Any]) -> dict[str, Any] | None:
            return body if chunk_from_body(read) == before else None

        return self._put_changed(before.knowledge_id, before.id, unchanged, "it was edited")

    def delete_all(self, knowledge_id: str) -> int:
        items = self._items(knowledge_id)
        self._write((), items)
        return len(items)

    def delete_many(self, knowledge_id: str, chunk_ids: Sequence[str]) -> None:
        self._write((), [self.model(knowledge_id, chunk_id) for chunk_id in dict.fromkeys(chunk_ids)])

    def replace_all(self, knowledge_id: str, chunks: Sequence[Chunk], *, prefix: str = "") -> None:
        keep = {c.id for c in chunks}
        stale = [item for item in self._items(knowledge_id, prefix) if item.chunk_id not in keep]
        self._write(chunks, stale)

    def repoint(self, knowledge_id: str, kb_id: str) -> int:
        """Each row of another knowledge base put again with `kb_id`, conditional on its body as read (an
        edit written in between fails it, and it is tried again on what is stored then), up to `writers`
        puts at once."""
        stale = [item for item in self._items(knowledge_id) if item.body["kb_id"] != kb_id]

        def repointed(read: dict[str, Any]) -> dict[str, Any] | None:
            return None if read["kb_id"] == kb_id else {**read, "kb_id": kb_id}

        def repoint_one(item: Any) -> bool:
            return self._put_changed(item.knowledge_id, item.chunk_id, repointed, "it was moved", item.body)

        return sum(self._fan_out(repoint_one, stale))

    def _put_changed(
        self,
        knowledge_id: str,
        chunk_id: str,
        change: Callable[[dict[str, Any]], dict[str, Any] | None],
        doing: str,
        read: dict[str, Any] | None = None,
    ) -> bool:
        """The chunk's body put as `change` makes it from the body read (None: nothing to do), conditional on
        that body (its JSON text, written by the same encoder): a write in between (an edit, a move, a
        delete) fails it, and it is tried again on what is stored then. `read`: a body the caller read
        already. At most METADATA_TRIES reads and as many puts; True without a put when the change is there
        already; False: the chunk is gone, or nothing to do."""
        m = self.model
        reads = puts = 0
        while True:
            if read is None:
                if reads == METADATA_TRIES:
                    break
                reads += 1
                try:
                    read = m.get(knowledge_id, chunk_id, consistent_read=True).body
                except DoesNotExist:
                    return False
            body = change(read)
            if body is None:
                return False
            if body == read:  # the change is there already (a redelivery): nothing to put
                return True
            if puts == METADATA_TRIES:
                break
            puts += 1
            try:
                m(knowledge_id, chunk_id, body=body).save(condition=m.body == read)
                return True
            except PutError as error:
                if not _condition_failed(error):
                    raise
            read = None
        raise TransientStageError(f"chunk {chunk_id} kept changing while {doing}")

    def set_metadata(
        self, knowledge_id: str, chunk_id: str, key: str, value: Any, *, kb_id: str, attempt: int
    ) -> bool:
        """Read, then a put conditional on the body read (`_put_changed`), while the chunk is still in `kb_id`
        at `attempt`."""

        def with_value(read: dict[str, Any]) -> dict[str, Any] | None:
            stored = chunk_from_body(read)
            if stored.kb_id != kb_id or stored.metadata.get("attempt") != attempt:
                return None
            return {**read, "metadata": {**stored.metadata, key: value}}

        return self._put_changed(knowledge_id, chunk_id, with_value, "its metadata was set")

    def merge_image_info(
        self, knowledge_id: str, chunk_id: str, url: str, fields: dict[str, str], *, kb_id: str, attempt: int
    ) -> bool:
        """As `set_metadata`: another image's merge into the same chunk in between fails the put, which is
        tried again on the body stored then, so neither is lost."""

        def merged(read: dict[str, Any]) -> dict[str, Any] | None:
            stored = chunk_from_body(read)
            if stored.kb_id != kb_id or stored.metadata.get("attempt") != attempt:
                return None
            return {**read, "image_info": with_image_fields(stored.image_info, url, fields)}

        return self._put_changed(knowledge_id, chunk_id, merged, "its images were described")


# ---------------------------------------------------------------- tasks
