"""The tables as PynamoDB models (built per settings, one shared connection) and the condition and
transaction helpers every repository uses."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
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
    TableError,
    TransactWriteError,
)
from pynamodb.indexes import AllProjection, GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model

from chalicelib.domain.clock import to_iso
from chalicelib.domain.types import (
    IN_FLIGHT_STATUSES,
    ParseStatus,
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


#: connections the process's one DynamoDB client keeps open
MAX_POOL_CONNECTIONS = 64


@functools.cache
def shared_connection(region: str, endpoint_url: str) -> Connection:
    """The process's PynamoDB Connection for :func:`share_one_connection` (its client is built once)."""
    # every thread of the process shares it (see bootstrap.AWS_MAX_POOL_CONNECTIONS): size its pool so
    # urllib3 does not discard connections ("Connection pool is full") under the API's and stages' threads
    return Connection(region=region, host=endpoint_url or None, max_pool_connections=MAX_POOL_CONNECTIONS)


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
    turns: type[Any] | None = None
    share: type[Any] | None = None
    resource: type[Any] | None = None

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
        document_count = NumberAttribute(default=0)
        storage_quota = NumberAttribute(default=0)
        document_quota = NumberAttribute(default=0)
        requests_per_second = NumberAttribute(default=0)
        #: the documents holding a place in the ingest pipeline: "knowledge_id|lease expiry (epoch s)|ticket"
        pipeline_slots = UnicodeSetAttribute(null=True)
        #: the documents waiting for a place: "knowledge_id|attempt|since|ticket|woken_at" (domain/door.py)
        pipeline_waiters = UnicodeSetAttribute(null=True)
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
        version = NumberAttribute(default=0)
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

    class KbSameFileIndex(GlobalSecondaryIndex[Any]):
        """Files by (kb, type, size, name): `kb_same_file`, set on file rows (sparse), for the second dedupe
        branch of a presigned upload (spec §1.2)."""

        class Meta:
            index_name = "kb-same-file-index"
            projection = KeysOnlyProjection()

        kb_same_file = UnicodeAttribute(hash_key=True)

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
        description_by_user = BooleanAttribute(default=False)
        source = UnicodeAttribute(default="")
        file_name = UnicodeAttribute(default="")
        file_type = UnicodeAttribute(default="")
        file_size = NumberAttribute(default=0)
        file_hash = UnicodeAttribute(default="")
        file_path = UnicodeAttribute(default="")
        storage_backend = UnicodeAttribute(default="")
        parse_status = UnicodeAttribute()
        enable_status = UnicodeAttribute()
        summary_status = UnicodeAttribute(default="none")
        summary_occurrence = UnicodeAttribute(null=True)  # the nonce of the write that set summary_status
        error_message = UnicodeAttribute(default="")
        error_code = UnicodeAttribute(default="")
        attempt = NumberAttribute(default=1)
        pending_subtasks_count = NumberAttribute(default=0)
        done_subtasks = UnicodeSetAttribute(null=True)
        #: embedding fan-out (issue 27): the plan's key, its slices not yet released, the released ones
        embed_plan = NumberAttribute(null=True)
        embed_slices_pending = NumberAttribute(default=0)
        embed_slices_done = UnicodeSetAttribute(null=True)
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
        kb_same_file = UnicodeAttribute(null=True)
        kb_same_file_index = KbSameFileIndex()
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
        body = JSONAttribute(null=True)  # absent only while counters came first (an ADD before the put)
        updated_at = UnicodeAttribute()
        #: counters concurrent workers ADD to (domain/progress.py SPAN_COUNTERS), read into the outputs
        n_entries_indexed = NumberAttribute(null=True)
        n_texts_embedded = NumberAttribute(null=True)
        n_cache_hits = NumberAttribute(null=True)
        n_batches = NumberAttribute(null=True)
        n_slices_done = NumberAttribute(null=True)

    class TaskOpenIndex(GlobalSecondaryIndex[Any]):
        """Sparse: the tasks still queued or running, by since when they wait (housekeeping's re-sends)."""

        class Meta:
            index_name = "open-index"
            projection = KeysOnlyProjection()

        open_shard = UnicodeAttribute(hash_key=True)
        wait_from = UnicodeAttribute(range_key=True)

    class TaskItem(Model):
        class Meta:
            table_name = settings.table("tasks")
            region = settings.region

        id = UnicodeAttribute(hash_key=True)
        tenant_id = UnicodeAttribute()
        done = NumberAttribute(default=0)
        body = JSONAttribute()
        #: the body's status beside it, for the conditions of its saves (absent on items saved before)
        status = UnicodeAttribute(null=True)
        expires_at = NumberAttribute(null=True)  # TTL: finished tasks are kept for 30 days
        #: set only while the task is queued or running (adapters/dynamo/tasks.py); never on an items page
        open_shard = UnicodeAttribute(null=True)
        #: while open: its last save, or housekeeping's last re-send (never its body's updated_at, its progress)
        wait_from = UnicodeAttribute(null=True)
        resends = NumberAttribute(null=True)  # housekeeping's re-sends since its last saved progress
        open_index = TaskOpenIndex()

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

    class TenantKeysIndex(GlobalSecondaryIndex[Any]):
        """A tenant's API keys by hash (sparse: only key items have `tenant_id`), so listing one tenant's
        keys is a Query, not a Scan of every tenant, key and share."""

        class Meta:
            index_name = "tenant-keys-index"
            projection = AllProjection()

        tenant_id = UnicodeAttribute(hash_key=True)
        id = UnicodeAttribute(range_key=True)

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
        #: absent on keys issued before scopes: they are admin keys, limited to no knowledge base
        scope = UnicodeAttribute(null=True)
        kb_ids = ListAttribute(of=UnicodeAttribute, null=True)
        tenant_keys_index = TenantKeysIndex()

    class ShareItem(Model):
        """The tenants a knowledge base is shared with (read-only), in the tenants table under
        `share#<kb_id>` (no `api_key_hash`, so it stays out of the api-key index and tenant listings), and
        its reverse, the knowledge bases shared with a tenant, under `shared-with#<tenant_id>` (`kbs`), which
        also holds the owner tenants that tenant blocks (`blocked`), so a share's add checks them atomically."""

        class Meta:
            table_name = settings.table("tenants")
            region = settings.region

        id = UnicodeAttribute(hash_key=True)
        owner_tenant_id = UnicodeAttribute(null=True)
        tenants = UnicodeSetAttribute(null=True)
        kbs = UnicodeSetAttribute(null=True)
        blocked = UnicodeSetAttribute(null=True)

    del region

    class TurnsItem(Model):
        """Whose turn it is at a stage's door (services/fairness.py): one item per stage."""

        class Meta:
            table_name = settings.table("turns")
            region = settings.region

        stage = UnicodeAttribute(hash_key=True)
        tenants = JSONAttribute(default=dict)
        version = NumberAttribute(default=0)
        expires_at = NumberAttribute(null=True)  # TTL (epoch seconds): a report refresh's book once it ended

    class ResourceOwnerIndex(GlobalSecondaryIndex[Any]):
        class Meta:
            index_name = "owner-index"
            projection = AllProjection()

        owner_id = UnicodeAttribute(hash_key=True)
        id = UnicodeAttribute(range_key=True)

    class ResourceItem(Model):
        """The resource catalog: a resource under its `resource://` id (in the owner index), and an access
        grant under `grant#<sha256 of its token>` (no owner_id, so out of the owner index)."""

        class Meta:
            table_name = settings.table("resources")
            region = settings.region

        id = UnicodeAttribute(hash_key=True)
        kind = UnicodeAttribute()  # "resource" | "grant"
        tenant_id = UnicodeAttribute()
        created_at = UnicodeAttribute()
        # a resource
        url = UnicodeAttribute(null=True)
        owner_kind = UnicodeAttribute(null=True)
        owner_id = UnicodeAttribute(null=True)
        role = UnicodeAttribute(null=True)
        attempt = NumberAttribute(null=True)
        file_name = UnicodeAttribute(null=True)
        content_type = UnicodeAttribute(null=True)
        size = NumberAttribute(null=True)
        deleted_at = UnicodeAttribute(null=True)
        # a grant
        resource_id = UnicodeAttribute(null=True)
        purpose = UnicodeAttribute(null=True)
        expires_at = UnicodeAttribute(null=True)
        minter_tenant_id = UnicodeAttribute(null=True)  # who minted it (absent on older grants)
        minter_key_hash = UnicodeAttribute(null=True)  # with which API key (its sha256)
        purge_at = NumberAttribute(
            null=True
        )  # TTL (epoch seconds): only grants have it, a while after expiry
        owner_index = ResourceOwnerIndex()

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
        TurnsItem,
        ShareItem,
        ResourceItem,
    )


# ---------------------------------------------------------------- tenants and knowledge bases
