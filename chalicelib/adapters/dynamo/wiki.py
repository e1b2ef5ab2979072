"""Wiki ops and page records in DynamoDB."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict
from typing import Any

from pynamodb.exceptions import (
    DeleteError,
    DoesNotExist,
    PutError,
    UpdateError,
)

from chalicelib.adapters.dynamo.tables import Models, _condition_failed
from chalicelib.domain.item_limits import WIKI_INDEX_PART_BYTES, split_json_text
from chalicelib.ports import (
    WikiOp,
    WikiPageRecord,
)


class DynamoWikiRepo:
    def __init__(self, models: Models):
        self.model = models.wiki

    def put_op(self, op: WikiOp) -> None:
        m = self.model
        item = m(
            op.kb_id,
            f"op#{op.knowledge_id}",
            body=asdict(op),
            status="pending",
            claimed_at=0,
            attempt=op.attempt,
        )
        try:  # a newer attempt replaces an older one's op; a redelivered one rewrites its own
            item.save(condition=m.key.does_not_exist() | (m.attempt <= op.attempt))
        except PutError as error:
            if not _condition_failed(error):
                raise

    def _ops(self, kb_id: str) -> list[Any]:
        return list(self.model.query(kb_id, self.model.key.startswith("op#"), consistent_read=True))

    def claim_ops(self, kb_id: str, limit: int, stale_after_seconds: int) -> list[WikiOp]:
        m = self.model
        now = int(time.time())
        claimed: list[WikiOp] = []
        for item in self._ops(kb_id):
            if len(claimed) >= limit:
                break
            if item.status == "running" and item.claimed_at > now - stale_after_seconds:
                continue
            try:
                item.update(
                    actions=[m.status.set("running"), m.claimed_at.set(now)],
                    condition=(m.status == item.status) & (m.claimed_at == item.claimed_at),
                )
            except UpdateError as error:
                if _condition_failed(error):
                    continue  # another worker claimed it
                raise
            claimed.append(WikiOp(**item.body))
        return claimed

    def pending(self, kb_id: str) -> int:
        return sum(1 for item in self._ops(kb_id) if item.status == "pending")

    def ops(self, kb_id: str) -> list[WikiOp]:
        return [WikiOp(**item.body) for item in self._ops(kb_id)]

    def heartbeat_due(self, kb_id: str, every_seconds: int) -> bool:
        m = self.model
        now = int(time.time())
        try:  # the lease's item is the knowledge base's like the others: delete_kb takes it too
            m(kb_id, "heartbeat").update(
                actions=[m.claimed_at.set(now)],
                condition=m.key.does_not_exist() | (m.claimed_at <= now - every_seconds),
            )
        except UpdateError as error:
            if _condition_failed(error):
                return False  # another worker heartbeats them
            raise
        return True

    def finish_op(self, kb_id: str, knowledge_id: str, attempt: int) -> None:
        m = self.model
        try:
            m(kb_id, f"op#{knowledge_id}").delete(condition=m.attempt == attempt)
        except DeleteError as error:
            if not _condition_failed(error):
                raise

    def release_op(self, kb_id: str, knowledge_id: str, attempt: int) -> None:
        m = self.model
        try:  # a newer attempt's op (put meanwhile) keeps its own state
            m(kb_id, f"op#{knowledge_id}").update(
                actions=[m.status.set("pending"), m.claimed_at.set(0)],
                condition=m.key.exists() & (m.attempt == attempt),
            )
        except UpdateError as error:
            if not _condition_failed(error):
                raise

    def put_pages(self, kb_id: str, knowledge_id: str, pages: Sequence[WikiPageRecord]) -> None:
        self.delete_pages(kb_id, knowledge_id)
        with self.model.batch_write() as batch:
            for n, page in enumerate(pages):
                batch.save(self.model(kb_id, f"page#{knowledge_id}#{n:03d}", body=asdict(page)))

    def delete_pages(self, kb_id: str, knowledge_id: str) -> int:
        return self._delete(self.model.query(kb_id, self.model.key.startswith(f"page#{knowledge_id}#")))

    def delete_kb(self, kb_id: str) -> None:
        self._delete(self.model.query(kb_id, consistent_read=True))

    def _delete(self, found: Iterable[Any]) -> int:
        items = list(found)
        with self.model.batch_write() as batch:
            for item in items:
                batch.delete(item)
        return len(items)

    def pages(self, kb_id: str) -> list[WikiPageRecord]:
        return [WikiPageRecord(**i.body) for i in self.model.query(kb_id, self.model.key.startswith("page#"))]

    def put_index(self, kb_id: str, markdown: str) -> None:
        """The index in parts of at most WIKI_INDEX_PART_BYTES (`index#<digest>#<n>`), then its head
        (`index`: the digest, the number of parts and a version) written only over the head this read, so
        a concurrent writer's head never points at parts another deleted; then the parts of other digests
        go. An index as it is stored already is not written again. A head of one item holding the Markdown
        (as indices were kept before) is read as it is and replaced by the first write."""
        m = self.model
        digest = hashlib.sha256(markdown.encode("utf-8")).hexdigest()[:32]
        head = self._head(kb_id)
        if head is not None and head.status == digest and "parts" in head.body:
            return
        parts = split_json_text(markdown, WIKI_INDEX_PART_BYTES)
        with m.batch_write() as batch:
            for n, part in enumerate(parts):
                batch.save(m(kb_id, f"{_INDEX_PART}{digest}#{n:04d}", body={"markdown": part}))
        version = int(head.attempt) if head is not None else 0
        try:
            m(kb_id, _INDEX, body={"parts": len(parts)}, status=digest, attempt=version + 1).save(
                condition=m.key.does_not_exist() | (m.attempt == version)
            )
        except PutError as error:
            if _condition_failed(error):
                return  # another finalize wrote the index meanwhile: its write cleans up the parts
            raise
        stale = self.model.query(kb_id, m.key.startswith(_INDEX_PART), consistent_read=True)
        self._delete(i for i in stale if not i.key.startswith(f"{_INDEX_PART}{digest}#"))

    def _head(self, kb_id: str) -> Any:
        try:
            return self.model.get(kb_id, _INDEX, consistent_read=True)
        except DoesNotExist:
            return None

    def get_index(self, kb_id: str) -> str | None:
        for _ in range(3):  # a head replaced while its parts were read: read the new one
            head = self._head(kb_id)
            if head is None:
                return None
            if "parts" not in head.body:  # one item, as indices were kept before
                return str(head.body.get("markdown", ""))
            start = f"{_INDEX_PART}{head.status}#"
            parts = list(self.model.query(kb_id, self.model.key.startswith(start), consistent_read=True))
            if len(parts) == head.body["parts"]:
                return "".join(str(p.body.get("markdown", "")) for p in sorted(parts, key=lambda p: p.key))
        return None


#: the wiki index's head and the prefix of its parts (no other wiki key starts with "index")
_INDEX = "index"
_INDEX_PART = "index#"


# ---------------------------------------------------------------- tags
