"""Usage entries in DynamoDB: one item per (knowledge, invocation), and a KB index for the KB's total.

Entries outlive the knowledge they were for (a deleted document was still paid for).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pynamodb.attributes import JSONAttribute, UnicodeAttribute
from pynamodb.exceptions import PutError
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model

from chalicelib.observability import logger
from chalicelib.ports import UsageEntry
from chalicelib.settings import Settings


def build_usage_model(settings: Settings) -> type[Any]:
    class UsageKbIndex(GlobalSecondaryIndex[Any]):
        class Meta:
            index_name = "kb-index"
            projection = AllProjection()

        kb_id = UnicodeAttribute(hash_key=True)
        entry = UnicodeAttribute(range_key=True)

    class UsageItem(Model):
        class Meta:
            table_name = settings.table("usage")
            region = settings.region

        knowledge_id = UnicodeAttribute(hash_key=True)
        entry = UnicodeAttribute(range_key=True)  # f"{attempt:06d}#{stage}#{invocation}"
        kb_id = UnicodeAttribute()
        tenant_id = UnicodeAttribute(default="")
        counts = JSONAttribute()
        created_at = UnicodeAttribute()
        kb_index = UsageKbIndex()

    return UsageItem


class DynamoUsageRepo:
    def __init__(self, model: type[Any]):
        self.model = model

    def put(self, entry: UsageEntry) -> None:
        """Best effort: a lost entry under-reports one invocation's cost, never fails the work it metered."""
        try:
            self._save(entry)
        except PutError:
            logger.warning("usage entry not stored", extra={"knowledge_id": entry.knowledge_id})

    def _save(self, entry: UsageEntry) -> None:
        self.model(
            entry.knowledge_id,
            entry.entry,
            kb_id=entry.kb_id or "-",  # a GSI key must not be empty
            tenant_id=entry.tenant_id,
            counts=dict(entry.counts),
            created_at=entry.created_at,
        ).save()

    @staticmethod
    def _entry(item: Any) -> UsageEntry:
        kb_id = "" if item.kb_id == "-" else item.kb_id
        return UsageEntry(item.knowledge_id, item.entry, kb_id, item.tenant_id, item.counts, item.created_at)

    def for_knowledge(self, knowledge_id: str) -> list[UsageEntry]:
        return [self._entry(item) for item in self.model.query(knowledge_id)]

    def for_kb(self, kb_id: str) -> Iterator[UsageEntry]:
        for item in self.model.kb_index.query(kb_id):
            yield self._entry(item)
