"""Tags and their relations to knowledge in DynamoDB."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from pynamodb.connection import Connection
from pynamodb.exceptions import (
    DoesNotExist,
    TransactWriteError,
)
from pynamodb.transactions import TransactWrite

from chalicelib.adapters.dynamo.tables import Models, _condition_failed, _transaction_conflict
from chalicelib.domain.clock import from_iso, now_iso, to_iso
from chalicelib.domain.tags import Tag, TagCapReached, TagNameTaken, name_key

TAG_META = "meta"


#: a relation key's upper bound: ISO timestamps start with digits, so '~' sorts after every one
_AFTER_ANY_TIME = "~"


def _relation_prefix(tag_id: str) -> str:
    return f"rel#{tag_id}#"


class DynamoTagRepo:
    def __init__(self, models: Models, region: str):
        assert models.tag is not None
        self.model = models.tag
        self.connection = Connection(region=region)

    @staticmethod
    def _from_item(item: Any) -> Tag:
        return Tag(
            id=item.tag_id,
            tenant_id=item.tenant_id or "",
            kb_id=item.kb_id,
            name=item.name or "",
            color=item.color or "",
            status=item.status or "active",
            created_at=from_iso(item.created_at),
            updated_at=from_iso(item.updated_at),
        )

    def _name_holder(self, kb_id: str, name: str) -> str | None:
        try:
            return str(self.model.get(kb_id, f"name#{name_key(name)}", consistent_read=True).tag_id)
        except DoesNotExist:
            return None

    def _count(self, kb_id: str) -> int:
        try:
            return int(self.model.get(kb_id, TAG_META, consistent_read=True).tag_count or 0)
        except DoesNotExist:
            return 0

    def create(self, tag: Tag, cap: int) -> None:
        """One transaction: the count under the cap, the name unclaimed, the tag new."""
        m = self.model
        for _ in range(5):
            try:
                with TransactWrite(connection=self.connection) as tx:
                    tx.update(
                        m(tag.kb_id, TAG_META),
                        actions=[m.tag_count.add(1)],
                        condition=m.tag_count.does_not_exist() | (m.tag_count < cap),
                    )
                    tx.save(
                        m(tag.kb_id, f"name#{name_key(tag.name)}", tag_id=tag.id),
                        condition=m.key.does_not_exist(),
                    )
                    tx.save(
                        m(
                            tag.kb_id,
                            f"tag#{tag.id}",
                            tag_id=tag.id,
                            tenant_id=tag.tenant_id,
                            name=tag.name,
                            color=tag.color,
                            status=tag.status,
                            created_at=to_iso(tag.created_at),
                            updated_at=to_iso(tag.updated_at),
                        ),
                        condition=m.key.does_not_exist(),
                    )
                return
            except TransactWriteError as error:
                if _transaction_conflict(error):
                    time.sleep(0.05)
                    continue
                if not _condition_failed(error):
                    raise
            holder = self._name_holder(tag.kb_id, tag.name)
            if holder is not None:
                raise TagNameTaken(holder)
            if self._count(tag.kb_id) >= cap:
                raise TagCapReached()
        raise RuntimeError(f"could not create tag {tag.name!r} after 5 tries")

    def get(self, kb_id: str, tag_id: str) -> Tag | None:
        try:
            return self._from_item(self.model.get(kb_id, f"tag#{tag_id}", consistent_read=True))
        except DoesNotExist:
            return None

    def list_kb(self, kb_id: str) -> list[Tag]:
        query = self.model.query(kb_id, self.model.key.startswith("tag#"), consistent_read=True)
        return sorted((self._from_item(i) for i in query), key=lambda t: (name_key(t.name), t.id))

    def update(
        self,
        kb_id: str,
        tag_id: str,
        *,
        name: str | None = None,
        color: str | None = None,
        status: str | None = None,
    ) -> Tag | None:
        m = self.model
        current = self.get(kb_id, tag_id)
        if current is None:
            return None
        actions = [m.updated_at.set(now_iso())]
        if name is not None:
            actions.append(m.name.set(name))
        if color is not None:
            actions.append(m.color.set(color))
        if status is not None:
            actions.append(m.status.set(status))
        renamed = name is not None and name_key(name) != name_key(current.name)
        try:
            with TransactWrite(connection=self.connection) as tx:
                tx.update(m(kb_id, f"tag#{tag_id}"), actions=actions, condition=m.key.exists())
                if renamed:
                    assert name is not None
                    tx.delete(m(kb_id, f"name#{name_key(current.name)}"), condition=m.tag_id == tag_id)
                    tx.save(
                        m(kb_id, f"name#{name_key(name)}", tag_id=tag_id), condition=m.key.does_not_exist()
                    )
        except TransactWriteError as error:
            if not _condition_failed(error):
                raise
            if renamed:
                assert name is not None
                holder = self._name_holder(kb_id, name)
                if holder is not None and holder != tag_id:
                    raise TagNameTaken(holder) from None
            return None
        return self.get(kb_id, tag_id)

    def delete(self, kb_id: str, tag_id: str) -> bool:
        m = self.model
        current = self.get(kb_id, tag_id)
        if current is None:
            return False
        try:
            with TransactWrite(connection=self.connection) as tx:
                tx.delete(m(kb_id, f"tag#{tag_id}"), condition=m.key.exists())
                if self._name_holder(kb_id, current.name) == tag_id:
                    tx.delete(m(kb_id, f"name#{name_key(current.name)}"), condition=m.tag_id == tag_id)
                tx.update(m(kb_id, TAG_META), actions=[m.tag_count.add(-1)], condition=m.tag_count > 0)
        except TransactWriteError as error:
            if not _condition_failed(error):
                raise
            return False
        return True

    def relate(self, kb_id: str, knowledge_id: str, created_at: str, tag_ids: Sequence[str]) -> None:
        with self.model.batch_write() as batch:
            for tag_id in dict.fromkeys(tag_ids):
                key = f"{_relation_prefix(tag_id)}{created_at}#{knowledge_id}"
                batch.save(self.model(kb_id, key, tag_id=tag_id, knowledge_id=knowledge_id))

    def unrelate(self, kb_id: str, knowledge_id: str, created_at: str, tag_ids: Sequence[str]) -> None:
        with self.model.batch_write() as batch:
            for tag_id in dict.fromkeys(tag_ids):
                batch.delete(self.model(kb_id, f"{_relation_prefix(tag_id)}{created_at}#{knowledge_id}"))

    def remove_knowledge(self, knowledge_id: str) -> int:
        items = list(self.model.knowledge_index.query(knowledge_id))
        with self.model.batch_write() as batch:
            for item in items:
                batch.delete(self.model(item.kb_id, item.key))
        return len(items)

    def tagged(
        self,
        kb_id: str,
        tag_id: str,
        *,
        created_from: str | None = None,
        created_to: str | None = None,
        after: tuple[str, str] | None = None,
        limit: int = 20,
    ) -> list[tuple[str, str]]:
        prefix = _relation_prefix(tag_id)
        low = prefix + (created_from or "")
        high = prefix + (f"{created_to}$" if created_to is not None else _AFTER_ANY_TIME)  # '$' > '#'
        start = None
        if after is not None:
            start = {"kb_id": {"S": kb_id}, "key": {"S": f"{prefix}{after[0]}#{after[1]}"}}
        query = self.model.query(
            kb_id,
            self.model.key.between(low, high),
            scan_index_forward=False,
            limit=limit,
            page_size=limit,
            last_evaluated_key=start,
            consistent_read=True,
        )
        out = []
        for item in query:
            created_at, separator, knowledge_id = item.key[len(prefix) :].partition("#")
            if separator:  # a key of another tag whose id extends this one's is not a relation of it
                out.append((created_at, knowledge_id))
        return out

    def delete_kb(self, kb_id: str) -> int:
        items = list(self.model.query(kb_id, attributes_to_get=["kb_id", "key"]))
        with self.model.batch_write() as batch:
            for item in items:
                batch.delete(item)
        return len(items)


# ---------------------------------------------------------------- spans
