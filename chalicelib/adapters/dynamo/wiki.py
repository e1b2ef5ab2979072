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
from chalicelib.ports.wiki import PagePosition, page_window, parts_holding


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
                batch.save(self.model(kb_id, f"{_PAGE}{knowledge_id}#{n:03d}", body=asdict(page)))

    def delete_pages(self, kb_id: str, knowledge_id: str) -> int:
        return self._delete(self.model.query(kb_id, self.model.key.startswith(f"{_PAGE}{knowledge_id}#")))

    def delete_kb(self, kb_id: str) -> None:
        self._delete(self.model.query(kb_id, consistent_read=True))

    def _delete(self, found: Iterable[Any]) -> int:
        items = list(found)
        with self.model.batch_write() as batch:
            for item in items:
                batch.delete(item)
        return len(items)

    def pages(self, kb_id: str) -> list[WikiPageRecord]:
        return [WikiPageRecord(**i.body) for i in self.model.query(kb_id, self.model.key.startswith(_PAGE))]

    def pages_after(
        self, kb_id: str, after: PagePosition | None, limit: int
    ) -> tuple[list[WikiPageRecord], bool]:
        """One Query from the cursor's document on, read lazily: page_window stops it a few records past
        the page (the rest of the last document and one more)."""
        m = self.model
        start = f"{_PAGE}{after[0]}#" if after is not None else _PAGE
        items = m.query(kb_id, m.key.between(start, _PAGES_END), page_size=limit + _PAGE_LOOKAHEAD)
        return page_window((WikiPageRecord(**i.body) for i in items), after, limit)

    def put_index(self, kb_id: str, markdown: str) -> None:
        """The index in parts of at most WIKI_INDEX_PART_BYTES (`index#<digest>#<n>`), then its head
        (`index`: the digest, the number of parts and their lengths in characters, a version) written only
        over the head this read, so a concurrent writer's head never points at parts another deleted; then
        the parts of other digests go. An index as it is stored already is not written again (one whose head
        has no lengths, written before they were kept, is). A head of one item holding the Markdown (as
        indices were kept before) is read as it is and replaced by the first write."""
        m = self.model
        digest = hashlib.sha256(markdown.encode("utf-8")).hexdigest()[:32]
        head = self._head(kb_id)
        if head is not None and head.status == digest and "chars" in head.body:
            return
        parts = split_json_text(markdown, WIKI_INDEX_PART_BYTES)
        with m.batch_write() as batch:
            for n, part in enumerate(parts):
                batch.save(m(kb_id, f"{_INDEX_PART}{digest}#{n:04d}", body={"markdown": part}))
        version = int(head.attempt) if head is not None else 0
        head_body = {"parts": len(parts), "chars": [len(part) for part in parts]}
        try:
            m(kb_id, _INDEX, body=head_body, status=digest, attempt=version + 1).save(
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

    def index_part(self, kb_id: str, offset: int, chars: int) -> tuple[str, int] | None:
        """The head, then a GetItem for each part holding the range: one or two for a listing page's
        200,000 characters of an ASCII index, against every part of it (thousands of documents) before."""
        for _ in range(3):  # a head replaced while its parts were read: read the new one
            head = self._head(kb_id)
            if head is None:
                return None
            lengths = head.body.get("chars")
            if not isinstance(lengths, list):  # stored before the parts' lengths were kept: read it whole
                whole = self.get_index(kb_id)
                return None if whole is None else (whole[offset : offset + chars], len(whole))
            wanted, skip = parts_holding(lengths, offset, chars)
            texts = [self._index_part(kb_id, head.status, n) for n in wanted]
            found = [t for t in texts if t is not None]
            if len(found) == len(wanted):
                return "".join(found)[skip : skip + chars], sum(lengths)
        return None

    def _index_part(self, kb_id: str, digest: str, n: int) -> str | None:
        try:
            item = self.model.get(kb_id, f"{_INDEX_PART}{digest}#{n:04d}", consistent_read=True)
        except DoesNotExist:
            return None
        return str(item.body.get("markdown", ""))


#: the wiki index's head and the prefix of its parts (no other wiki key starts with "index")
_INDEX = "index"
_INDEX_PART = "index#"
#: a page record's key is `page#<knowledge id>#<n>`; "$" follows "#": every page key sorts below _PAGES_END
_PAGE = "page#"
_PAGES_END = "page$"
#: records a listing page reads past its `limit` in its one request: the cursor's document's earlier ones
#: and the rest of the last document (4 each: 5 records a document at most), and one to say there is more
_PAGE_LOOKAHEAD = 4 + 4 + 1


# ---------------------------------------------------------------- tags
