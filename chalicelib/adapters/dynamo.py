"""DynamoDB state through PynamoDB: tenants, knowledge bases, knowledge, dedupe claims, chunks, spans.

Every status transition is one conditional write, so concurrent workers, redelivered messages and the
state machine never race each other into an impossible state. Attribute names here are also used by the
state machine's DynamoDB tasks (infra/statemachine/knowledge.asl.json): keep them in step.
"""

from __future__ import annotations

import builtins
import functools
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any

from pynamodb.attributes import (
    BooleanAttribute,
    JSONAttribute,
    ListAttribute,
    NumberAttribute,
    UnicodeAttribute,
    UnicodeSetAttribute,
)
from pynamodb.connection import Connection
from pynamodb.connection.base import MetaTable
from pynamodb.constants import (
    ATTR_DEFINITIONS,
    ATTR_NAME,
    GLOBAL_SECONDARY_INDEXES,
    INDEX_NAME,
    LOCAL_SECONDARY_INDEXES,
)
from pynamodb.exceptions import (
    DeleteError,
    DoesNotExist,
    PutError,
    TableError,
    TransactWriteError,
    UpdateError,
)
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from chalicelib.domain.api_keys import ApiKey
from chalicelib.domain.clock import from_iso, now_iso, to_iso
from chalicelib.domain.graph import entity_key
from chalicelib.domain.ids import api_key_hash
from chalicelib.domain.listing import listing_source
from chalicelib.domain.status import (
    BEGIN_PROCESSING_FROM,
    CANCEL_FROM,
    DELETE_FROM,
    FAIL_FROM,
    MARK_INDEXED_FROM,
    REPARSE_FROM,
    holds_dedupe_claim,
    is_in_flight,
)
from chalicelib.domain.tags import Tag, TagCapReached, TagNameTaken, name_key
from chalicelib.domain.types import (
    IN_FLIGHT_STATUSES,
    Chunk,
    ChunkingConfig,
    ChunkType,
    EnableStatus,
    EnrichmentSettings,
    IndexingStrategy,
    Knowledge,
    KnowledgeBase,
    KnowledgeType,
    ParseStatus,
    Span,
    SpanKind,
    SpanStatus,
    SummaryStatus,
    Task,
    TaskKind,
    TaskStatus,
    Tenant,
)
from chalicelib.ports import (
    DuplicateKnowledge,
    GraphEdge,
    GraphNeighbourhood,
    GraphNode,
    Page,
    WikiOp,
    WikiPageRecord,
)
from chalicelib.settings import Settings

CONDITION_FAILED = "ConditionalCheckFailedException"
#: the sparse in-flight index also holds rows being deleted, under this key
DELETING_MARKER = "deleting"
IN_FLIGHT = [s.value for s in IN_FLIGHT_STATUSES]


def _reason_codes(error: TransactWriteError) -> set[str]:
    return {str(getattr(reason, "code", "") or "") for reason in (error.cancellation_reasons or []) if reason}


def _condition_failed(error: Exception) -> bool:
    if isinstance(error, TransactWriteError):
        return (
            "ConditionalCheckFailed" in _reason_codes(error) or error.cause_response_code == CONDITION_FAILED
        )
    return getattr(error, "cause_response_code", None) == CONDITION_FAILED


def _transaction_conflict(error: TransactWriteError) -> bool:
    """Another transaction touched the same items at the same moment: safe to try again."""
    return "TransactionConflict" in _reason_codes(error)


def _values(statuses: Iterable[ParseStatus]) -> list[str]:
    return sorted(s.value for s in statuses)


def _iso_or_none(value: datetime | None) -> str | None:
    return to_iso(value) if value else None


@functools.cache
def shared_connection(region: str, endpoint_url: str) -> Connection:
    """The process's PynamoDB Connection for :func:`share_one_connection` (its client is built once)."""
    return Connection(region=region, host=endpoint_url or None)


def share_one_connection(connection: Connection, *models: type[Any]) -> None:
    """Route every model through one PynamoDB Connection, so one botocore session and DynamoDB client.

    PynamoDB gives each model class a Connection of its own, and each builds its own botocore session and
    client on first use (pynamodb#876, #1245): a fresh load of DynamoDB's service model per table, ~15 of
    them in a cold start. A Connection keys table schemas by name; models that share a table (tenants and
    API keys) have their indexes merged into the one schema."""
    by_table: dict[str, list[Any]] = {}
    tables = []
    for model in models:
        table = model._get_connection()
        if table.connection is connection:
            continue
        by_table.setdefault(table.table_name, []).append(table.get_meta_table())
        tables.append(table)
    for name, metas in by_table.items():
        merged = _merged_schema(metas)
        try:
            known = connection.get_meta_table(name)
        except TableError:  # the usual case: the first models on this table
            connection.add_meta_table(merged)
            continue
        if known.data != merged.data:  # share a table's models in one call, so their indexes merge
            raise ValueError(f"{name}: already shared with another schema")
    for table in tables:
        table.connection = connection


def _merged_schema(metas: list[Any]) -> MetaTable:
    data = dict(metas[0].data)
    for key, name in (
        (GLOBAL_SECONDARY_INDEXES, INDEX_NAME),
        (LOCAL_SECONDARY_INDEXES, INDEX_NAME),
        (ATTR_DEFINITIONS, ATTR_NAME),
    ):
        merged = {item[name]: item for meta in metas for item in meta.data.get(key) or []}
        data[key] = list(merged.values())
    return MetaTable(data)


@dataclass
class Models:
    tenant: type[Any]
    kb: type[Any]
    knowledge: type[Any]
    dedupe: type[Any]
    chunk: type[Any]
    span: type[Any]
    task: type[Any]
    graph: type[Any]
    wiki: type[Any]
    api_key: type[Any]
    tag: type[Any] | None = None

    def all(self) -> list[type[Any]]:
        return [m for m in vars(self).values() if m is not None]


def build_models(settings: Settings) -> Models:
    """PynamoDB needs table names at class creation; these come from settings."""
    region = settings.region

    class ApiKeyIndex(GlobalSecondaryIndex[Any]):
        class Meta:
            index_name = "api-key-index"
            projection = AllProjection()

        api_key_hash = UnicodeAttribute(hash_key=True)

    class TenantItem(Model):
        class Meta:
            table_name = settings.table("tenants")
            region = settings.region

        id = UnicodeAttribute(hash_key=True)
        name = UnicodeAttribute()
        api_key_hash = UnicodeAttribute()
        created_at = UnicodeAttribute()
        parser_engine_rules = JSONAttribute(default=dict)
        storage_used = NumberAttribute(default=0)
        api_key_index = ApiKeyIndex()

    class TenantNameIndex(GlobalSecondaryIndex[Any]):
        class Meta:
            index_name = "tenant-index"
            projection = AllProjection()

        tenant_id = UnicodeAttribute(hash_key=True)
        name = UnicodeAttribute(range_key=True)

    class KnowledgeBaseItem(Model):
        class Meta:
            table_name = settings.table("knowledge-bases")
            region = settings.region

        id = UnicodeAttribute(hash_key=True)
        tenant_id = UnicodeAttribute()
        name = UnicodeAttribute()
        body = JSONAttribute()
        tenant_index = TenantNameIndex()

    class KbIndex(GlobalSecondaryIndex[Any]):
        class Meta:
            index_name = "kb-index"
            projection = AllProjection()

        kb_id = UnicodeAttribute(hash_key=True)
        created_at = UnicodeAttribute(range_key=True)

    class InFlightIndex(GlobalSecondaryIndex[Any]):
        """Sparse: only rows in pending/processing/finalizing carry `inflight`, so housekeeping reads
        exactly the candidates instead of scanning the table."""

        class Meta:
            index_name = "inflight-index"
            projection = AllProjection()

        inflight = UnicodeAttribute(hash_key=True)
        updated_at = UnicodeAttribute(range_key=True)

    class SummaryIndex(GlobalSecondaryIndex[Any]):
        class Meta:
            index_name = "summary-inflight-index"
            projection = AllProjection()

        summary_inflight = UnicodeAttribute(hash_key=True)
        updated_at = UnicodeAttribute(range_key=True)

    class KbSourceIndex(GlobalSecondaryIndex[Any]):
        """Listing by source: `kb_source` = kb_id#file|url|manual, fixed at creation."""

        class Meta:
            index_name = "kb-source-index"
            projection = AllProjection()

        kb_source = UnicodeAttribute(hash_key=True)
        created_at = UnicodeAttribute(range_key=True)

    class KbTypeIndex(GlobalSecondaryIndex[Any]):
        """Listing by file type: `kb_type` = kb_id#pdf, fixed at creation (sparse: rows without a type)."""

        class Meta:
            index_name = "kb-type-index"
            projection = AllProjection()

        kb_type = UnicodeAttribute(hash_key=True)
        created_at = UnicodeAttribute(range_key=True)

    class KnowledgeItem(Model):
        class Meta:
            table_name = settings.table("knowledge")
            region = settings.region

        id = UnicodeAttribute(hash_key=True)
        tenant_id = UnicodeAttribute()
        kb_id = UnicodeAttribute()
        type = UnicodeAttribute()
        title = UnicodeAttribute(default="")
        description = UnicodeAttribute(default="")
        source = UnicodeAttribute(default="")
        file_name = UnicodeAttribute(default="")
        file_type = UnicodeAttribute(default="")
        file_size = NumberAttribute(default=0)
        file_hash = UnicodeAttribute(default="")
        file_path = UnicodeAttribute(default="")
        parse_status = UnicodeAttribute()
        enable_status = UnicodeAttribute()
        summary_status = UnicodeAttribute(default="none")
        error_message = UnicodeAttribute(default="")
        error_code = UnicodeAttribute(default="")
        attempt = NumberAttribute(default=1)
        pending_subtasks_count = NumberAttribute(default=0)
        done_subtasks = UnicodeSetAttribute(null=True)
        enable_multimodel = BooleanAttribute(default=False)
        meta = JSONAttribute(default=dict)
        process_overrides = JSONAttribute(default=dict)
        tag_ids = ListAttribute(of=UnicodeAttribute, default=list)
        channel = UnicodeAttribute(default="api")
        folder_path = UnicodeAttribute(default="")
        storage_size = NumberAttribute(default=0)
        chunk_count = NumberAttribute(default=0)
        dedupe_key = UnicodeAttribute(default="")
        created_at = UnicodeAttribute()
        updated_at = UnicodeAttribute()
        processed_at = UnicodeAttribute(null=True)
        inflight = UnicodeAttribute(null=True)
        summary_inflight = UnicodeAttribute(null=True)
        queued_stage = UnicodeAttribute(default="")
        queued_at = UnicodeAttribute(default="")
        enrichment = JSONAttribute(default=dict)
        kb_source = UnicodeAttribute(null=True)
        kb_type = UnicodeAttribute(null=True)
        kb_index = KbIndex()
        kb_source_index = KbSourceIndex()
        kb_type_index = KbTypeIndex()
        inflight_index = InFlightIndex()
        summary_index = SummaryIndex()

    class DedupeItem(Model):
        class Meta:
            table_name = settings.table("dedupe")
            region = settings.region

        dedupe_key = UnicodeAttribute(hash_key=True)
        knowledge_id = UnicodeAttribute()

    class ChunkItem(Model):
        class Meta:
            table_name = settings.table("chunks")
            region = settings.region

        knowledge_id = UnicodeAttribute(hash_key=True)
        chunk_id = UnicodeAttribute(range_key=True)
        body = JSONAttribute()

    class SpanItem(Model):
        class Meta:
            table_name = settings.table("spans")
            region = settings.region

        knowledge_id = UnicodeAttribute(hash_key=True)
        span_key = UnicodeAttribute(range_key=True)  # f"{attempt:06d}#{span_id}"
        body = JSONAttribute()
        updated_at = UnicodeAttribute()

    class TaskItem(Model):
        class Meta:
            table_name = settings.table("tasks")
            region = settings.region

        id = UnicodeAttribute(hash_key=True)
        tenant_id = UnicodeAttribute()
        done = NumberAttribute(default=0)
        body = JSONAttribute()
        expires_at = NumberAttribute(null=True)  # TTL: finished tasks are kept for 30 days

    class GraphKnowledgeIndex(GlobalSecondaryIndex[Any]):
        class Meta:
            index_name = "knowledge-index"
            projection = KeysOnlyProjection()

        knowledge_id = UnicodeAttribute(hash_key=True)
        key = UnicodeAttribute(range_key=True)

    class GraphItem(Model):
        """One knowledge's contribution to a node (`n#entity#knowledge`), an edge (`e#a#rel#b#knowledge`)
        or the edge read backwards (`r#b#rel#a#knowledge`), so neighbourhoods are prefix queries."""

        class Meta:
            table_name = settings.table("graph")
            region = settings.region

        kb_id = UnicodeAttribute(hash_key=True)
        key = UnicodeAttribute(range_key=True)
        knowledge_id = UnicodeAttribute()
        name = UnicodeAttribute(default="")
        relation = UnicodeAttribute(default="")
        other = UnicodeAttribute(default="")
        attributes = UnicodeSetAttribute(null=True)
        chunk_ids = UnicodeSetAttribute(null=True)
        knowledge_index = GraphKnowledgeIndex()

    class WikiItem(Model):
        """A knowledge base's wiki: ops (`op#knowledge`), page records (`page#knowledge#n`), the index."""

        class Meta:
            table_name = settings.table("wiki")
            region = settings.region

        kb_id = UnicodeAttribute(hash_key=True)
        key = UnicodeAttribute(range_key=True)
        body = JSONAttribute(default=dict)
        status = UnicodeAttribute(default="")
        claimed_at = NumberAttribute(default=0)
        attempt = NumberAttribute(default=0)

    class TagKnowledgeIndex(GlobalSecondaryIndex[Any]):
        """Sparse: only relation items carry `knowledge_id`, so a knowledge's relations are one query."""

        class Meta:
            index_name = "knowledge-index"
            projection = KeysOnlyProjection()

        knowledge_id = UnicodeAttribute(hash_key=True)
        key = UnicodeAttribute(range_key=True)

    class TagItem(Model):
        """A knowledge base's tags: `tag#id` (the tag), `name#key` (its name, unique), `meta` (the count, for
        the cap) and `rel#tag#created_at#knowledge` (a relation: a tag's knowledge newest first by query)."""

        class Meta:
            table_name = settings.table("tags")
            region = settings.region

        kb_id = UnicodeAttribute(hash_key=True)
        key = UnicodeAttribute(range_key=True)
        tag_id = UnicodeAttribute(null=True)
        tenant_id = UnicodeAttribute(null=True)
        name = UnicodeAttribute(null=True)
        color = UnicodeAttribute(null=True)
        status = UnicodeAttribute(null=True)
        created_at = UnicodeAttribute(null=True)
        updated_at = UnicodeAttribute(null=True)
        knowledge_id = UnicodeAttribute(null=True)
        tag_count = NumberAttribute(null=True)
        knowledge_index = TagKnowledgeIndex()

    class ApiKeyItem(Model):
        """An issued API key, in the tenants table under `apikey#<sha256>` (no `api_key_hash` attribute, so
        it stays out of the api-key index and out of tenant listings)."""

        class Meta:
            table_name = settings.table("tenants")
            region = settings.region

        id = UnicodeAttribute(hash_key=True)
        tenant_id = UnicodeAttribute()
        key_hash = UnicodeAttribute()
        name = UnicodeAttribute(default="")
        created_at = UnicodeAttribute()
        revoked_at = UnicodeAttribute(null=True)

    del region
    return Models(
        TenantItem,
        KnowledgeBaseItem,
        KnowledgeItem,
        DedupeItem,
        ChunkItem,
        SpanItem,
        TaskItem,
        GraphItem,
        WikiItem,
        ApiKeyItem,
        TagItem,
    )


# ---------------------------------------------------------------- tenants and knowledge bases


class DynamoTenantRepo:
    def __init__(self, models: Models):
        self.model = models.tenant

    def get(self, tenant_id: str) -> Tenant | None:
        try:
            item = self.model.get(tenant_id)
        except DoesNotExist:
            return None
        return self._from_item(item)

    def by_api_key(self, api_key: str) -> Tenant | None:
        for item in self.model.api_key_index.query(api_key_hash(api_key), limit=1):
            return self._from_item(item)
        return None

    @staticmethod
    def _from_item(item: Any) -> Tenant:
        rules = dict(item.parser_engine_rules or {})
        tenant = Tenant(item.id, item.name, item.api_key_hash, from_iso(item.created_at), rules)
        tenant.storage_used = int(item.storage_used or 0)
        return tenant

    def add_usage(self, tenant_id: str, delta_bytes: int) -> None:
        if delta_bytes:
            self.model(tenant_id).update(
                actions=[self.model.storage_used.add(delta_bytes)], condition=self.model.id.exists()
            )

    def put(self, tenant: Tenant) -> None:
        self.model(
            tenant.id,
            name=tenant.name,
            api_key_hash=tenant.api_key_hash,
            created_at=to_iso(tenant.created_at),
            parser_engine_rules=tenant.parser_engine_rules,
            storage_used=tenant.storage_used,
        ).save()

    def list_all(self) -> list[Tenant]:
        # Key records share the table but carry no api_key_hash: the filter leaves them out.
        items = self.model.scan(filter_condition=self.model.api_key_hash.exists())
        return sorted((self._from_item(item) for item in items), key=lambda t: t.id)


API_KEY_ITEM_PREFIX = "apikey#"


class DynamoApiKeyRepo:
    def __init__(self, models: Models):
        self.model = models.api_key

    def get(self, key_hash: str) -> ApiKey | None:
        try:
            item = self.model.get(API_KEY_ITEM_PREFIX + key_hash, consistent_read=True)
        except DoesNotExist:
            return None
        return self._from_item(item)

    def put(self, key: ApiKey) -> None:
        self.model(
            API_KEY_ITEM_PREFIX + key.key_hash,
            tenant_id=key.tenant_id,
            key_hash=key.key_hash,
            name=key.name,
            created_at=to_iso(key.created_at),
            revoked_at=_iso_or_none(key.revoked_at),
        ).save()

    def list(self, tenant_id: str) -> list[ApiKey]:
        m = self.model
        items = m.scan(filter_condition=m.id.startswith(API_KEY_ITEM_PREFIX) & (m.tenant_id == tenant_id))
        return sorted((self._from_item(i) for i in items), key=lambda k: (k.created_at, k.key_hash))

    @staticmethod
    def _from_item(item: Any) -> ApiKey:
        revoked = from_iso(item.revoked_at) if item.revoked_at else None
        return ApiKey(item.tenant_id, item.key_hash, item.name or "", from_iso(item.created_at), revoked)


def kb_to_body(kb: KnowledgeBase) -> dict[str, Any]:
    body = asdict(kb)
    body["created_at"] = to_iso(kb.created_at)
    body["updated_at"] = to_iso(kb.updated_at)
    return body


def kb_from_body(body: Mapping[str, Any]) -> KnowledgeBase:
    data = dict(body)
    data["chunking_config"] = ChunkingConfig(**data.get("chunking_config") or {})
    data["indexing_strategy"] = IndexingStrategy(**data.get("indexing_strategy") or {})
    data["enrichment"] = EnrichmentSettings(**data.get("enrichment") or {})
    data["created_at"] = from_iso(data["created_at"])
    data["updated_at"] = from_iso(data["updated_at"])
    known = KnowledgeBase.__dataclass_fields__
    return KnowledgeBase(**{k: v for k, v in data.items() if k in known})


class DynamoKnowledgeBaseRepo:
    def __init__(self, models: Models):
        self.model = models.kb

    def get(self, kb_id: str) -> KnowledgeBase | None:
        try:
            return kb_from_body(self.model.get(kb_id).body)
        except DoesNotExist:
            return None

    def put(self, kb: KnowledgeBase) -> None:
        self.model(kb.id, tenant_id=kb.tenant_id, name=kb.name, body=kb_to_body(kb)).save()

    def by_name(self, tenant_id: str, name: str) -> KnowledgeBase | None:
        for item in self.model.tenant_index.query(tenant_id, self.model.name == name, limit=1):
            return kb_from_body(item.body)
        return None

    def list(self, tenant_id: str) -> list[KnowledgeBase]:
        return [kb_from_body(item.body) for item in self.model.tenant_index.query(tenant_id)]

    def delete(self, kb_id: str) -> None:
        self.model(kb_id).delete()


# ---------------------------------------------------------------- knowledge


class DynamoKnowledgeRepo:
    def __init__(self, models: Models, region: str):
        self.model = models.knowledge
        self.dedupe = models.dedupe
        self.tenant = models.tenant
        self.connection = Connection(region=region)

    # -- mapping
    def _to_item(self, k: Knowledge) -> Any:
        return self.model(
            k.id,
            tenant_id=k.tenant_id,
            kb_id=k.kb_id,
            type=k.type.value,
            title=k.title,
            description=k.description,
            source=k.source,
            file_name=k.file_name,
            file_type=k.file_type,
            file_size=k.file_size,
            file_hash=k.file_hash,
            file_path=k.file_path,
            parse_status=k.parse_status.value,
            enable_status=k.enable_status.value,
            summary_status=k.summary_status.value,
            error_message=k.error_message,
            error_code=k.error_code,
            attempt=k.attempt,
            pending_subtasks_count=k.pending_subtasks_count,
            queued_stage=k.queued_stage,
            queued_at=k.queued_at,
            enrichment=k.enrichment,
            enable_multimodel=k.enable_multimodel,
            meta=k.metadata,
            process_overrides=k.process_overrides,
            tag_ids=k.tag_ids,
            channel=k.channel,
            folder_path=k.folder_path,
            storage_size=k.storage_size,
            chunk_count=k.chunk_count,
            dedupe_key=k.dedupe_key,
            created_at=to_iso(k.created_at),
            updated_at=to_iso(k.updated_at),
            processed_at=_iso_or_none(k.processed_at),
            inflight="1"
            if is_in_flight(k.parse_status)
            else (DELETING_MARKER if k.parse_status == ParseStatus.DELETING else None),
            kb_source=f"{k.kb_id}#{listing_source(k.type)}",
            kb_type=f"{k.kb_id}#{k.file_type}" if k.file_type else None,
        )

    @staticmethod
    def _from_item(item: Any) -> Knowledge:
        return Knowledge(
            id=item.id,
            tenant_id=item.tenant_id,
            kb_id=item.kb_id,
            type=KnowledgeType(item.type),
            title=item.title or "",
            description=item.description or "",
            source=item.source or "",
            file_name=item.file_name or "",
            file_type=item.file_type or "",
            file_size=int(item.file_size or 0),
            file_hash=item.file_hash or "",
            file_path=item.file_path or "",
            parse_status=ParseStatus(item.parse_status),
            enable_status=EnableStatus(item.enable_status),
            summary_status=SummaryStatus(item.summary_status or "none"),
            error_message=item.error_message or "",
            error_code=item.error_code or "",
            attempt=int(item.attempt or 1),
            pending_subtasks_count=int(item.pending_subtasks_count or 0),
            queued_stage=item.queued_stage or "",
            queued_at=item.queued_at or "",
            enrichment=dict(item.enrichment or {}),
            enable_multimodel=bool(item.enable_multimodel),
            metadata=dict(item.meta or {}),
            process_overrides=dict(item.process_overrides or {}),
            tag_ids=list(item.tag_ids or []),
            channel=item.channel or "api",
            folder_path=item.folder_path or "",
            storage_size=int(item.storage_size or 0),
            chunk_count=int(item.chunk_count or 0),
            dedupe_key=item.dedupe_key or "",
            created_at=from_iso(item.created_at),
            updated_at=from_iso(item.updated_at),
            processed_at=from_iso(item.processed_at) if item.processed_at else None,
        )

    # -- reads
    def get(self, knowledge_id: str) -> Knowledge | None:
        try:
            return self._from_item(self.model.get(knowledge_id, consistent_read=True))
        except DoesNotExist:
            return None

    def find_duplicate(self, dedupe_key: str) -> Knowledge | None:
        try:
            claim = self.dedupe.get(dedupe_key, consistent_read=True)
        except DoesNotExist:
            return None
        holder = self.get(claim.knowledge_id)
        return holder if holder and self._holds_claim(holder) else None

    @staticmethod
    def _holds_claim(k: Knowledge) -> bool:
        return holds_dedupe_claim(k.parse_status)

    def list_by_kb(self, kb_id: str, page: int, page_size: int) -> Page:
        items = [self._from_item(i) for i in self.model.kb_index.query(kb_id, scan_index_forward=False)]
        start = (page - 1) * page_size
        return Page(items[start : start + page_size], len(items), page, page_size)

    def page_by_kb(
        self,
        kb_id: str,
        *,
        index: tuple[str, str] | None = None,
        created_from: str | None = None,
        created_to: str | None = None,
        after: tuple[str, str] | None = None,
        limit: int = 20,
    ) -> list[Knowledge]:
        m = self.model
        if index is None:
            gsi, hash_name, hash_value = m.kb_index, "kb_id", kb_id
        elif index[0] == "source":
            gsi, hash_name, hash_value = m.kb_source_index, "kb_source", f"{kb_id}#{index[1]}"
        elif index[0] == "file_type":
            gsi, hash_name, hash_value = m.kb_type_index, "kb_type", f"{kb_id}#{index[1]}"
        else:
            raise ValueError(f"no listing index {index[0]!r}")
        condition = None
        if created_from is not None and created_to is not None:
            condition = m.created_at.between(created_from, created_to)
        elif created_from is not None:
            condition = m.created_at >= created_from
        elif created_to is not None:
            condition = m.created_at <= created_to
        start = None
        if after is not None:
            start = {
                "id": {"S": after[1]},
                hash_name: {"S": hash_value},
                "created_at": {"S": after[0]},
            }
        query = gsi.query(
            hash_value,
            condition,
            scan_index_forward=False,
            limit=limit,
            page_size=limit,
            last_evaluated_key=start,
        )
        return [self._from_item(i) for i in query]

    def get_many(self, knowledge_ids: Sequence[str]) -> dict[str, Knowledge]:
        items = self.model.batch_get(list(dict.fromkeys(knowledge_ids)), consistent_read=True)
        return {item.id: self._from_item(item) for item in items}

    def backfill_listing_keys(self) -> int:
        """One-off migration (scripts/backfill_listing_keys.py): rows written before the listing GSIs get
        `kb_source` and `kb_type`. A scan, run once at deploy;
        safe to run again (rows that have the keys are left alone). Returns the rows updated."""
        m = self.model
        updated = 0
        for item in m.scan(m.kb_source.does_not_exist()):
            knowledge = self._from_item(item)
            actions = [m.kb_source.set(f"{knowledge.kb_id}#{listing_source(knowledge.type)}")]
            if knowledge.file_type:
                actions.append(m.kb_type.set(f"{knowledge.kb_id}#{knowledge.file_type}"))
            if self._update(knowledge.id, actions, m.kb_id == knowledge.kb_id) is not None:
                updated += 1
        return updated

    def in_flight_older_than(self, cutoff_iso: str) -> list[Knowledge]:
        query = self.model.inflight_index.query("1", self.model.updated_at < cutoff_iso)
        return [self._from_item(i) for i in query]

    def summaries_processing_older_than(self, cutoff_iso: str) -> list[Knowledge]:
        query = self.model.summary_index.query("1", self.model.updated_at < cutoff_iso)
        return [self._from_item(i) for i in query]

    # -- create
    def insert(self, knowledge: Knowledge) -> None:
        """Claim the dedupe key and insert the row in one transaction: two racing uploads of the same
        content cannot both win, because only one conditional put of the claim can succeed.

            upload A: claim(key) ok ─ insert(A) ok ─ commit
            upload B: claim(key) ✗ (A holds it) ─ nothing written ─ 409 with A
        """
        item = self._to_item(knowledge)
        if not knowledge.dedupe_key:
            item.save(condition=self.model.id.does_not_exist())
            return
        claim = self.dedupe(knowledge.dedupe_key, knowledge_id=knowledge.id)
        for attempt in range(5):
            try:
                with TransactWrite(connection=self.connection) as tx:
                    tx.save(claim, condition=self.dedupe.dedupe_key.does_not_exist())
                    tx.save(item, condition=self.model.id.does_not_exist())
                return
            except TransactWriteError as error:
                if _transaction_conflict(error):
                    time.sleep(0.05 * (attempt + 1))
                    continue
                if not _condition_failed(error):
                    raise
            holder_id = self._claim_holder(knowledge.dedupe_key)
            if holder_id is None:
                continue  # the claim vanished between our write and read: try again
            holder = self.get(holder_id)
            if holder is not None and self._holds_claim(holder):
                raise DuplicateKnowledge(holder)
            # A failed or deleted row holds the claim: take it over, guarded on the old holder.
            try:
                with TransactWrite(connection=self.connection) as tx:
                    tx.save(claim, condition=self.dedupe.knowledge_id == holder_id)
                    tx.save(item, condition=self.model.id.does_not_exist())
                return
            except TransactWriteError as error:
                if not (_condition_failed(error) or _transaction_conflict(error)):
                    raise
        raise RuntimeError(f"could not claim dedupe key {knowledge.dedupe_key} after 5 tries")

    def _claim_holder(self, dedupe_key: str) -> str | None:
        try:
            return str(self.dedupe.get(dedupe_key, consistent_read=True).knowledge_id)
        except DoesNotExist:
            return None

    def delete(self, knowledge_id: str) -> bool:
        """Deletes the row, releases its dedupe claim and takes its bytes off the tenant's usage, in one
        transaction: a retried delete can neither release a claim another row holds nor count twice.

            delete A: row A exists ─ claim held by A ─ tenant usage -= A.size ─ commit
            retry:    row A gone  ─ nothing to do (False)
        """
        for _ in range(5):
            knowledge = self.get(knowledge_id)
            if knowledge is None:
                return False
            try:
                with TransactWrite(connection=self.connection) as tx:
                    tx.delete(self.model(knowledge_id), condition=self.model.id.exists())
                    if knowledge.dedupe_key and self._claim_holder(knowledge.dedupe_key) == knowledge_id:
                        tx.delete(
                            self.dedupe(knowledge.dedupe_key),
                            condition=self.dedupe.knowledge_id == knowledge_id,
                        )
                    if knowledge.storage_size:
                        tx.update(
                            self.tenant(knowledge.tenant_id),
                            actions=[self.tenant.storage_used.add(-knowledge.storage_size)],
                            condition=self.tenant.id.exists(),
                        )
                return True
            except TransactWriteError as error:
                if not (_condition_failed(error) or _transaction_conflict(error)):
                    raise
                time.sleep(0.05)  # the row or the claim changed under us: read again
        raise RuntimeError(f"could not delete knowledge {knowledge_id} after 5 tries")

    def deleting_older_than(self, cutoff_iso: str) -> list[Knowledge]:
        query = self.model.inflight_index.query(DELETING_MARKER, self.model.updated_at < cutoff_iso)
        return [self._from_item(i) for i in query]

    def publish(self, knowledge_id: str) -> Knowledge | None:
        m = self.model
        return self._update(
            knowledge_id,
            [m.parse_status.set(ParseStatus.PENDING.value), m.updated_at.set(now_iso()), m.inflight.set("1")],
            m.parse_status == ParseStatus.DRAFT.value,
        )

    # -- transitions
    def _update(self, knowledge_id: str, actions: list[Any], condition: Any) -> Knowledge | None:
        item = self.model(knowledge_id)
        try:
            item.update(actions=actions, condition=condition & self.model.id.exists())
        except UpdateError as error:
            if _condition_failed(error):
                return None
            raise
        return self._from_item(item)

    def begin_processing(self, knowledge_id: str, attempt: int) -> Knowledge | None:
        m = self.model
        return self._update(
            knowledge_id,
            [
                m.parse_status.set(ParseStatus.PROCESSING.value),
                m.error_message.set(""),
                m.error_code.set(""),
                m.updated_at.set(now_iso()),
                m.inflight.set("1"),
            ],
            (m.attempt == attempt) & m.parse_status.is_in(*_values(BEGIN_PROCESSING_FROM)),
        )

    def mark_failed(self, knowledge_id: str, attempt: int | None, message: str, code: str) -> bool:
        m = self.model
        condition = m.parse_status.is_in(*_values(FAIL_FROM))
        if attempt is not None:
            condition &= m.attempt == attempt
        return (
            self._update(
                knowledge_id,
                [
                    m.parse_status.set(ParseStatus.FAILED.value),
                    m.error_message.set(message[:2000]),
                    m.error_code.set(code),
                    m.pending_subtasks_count.set(0),
                    m.updated_at.set(now_iso()),
                    m.inflight.remove(),
                ],
                condition,
            )
            is not None
        )

    def mark_indexed(
        self, knowledge_id: str, attempt: int, *, chunk_count: int, storage_size: int, completed: bool
    ) -> bool:
        m = self.model
        now = now_iso()
        actions = [
            m.enable_status.set(EnableStatus.ENABLED.value),
            m.chunk_count.set(chunk_count),
            m.storage_size.set(storage_size),
            m.processed_at.set(now),
            m.updated_at.set(now),
        ]
        if completed:
            actions += [m.parse_status.set(ParseStatus.COMPLETED.value), m.inflight.remove()]
        condition = (m.attempt == attempt) & m.parse_status.is_in(*_values(MARK_INDEXED_FROM))
        return self._update(knowledge_id, actions, condition) is not None

    def _new_attempt_actions(self) -> list[Any]:
        """attempt+1, pending and disabled, errors, description and counters cleared."""
        m = self.model
        return [
            m.attempt.add(1),
            m.parse_status.set(ParseStatus.PENDING.value),
            m.enable_status.set(EnableStatus.DISABLED.value),
            m.error_message.set(""),
            m.error_code.set(""),
            m.description.set(""),
            m.processed_at.remove(),
            m.pending_subtasks_count.set(0),
            m.done_subtasks.remove(),
            m.chunk_count.set(0),
            m.updated_at.set(now_iso()),
            m.inflight.set("1"),
        ]

    def restart_attempt(
        self, knowledge_id: str, attempt: int, from_statuses: frozenset[ParseStatus]
    ) -> Knowledge | None:
        m = self.model
        # redrive A ─ row at attempt N, failed ─ attempt N+1 ─ commit
        # redrive B ─ reads the same dead message (attempt N) ─ condition fails: the row moved on ─ None
        condition = (m.attempt == attempt) & m.parse_status.is_in(*_values(from_statuses))
        return self._update(knowledge_id, self._new_attempt_actions(), condition)

    def reset_for_reparse(self, knowledge_id: str, process_overrides: Mapping[str, Any] | None) -> Knowledge:
        m = self.model
        actions = self._new_attempt_actions()
        if process_overrides is not None:
            actions.append(m.process_overrides.set(dict(process_overrides)))
        condition = m.parse_status.is_in(*_values(REPARSE_FROM))
        updated = self._update(knowledge_id, actions, condition)
        if updated is None:
            raise LookupError(knowledge_id)
        return updated

    def mark_deleting(self, knowledge_id: str) -> Knowledge | None:
        m = self.model
        updated = self._update(
            knowledge_id,
            [
                m.parse_status.set(ParseStatus.DELETING.value),
                m.pending_subtasks_count.set(0),
                m.updated_at.set(now_iso()),
                m.inflight.set(DELETING_MARKER),  # housekeeping re-drives a delete whose task was lost
                m.summary_inflight.remove(),
            ],
            m.parse_status.is_in(*_values(DELETE_FROM)),
        )
        if updated is not None:
            return updated
        current = self.get(knowledge_id)
        return current if current is not None and current.parse_status == ParseStatus.DELETING else None

    def cancel(self, knowledge_id: str, message: str) -> Knowledge | None:
        m = self.model
        return self._update(
            knowledge_id,
            [
                m.parse_status.set(ParseStatus.CANCELLED.value),
                m.error_message.set(message),
                m.error_code.set("CANCELLED"),
                m.pending_subtasks_count.set(0),
                m.updated_at.set(now_iso()),
                m.inflight.remove(),
            ],
            m.parse_status.is_in(*_values(CANCEL_FROM)),
        )

    def settle_plan(
        self,
        knowledge_id: str,
        attempt: int,
        count: int,
        plan: Mapping[str, Any],
        *,
        summary_pending: bool = False,
    ) -> Knowledge | None:
        m = self.model
        now = now_iso()
        actions: list[Any] = [m.enrichment.set(dict(plan)), m.updated_at.set(now)]
        if summary_pending:
            actions += [m.summary_status.set(SummaryStatus.PENDING.value), m.summary_inflight.remove()]
        if count > 0:
            actions += [
                m.parse_status.set(ParseStatus.FINALIZING.value),
                m.pending_subtasks_count.set(count),
                m.error_message.set(""),
                m.done_subtasks.remove(),
            ]
        else:
            actions += [
                m.parse_status.set(ParseStatus.COMPLETED.value),
                m.pending_subtasks_count.set(0),
                m.inflight.remove(),
            ]
        # planner A ─ processing, attempt N ─ finalizing(count) ─ answers the plan
        # planner A' (a second copy) ─ condition fails: it answers the plan now stored on the row
        # cancel / reparse first ─ condition fails: the plan is answered "skipped", nothing runs
        condition = (m.attempt == attempt) & (m.parse_status == ParseStatus.PROCESSING.value)
        return self._update(knowledge_id, actions, condition)

    def release_slot(self, knowledge_id: str, attempt: int, subtask_id: str) -> int | None:
        m = self.model
        # worker ─ work durable ─ release (count 2→1, subtask added) ─ SendTaskSuccess
        # redelivered ─ subtask already in done_subtasks ─ condition fails: counted once
        # timed out meanwhile ─ the machine's Catch released it first ─ condition fails: counted once
        condition = (
            (m.attempt == attempt)
            & (m.parse_status == ParseStatus.FINALIZING.value)
            & (m.pending_subtasks_count > 0)
            & ~m.done_subtasks.contains(subtask_id)
        )
        updated = self._update(
            knowledge_id,
            [
                m.pending_subtasks_count.set(m.pending_subtasks_count - 1),
                m.done_subtasks.add({subtask_id}),
                m.updated_at.set(now_iso()),
            ],
            condition,
        )
        return None if updated is None else updated.pending_subtasks_count

    def promote(self, knowledge_id: str, attempt: int) -> bool:
        m = self.model
        condition = (
            (m.attempt == attempt)
            & (m.parse_status == ParseStatus.FINALIZING.value)
            & (m.pending_subtasks_count == 0)
        )
        actions = [
            m.parse_status.set(ParseStatus.COMPLETED.value),
            m.updated_at.set(now_iso()),
            m.inflight.remove(),
        ]
        return self._update(knowledge_id, actions, condition) is not None

    def update_fields(self, knowledge_id: str, fields: Mapping[str, Any]) -> Knowledge | None:
        m = self.model
        attributes = {
            "title": m.title,
            "description": m.description,
            "metadata": m.meta,
            "tag_ids": m.tag_ids,
            "enable_status": m.enable_status,
            "file_path": m.file_path,
            "file_size": m.file_size,
            "file_hash": m.file_hash,
            "enrichment": m.enrichment,
        }
        actions = [attributes[name].set(value) for name, value in fields.items()]
        actions.append(m.updated_at.set(now_iso()))
        return self._update(knowledge_id, actions, m.parse_status != ParseStatus.DELETING.value)

    def mark_queued(self, knowledge_id: str, attempt: int, stage: str, visible_at: str) -> None:
        m = self.model
        self._update(
            knowledge_id,
            [m.queued_stage.set(stage), m.queued_at.set(visible_at)],
            (m.attempt == attempt) & m.parse_status.is_in(*IN_FLIGHT),
        )

    def set_summary_status(
        self, knowledge_id: str, status: str, *, only_if: str | None = None, description: str | None = None
    ) -> bool:
        m = self.model
        actions = [m.summary_status.set(status), m.updated_at.set(now_iso())]
        actions.append(
            m.summary_inflight.set("1")
            if status == SummaryStatus.PROCESSING.value
            else m.summary_inflight.remove()
        )
        if description is not None:
            actions.append(m.description.set(description))
        condition = m.id.exists() if only_if is None else (m.summary_status == only_if)
        return self._update(knowledge_id, actions, condition) is not None

    def move_to_kb(
        self, knowledge_id: str, from_kb_id: str, to_kb_id: str, dedupe_key: str
    ) -> Knowledge | None:
        """One transaction: the row (kb, claim key, tags cleared, only while completed in `from_kb_id`), the
        target's claim (new, ours already, or taken over from a failed or missing holder) and the release
        of the old claim, so two moves into the same knowledge base cannot both keep the same content."""
        m = self.model
        for _ in range(5):
            row = self.get(knowledge_id)
            if row is None or row.kb_id != from_kb_id or row.parse_status != ParseStatus.COMPLETED:
                return None
            holder_id = self._claim_holder(dedupe_key) if dedupe_key else None
            if holder_id is None:
                claim_condition = self.dedupe.dedupe_key.does_not_exist()
            else:
                if holder_id != knowledge_id:
                    holder = self.get(holder_id)
                    if holder is not None and self._holds_claim(holder):
                        raise DuplicateKnowledge(holder)
                claim_condition = self.dedupe.knowledge_id == holder_id
            release = (
                row.dedupe_key
                and row.dedupe_key != dedupe_key
                and self._claim_holder(row.dedupe_key) == knowledge_id
            )
            try:
                with TransactWrite(connection=self.connection) as tx:
                    tx.update(
                        m(knowledge_id),
                        actions=[
                            m.kb_id.set(to_kb_id),
                            m.dedupe_key.set(dedupe_key),
                            m.tag_ids.set([]),
                            m.updated_at.set(now_iso()),
                            # the listing keys carry the knowledge base
                            m.kb_source.set(f"{to_kb_id}#{listing_source(row.type)}"),
                            *([m.kb_type.set(f"{to_kb_id}#{row.file_type}")] if row.file_type else []),
                        ],
                        condition=(m.kb_id == from_kb_id) & (m.parse_status == ParseStatus.COMPLETED.value),
                    )
                    if dedupe_key:
                        tx.save(self.dedupe(dedupe_key, knowledge_id=knowledge_id), condition=claim_condition)
                    if release:
                        tx.delete(
                            self.dedupe(row.dedupe_key), condition=self.dedupe.knowledge_id == knowledge_id
                        )
                return self.get(knowledge_id)
            except TransactWriteError as error:
                if not (_condition_failed(error) or _transaction_conflict(error)):
                    raise
                time.sleep(0.05)  # the row or a claim changed under us: read again
        raise RuntimeError(f"could not move knowledge {knowledge_id} after 5 tries")


# ---------------------------------------------------------------- chunks


def chunk_to_body(chunk: Chunk) -> dict[str, Any]:
    body = asdict(chunk)
    body["created_at"] = to_iso(chunk.created_at)
    return body


def chunk_from_body(body: Mapping[str, Any]) -> Chunk:
    data = dict(body)
    data["chunk_type"] = ChunkType(data.get("chunk_type", "text"))
    data["created_at"] = from_iso(data["created_at"])
    return Chunk(**data)


class DynamoChunkRepo:
    def __init__(self, models: Models):
        self.model = models.chunk

    def _items(self, knowledge_id: str) -> list[Any]:
        return list(self.model.query(knowledge_id, consistent_read=True))

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
        with self.model.batch_write() as batch:
            for chunk in chunks:
                batch.save(self.model(chunk.knowledge_id, chunk.id, body=chunk_to_body(chunk)))

    def delete_all(self, knowledge_id: str) -> int:
        items = self._items(knowledge_id)
        with self.model.batch_write() as batch:
            for item in items:
                batch.delete(item)
        return len(items)

    def replace_all(self, knowledge_id: str, chunks: Sequence[Chunk]) -> None:
        keep = {c.id for c in chunks}
        stale = [item for item in self._items(knowledge_id) if item.chunk_id not in keep]
        with self.model.batch_write() as batch:
            for item in stale:
                batch.delete(item)
            for chunk in chunks:
                batch.save(self.model(chunk.knowledge_id, chunk.id, body=chunk_to_body(chunk)))


# ---------------------------------------------------------------- tasks

TASK_TTL_SECONDS = 30 * 24 * 3600


def task_to_body(task: Task) -> dict[str, Any]:
    body = asdict(task)
    body["created_at"] = to_iso(task.created_at)
    body["updated_at"] = to_iso(task.updated_at)
    return body


def task_from_body(body: Mapping[str, Any]) -> Task:
    data = dict(body)
    data["kind"] = TaskKind(data["kind"])
    data["status"] = TaskStatus(data["status"])
    data["created_at"] = from_iso(data["created_at"])
    data["updated_at"] = from_iso(data["updated_at"])
    return Task(**data)


class DynamoTaskRepo:
    def __init__(self, models: Models):
        self.model = models.task

    def put(self, task: Task) -> None:
        self.model(
            task.id,
            tenant_id=task.tenant_id,
            done=task.done,
            body=task_to_body(task),
            expires_at=int(time.time()) + TASK_TTL_SECONDS,
        ).save(condition=self.model.id.does_not_exist())

    def get(self, task_id: str) -> Task | None:
        try:
            return task_from_body(self.model.get(task_id, consistent_read=True).body)
        except DoesNotExist:
            return None

    def save_progress(self, task: Task) -> bool:
        m = self.model
        try:
            m(task.id).update(
                actions=[m.done.set(task.done), m.body.set(task_to_body(task))],
                condition=m.id.exists() & (m.done <= task.done),
            )
        except UpdateError as error:
            if _condition_failed(error):
                return False
            raise
        return True


# ---------------------------------------------------------------- graph


def _graph_key(*parts: str) -> str:
    return "#".join(p.replace("#", " ") for p in parts)


class DynamoGraphRepo:
    def __init__(self, models: Models):
        self.model = models.graph

    def add(
        self,
        kb_id: str,
        knowledge_id: str,
        entities: Sequence[tuple[str, list[str], str]],
        relations: Sequence[tuple[str, str, str, str]],
    ) -> None:
        m = self.model
        for name, attributes, chunk_id in entities:
            key = _graph_key("n", entity_key(name), knowledge_id)
            actions = [m.knowledge_id.set(knowledge_id), m.name.set(name), m.chunk_ids.add({chunk_id})]
            if attributes:
                actions.append(m.attributes.add(set(attributes)))
            m(kb_id, key).update(actions=actions)
        for source, relation, target, chunk_id in relations:
            a, b = entity_key(source), entity_key(target)
            for key, name, other in (
                (_graph_key("e", a, relation.casefold(), b, knowledge_id), source, target),
                (_graph_key("r", b, relation.casefold(), a, knowledge_id), target, source),
            ):
                m(kb_id, key).update(
                    actions=[
                        m.knowledge_id.set(knowledge_id),
                        m.name.set(name),
                        m.other.set(other),
                        m.relation.set(relation),
                        m.chunk_ids.add({chunk_id}),
                    ]
                )

    def neighbourhood(self, kb_id: str, entity: str, limit: int = 50) -> GraphNeighbourhood:
        key = entity_key(entity)
        node = self._node(kb_id, key)
        edges: list[GraphEdge] = []
        merged: dict[tuple[str, str, str], set[str]] = {}
        for prefix, forward in (("e", True), ("r", False)):
            for item in self.model.query(
                kb_id, self.model.key.startswith(_graph_key(prefix, key) + "#"), limit=limit * 4
            ):
                triple = (
                    (item.name, item.relation, item.other)
                    if forward
                    else (item.other, item.relation, item.name)
                )
                merged.setdefault(triple, set()).add(item.knowledge_id)
        for (source, relation, target), knowledge_ids in list(merged.items())[:limit]:
            edges.append(GraphEdge(source, relation, target, sorted(knowledge_ids)))
        others = {entity_key(e.target if entity_key(e.source) == key else e.source) for e in edges}
        neighbours = [
            n for n in (self._node(kb_id, other) for other in sorted(others)[:limit]) if n is not None
        ]
        return GraphNeighbourhood(node, edges, neighbours)

    def _node(self, kb_id: str, key: str) -> GraphNode | None:
        items = list(self.model.query(kb_id, self.model.key.startswith(_graph_key("n", key) + "#")))
        if not items:
            return None
        return GraphNode(
            name=items[0].name,
            attributes=sorted({a for i in items for a in (i.attributes or set())}),
            chunk_ids=sorted({c for i in items for c in (i.chunk_ids or set())}),
            knowledge_ids=sorted({i.knowledge_id for i in items}),
        )

    def delete_knowledge(self, kb_id: str, knowledge_id: str) -> int:
        items = [i for i in self.model.knowledge_index.query(knowledge_id) if i.kb_id == kb_id]
        with self.model.batch_write() as batch:
            for item in items:
                batch.delete(self.model(item.kb_id, item.key))
        return len(items)

    def keep_only_attempt(self, kb_id: str, knowledge_id: str, chunk_prefix: str) -> int:
        m = self.model
        removed = 0
        # The index holds keys only: the facts themselves are read (consistently) for their chunk ids.
        keys = [(i.kb_id, i.key) for i in m.knowledge_index.query(knowledge_id) if i.kb_id == kb_id]
        for item in m.batch_get(keys, consistent_read=True):
            chunk_ids = set(item.chunk_ids or ())
            stale = {c for c in chunk_ids if not c.startswith(chunk_prefix)}
            if not stale:
                continue
            fact = m(item.kb_id, item.key)
            try:  # a set DELETE is atomic: an id added meanwhile stays
                fact.update(actions=[m.chunk_ids.delete(stale)], condition=m.knowledge_id.exists())
            except UpdateError as error:
                if not _condition_failed(error):
                    raise
                continue  # already gone
            if chunk_ids - stale:
                continue
            try:  # only while no chunk id came in since: DynamoDB drops a set emptied by DELETE
                fact.delete(condition=m.chunk_ids.does_not_exist())
                removed += 1
            except DeleteError as error:
                if not _condition_failed(error):
                    raise
        return removed


# ---------------------------------------------------------------- wiki


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

    def finish_op(self, kb_id: str, knowledge_id: str, attempt: int) -> None:
        m = self.model
        try:
            m(kb_id, f"op#{knowledge_id}").delete(condition=m.attempt == attempt)
        except DeleteError as error:
            if not _condition_failed(error):
                raise

    def put_pages(self, kb_id: str, knowledge_id: str, pages: Sequence[WikiPageRecord]) -> None:
        self.delete_pages(kb_id, knowledge_id)
        with self.model.batch_write() as batch:
            for n, page in enumerate(pages):
                batch.save(self.model(kb_id, f"page#{knowledge_id}#{n:03d}", body=asdict(page)))

    def delete_pages(self, kb_id: str, knowledge_id: str) -> None:
        items = list(self.model.query(kb_id, self.model.key.startswith(f"page#{knowledge_id}#")))
        with self.model.batch_write() as batch:
            for item in items:
                batch.delete(item)

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
            created_at, knowledge_id = item.key[len(prefix) :].split("#", 1)
            out.append((created_at, knowledge_id))
        return out

    def delete_kb(self, kb_id: str) -> int:
        items = list(self.model.query(kb_id, attributes_to_get=["kb_id", "key"]))
        with self.model.batch_write() as batch:
            for item in items:
                batch.delete(item)
        return len(items)


# ---------------------------------------------------------------- spans


def span_to_body(span: Span) -> dict[str, Any]:
    body = asdict(span)
    for key in ("started_at", "ended_at", "updated_at"):
        body[key] = _iso_or_none(body[key])
    return body


def span_from_body(body: Mapping[str, Any]) -> Span:
    data = dict(body)
    data["kind"] = SpanKind(data["kind"])
    data["status"] = SpanStatus(data["status"])
    for key in ("started_at", "ended_at", "updated_at"):
        data[key] = from_iso(data[key]) if data.get(key) else None
    return Span(**data)


class DynamoSpanRepo:
    def __init__(self, models: Models):
        self.model = models.span

    @staticmethod
    def _key(attempt: int, span_id: str) -> str:
        return f"{attempt:06d}#{span_id}"

    def put(self, span: Span) -> None:
        self.model(
            span.knowledge_id,
            self._key(span.attempt, span.span_id),
            body=span_to_body(span),
            updated_at=to_iso(span.updated_at),
        ).save()

    def get(self, knowledge_id: str, attempt: int, span_id: str) -> Span | None:
        try:
            return span_from_body(
                self.model.get(knowledge_id, self._key(attempt, span_id), consistent_read=True).body
            )
        except DoesNotExist:
            return None

    def get_many(self, knowledge_id: str, attempt: int, span_ids: Sequence[str]) -> dict[str, Span]:
        keys = [(knowledge_id, self._key(attempt, span_id)) for span_id in dict.fromkeys(span_ids)]
        spans = (span_from_body(item.body) for item in self.model.batch_get(keys, consistent_read=True))
        return {span.span_id: span for span in spans}

    def list(self, knowledge_id: str, attempt: int) -> list[Span]:
        prefix = f"{attempt:06d}#"
        query = self.model.query(knowledge_id, self.model.span_key.startswith(prefix), consistent_read=True)
        return [span_from_body(item.body) for item in query]

    def delete_all(self, knowledge_id: str) -> int:
        items = list(self.model.query(knowledge_id, attributes_to_get=["knowledge_id", "span_key"]))
        with self.model.batch_write() as batch:
            for item in items:
                batch.delete(item)
        return len(items)

    def latest_attempt(self, knowledge_id: str) -> int:
        for item in self.model.query(knowledge_id, scan_index_forward=False, limit=1):
            return int(item.span_key.split("#", 1)[0])
        return 0

    def last_activity_iso(self, knowledge_id: str) -> str | None:
        latest = None
        for item in self.model.query(knowledge_id, attributes_to_get=["updated_at", "span_key"]):
            if latest is None or item.updated_at > latest:
                latest = item.updated_at
        return latest


__all__ = [
    "DuplicateKnowledge",
    "DynamoApiKeyRepo",
    "DynamoChunkRepo",
    "DynamoGraphRepo",
    "DynamoKnowledgeBaseRepo",
    "DynamoKnowledgeRepo",
    "DynamoSpanRepo",
    "DynamoTagRepo",
    "DynamoTaskRepo",
    "DynamoTenantRepo",
    "DynamoWikiRepo",
    "Models",
    "PutError",
    "build_models",
]
