"""Chunks, in memory."""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from chalicelib.adapters.memory.clock import _ms
from chalicelib.domain.image_info import with_image_fields
from chalicelib.domain.types import (
    Chunk,
    ChunkType,
)

if TYPE_CHECKING:
    pass


class MemoryChunkRepo:
    def __init__(self) -> None:
        self._rows: dict[str, dict[str, Chunk]] = {}  # knowledge id -> chunk id -> chunk
        self._lock = threading.Lock()
        #: chunks handed out by list, list_page and get_many (tests pin how often a stage reads a chunk)
        self.chunks_read = 0

    @staticmethod
    def _stored(chunk: Chunk) -> Chunk:
        return replace(copy.deepcopy(chunk), created_at=_ms(chunk.created_at))

    def list(self, knowledge_id: str) -> list[Chunk]:
        """Parents first, then by sequence (the DynamoDB adapter's order over its chunk-id range key)."""
        with self._lock:
            rows = self._rows.get(knowledge_id, {})
            chunks = [copy.deepcopy(rows[chunk_id]) for chunk_id in sorted(rows)]
            self.chunks_read += len(chunks)
        chunks.sort(key=lambda c: (c.chunk_type != ChunkType.PARENT_TEXT, c.seq))
        return chunks

    def list_page(
        self, knowledge_id: str, *, prefix: str = "", after: str | None = None, limit: int
    ) -> tuple[Sequence[Chunk], str | None]:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        with self._lock:
            rows = self._rows.get(knowledge_id, {})
            ids = sorted(i for i in rows if i.startswith(prefix) and (after is None or i > after))
            chunks = [copy.deepcopy(rows[i]) for i in ids[:limit]]
            self.chunks_read += len(chunks)
        return chunks, (chunks[-1].id if len(ids) > limit else None)

    def get_many(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], Chunk]:
        with self._lock:
            found = {
                (k, c): copy.deepcopy(self._rows[k][c])
                for k, c in dict.fromkeys(keys)
                if c in self._rows.get(k, {})
            }
            self.chunks_read += len(found)
            return found

    def put_many(self, chunks: Sequence[Chunk]) -> None:
        stored = [self._stored(c) for c in chunks]
        with self._lock:
            for chunk in stored:
                self._rows.setdefault(chunk.knowledge_id, {})[chunk.id] = chunk

    def put_unchanged(self, before: Chunk, after: Chunk) -> bool:
        if (after.knowledge_id, after.id) != (before.knowledge_id, before.id):
            raise ValueError("put_unchanged writes the chunk it read")
        stored = self._stored(after)
        with self._lock:
            rows = self._rows.get(before.knowledge_id, {})
            if rows.get(before.id) != before:
                return False
            rows[after.id] = stored
            return True

    def delete_all(self, knowledge_id: str) -> int:
        with self._lock:
            return len(self._rows.pop(knowledge_id, {}))

    def delete_many(self, knowledge_id: str, chunk_ids: Sequence[str]) -> None:
        with self._lock:
            rows = self._rows.get(knowledge_id, {})
            for chunk_id in chunk_ids:
                rows.pop(chunk_id, None)

    def replace_all(self, knowledge_id: str, chunks: Sequence[Chunk], *, prefix: str = "") -> None:
        stored = {c.id: self._stored(c) for c in chunks}
        with self._lock:
            rows = self._rows.get(knowledge_id, {})
            kept = {chunk_id: chunk for chunk_id, chunk in rows.items() if not chunk_id.startswith(prefix)}
            self._rows[knowledge_id] = {**kept, **stored}

    def repoint(self, knowledge_id: str, kb_id: str) -> int:
        with self._lock:  # each row as stored now: only its kb_id changes
            rows = self._rows.get(knowledge_id, {})
            stale = [chunk_id for chunk_id, chunk in rows.items() if chunk.kb_id != kb_id]
            for chunk_id in stale:
                rows[chunk_id] = replace(rows[chunk_id], kb_id=kb_id)
            return len(stale)

    def set_metadata(
        self, knowledge_id: str, chunk_id: str, key: str, value: Any, *, kb_id: str, attempt: int
    ) -> bool:
        with self._lock:
            chunk = self._rows.get(knowledge_id, {}).get(chunk_id)
            if chunk is None or chunk.kb_id != kb_id or chunk.metadata.get("attempt") != attempt:
                return False
            chunk.metadata[key] = copy.deepcopy(value)
            return True

    def merge_image_info(
        self, knowledge_id: str, chunk_id: str, url: str, fields: dict[str, str], *, kb_id: str, attempt: int
    ) -> bool:
        with self._lock:
            chunk = self._rows.get(knowledge_id, {}).get(chunk_id)
            if chunk is None or chunk.kb_id != kb_id or chunk.metadata.get("attempt") != attempt:
                return False
            chunk.image_info = with_image_fields(chunk.image_info, url, fields)
            return True
