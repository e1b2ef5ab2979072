"""Usage entries in DynamoDB: one item per (knowledge, invocation), and a KB index for the KB's total.

Entries outlive the knowledge they were for (a deleted document was still paid for). The reports a refresh
sums from a big knowledge base's entries (operations/kb_reports.py) are kept in the same table, one item per
(knowledge base, kind) under `report#<kb_id>`: no kb_id attribute, so they stay out of the KB index; beside
each, under `<kind>#ended`, the highest refresh generation that ended without storing one.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from pynamodb.attributes import JSONAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import PutError, UpdateError
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex
from pynamodb.models import Model

from chalicelib.observability import logger
from chalicelib.ports import StoredReport, UsageEntry
from chalicelib.ports.reports import UsagePage
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


#: the hash key of a knowledge base's stored reports (knowledge ids are uuids, its own usage `kb#<kb_id>`)
REPORT_PREFIX = "report#"
#: the sort key's suffix of the item keeping a report's last ended generation (only `generation` in it)
ENDED_SUFFIX = "#ended"
CONDITION_FAILED = "ConditionalCheckFailedException"


def build_report_model(settings: Settings) -> type[Any]:
    """A knowledge base's stored report, an item of the usage table (its keys are the entries' keys)."""

    class UsageReportItem(Model):
        class Meta:
            table_name = settings.table("usage")
            region = settings.region

        knowledge_id = UnicodeAttribute(hash_key=True)  # f"report#{kb_id}"
        entry = UnicodeAttribute(range_key=True)  # the report's kind
        as_of = UnicodeAttribute()
        generation = NumberAttribute(default=0)
        body = JSONAttribute()
        stored_at = UnicodeAttribute(null=True)  # written since refreshes wait from it

    return UsageReportItem


class DynamoUsageRepo:
    def __init__(self, model: type[Any], report_model: type[Any]):
        self.model = model
        self.report_model = report_model

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

    def kb_page(self, kb_id: str, cursor: str | None, limit: int) -> UsagePage:
        """One Query of the KB index (at most `limit` items) from the LastEvaluatedKey `cursor` holds."""
        start = json.loads(cursor) if cursor is not None else None
        results = self.model.kb_index.query(kb_id, limit=limit, last_evaluated_key=start)
        entries = [self._entry(item) for item in results]
        last = results.last_evaluated_key
        return UsagePage(entries, json.dumps(last, sort_keys=True) if last and entries else None)

    def report(self, kb_id: str, kind: str) -> StoredReport | None:
        try:
            item = self.report_model.get(f"{REPORT_PREFIX}{kb_id}", kind, consistent_read=True)
        except self.report_model.DoesNotExist:
            return None
        return StoredReport(kb_id, kind, item.as_of, int(item.generation), item.body, item.stored_at or "")

    def save_report(self, report: StoredReport) -> bool:
        m = self.report_model
        try:
            m(
                f"{REPORT_PREFIX}{report.kb_id}",
                report.kind,
                as_of=report.as_of,
                generation=report.generation,
                body=dict(report.body),
                stored_at=report.stored_at or None,
            ).save(condition=m.as_of.does_not_exist() | (m.as_of < report.as_of))
        except PutError as error:
            if error.cause_response_code == CONDITION_FAILED:
                return False
            raise
        return True

    def ended_generation(self, kb_id: str, kind: str) -> int:
        try:
            item = self.report_model.get(f"{REPORT_PREFIX}{kb_id}", kind + ENDED_SUFFIX, consistent_read=True)
        except self.report_model.DoesNotExist:
            return -1
        return int(item.generation)

    def save_ended_generation(self, kb_id: str, kind: str, generation: int) -> bool:
        m = self.report_model
        try:  # an update: the item holds only its keys and `generation`
            m(f"{REPORT_PREFIX}{kb_id}", kind + ENDED_SUFFIX).update(
                actions=[m.generation.set(generation)],
                condition=m.generation.does_not_exist() | (m.generation < generation),
            )
        except UpdateError as error:
            if error.cause_response_code == CONDITION_FAILED:
                return False
            raise
        return True
