"""Wiki ops and pages, in memory."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator, Sequence

from chalicelib.domain.item_limits import ITEM_MAX_BYTES, WIKI_INDEX_PART_BYTES, item_size, split_json_text
from chalicelib.ports import (
    WikiOp,
    WikiPageRecord,
)
from chalicelib.ports.wiki import PagePosition, page_window, parts_holding


class MemoryWikiRepo:
    def __init__(self) -> None:
        self._ops: dict[
            tuple[str, str], tuple[WikiOp, str, float]
        ] = {}  # (kb, knowledge) -> (op, status, at)
        self._pages: dict[tuple[str, str], list[WikiPageRecord]] = {}
        self._index: dict[str, list[str]] = {}  # kb -> the index's parts, an item each in the table
        self._heartbeats: dict[str, float] = {}  # kb -> when its ops were last heartbeaten
        self._lock = threading.Lock()
        #: page records read, as the table's Query would read them (for tests)
        self.records_read = 0
        #: characters of the index read (for tests)
        self.index_chars_read = 0

    def put_op(self, op: WikiOp) -> None:
        with self._lock:
            current = self._ops.get((op.kb_id, op.knowledge_id))
            if current is None or current[0].attempt <= op.attempt:
                self._ops[(op.kb_id, op.knowledge_id)] = (copy.deepcopy(op), "pending", 0.0)

    def claim_ops(self, kb_id: str, limit: int, stale_after_seconds: int) -> list[WikiOp]:
        now = time.time()
        claimed: list[WikiOp] = []
        with self._lock:
            for key, (op, status, at) in self._ops.items():
                if len(claimed) >= limit:
                    break
                if key[0] != kb_id or (status == "running" and at > now - stale_after_seconds):
                    continue
                self._ops[key] = (op, "running", now)
                claimed.append(copy.deepcopy(op))
        return claimed

    def pending(self, kb_id: str) -> int:
        with self._lock:
            return sum(
                1 for (kb, _), (_, status, _) in self._ops.items() if kb == kb_id and status == "pending"
            )

    def ops(self, kb_id: str) -> list[WikiOp]:
        with self._lock:
            return [copy.deepcopy(op) for (kb, _), (op, _, _) in self._ops.items() if kb == kb_id]

    def heartbeat_due(self, kb_id: str, every_seconds: int) -> bool:
        now = time.time()
        with self._lock:
            if kb_id in self._heartbeats and self._heartbeats[kb_id] > now - every_seconds:
                return False
            self._heartbeats[kb_id] = now
            return True

    def finish_op(self, kb_id: str, knowledge_id: str, attempt: int) -> None:
        with self._lock:
            current = self._ops.get((kb_id, knowledge_id))
            if current is not None and current[0].attempt == attempt:
                del self._ops[(kb_id, knowledge_id)]

    def release_op(self, kb_id: str, knowledge_id: str, attempt: int) -> None:
        with self._lock:
            current = self._ops.get((kb_id, knowledge_id))
            if current is not None and current[0].attempt == attempt:
                self._ops[(kb_id, knowledge_id)] = (current[0], "pending", 0.0)

    def put_pages(self, kb_id: str, knowledge_id: str, pages: Sequence[WikiPageRecord]) -> None:
        with self._lock:
            self._pages[(kb_id, knowledge_id)] = [copy.deepcopy(p) for p in pages]

    def delete_pages(self, kb_id: str, knowledge_id: str) -> int:
        with self._lock:
            return len(self._pages.pop((kb_id, knowledge_id), []))

    def delete_kb(self, kb_id: str) -> None:
        with self._lock:
            self._ops = {key: op for key, op in self._ops.items() if key[0] != kb_id}
            self._pages = {key: pages for key, pages in self._pages.items() if key[0] != kb_id}
            self._index.pop(kb_id, None)
            self._heartbeats.pop(kb_id, None)

    def pages(self, kb_id: str) -> list[WikiPageRecord]:
        with self._lock:
            found = [copy.deepcopy(p) for (kb, _), pages in self._pages.items() if kb == kb_id for p in pages]
            self.records_read += len(found)
            return found

    def pages_after(
        self, kb_id: str, after: PagePosition | None, limit: int
    ) -> tuple[list[WikiPageRecord], bool]:
        with self._lock:  # documents in the table's key order, from the cursor's document on
            owners = sorted(k for kb, k in self._pages if kb == kb_id and (after is None or k >= after[0]))
            return page_window(self._records_of(kb_id, owners), after, limit)

    def _records_of(self, kb_id: str, owners: Sequence[str]) -> Iterator[WikiPageRecord]:
        for owner in owners:
            for record in self._pages[(kb_id, owner)]:
                self.records_read += 1
                yield copy.deepcopy(record)

    def put_index(self, kb_id: str, markdown: str) -> None:
        parts = split_json_text(markdown, WIKI_INDEX_PART_BYTES)
        for n, part in enumerate(parts):  # DynamoDB refuses an item past 400 KB: so does the fake
            if (
                item_size([("kb_id", kb_id), ("key", f"index#{n:04d}"), ("body", {"markdown": part})])
                > ITEM_MAX_BYTES
            ):
                raise ValueError("a wiki index item is larger than DynamoDB's 400 KB")
        with self._lock:
            self._index[kb_id] = parts

    def get_index(self, kb_id: str) -> str | None:
        with self._lock:
            parts = self._index.get(kb_id)
            if parts is None:
                return None
            self.index_chars_read += sum(len(part) for part in parts)
            return "".join(parts)

    def index_part(self, kb_id: str, offset: int, chars: int) -> tuple[str, int] | None:
        with self._lock:
            parts = self._index.get(kb_id)
            if parts is None:
                return None
            lengths = [len(part) for part in parts]
            wanted, skip = parts_holding(lengths, offset, chars)
            self.index_chars_read += sum(lengths[n] for n in wanted)
            return "".join(parts[n] for n in wanted)[skip : skip + chars], sum(lengths)


# ---------------------------------------------------------------- embedding cache, health, URLs, sleep
