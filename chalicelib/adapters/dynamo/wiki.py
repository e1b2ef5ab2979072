"""Wiki ops and page records in DynamoDB."""

from __future__ import annotations

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
        self.model(kb_id, "index", body={"markdown": markdown}).save()

    def get_index(self, kb_id: str) -> str | None:
        try:
            return str(self.model.get(kb_id, "index").body.get("markdown", ""))
        except DoesNotExist:
            return None


# ---------------------------------------------------------------- tags
