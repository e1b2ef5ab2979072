"""Operators' tenant and API-key administration: create a tenant, issue (shown once) and revoke keys, list.

Every operation here is behind the operator key, sent as `X-Operator-Key`: locally the plain
`WEKNORA_OPERATOR_KEY`; on AWS the SSM SecureString `WEKNORA_OPERATOR_KEY_PARAMETER` names (`make deploy`
creates it). With neither configured the admin routes are disabled (403 admin_disabled); while the
parameter does not exist they answer 403 operator_key_missing. Keys are stored as their sha256 only.
"""

from __future__ import annotations

import hmac
import re
import uuid
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from chalicelib.commands import CreateTenantRequest, IssueKeyRequest, KeyAccess, Query, TenantQuotas, code
from chalicelib.domain.answer_size import ANSWER_MAX_BYTES, cut_page
from chalicelib.domain.api_keys import ApiKey, Scope, key_id_of
from chalicelib.domain.clock import to_iso
from chalicelib.domain.errors import BadRequest, Forbidden, NotFound, Unauthorized
from chalicelib.domain.types import Tenant
from chalicelib.observability import logger
from chalicelib.operations.listing import cursor_fields, encode_cursor, listing_fingerprint
from chalicelib.ports import Dependencies
from chalicelib.services.storage_recount import RecountPosition, recount_tenant_page


def authorize_operator(deps: Dependencies, presented: str) -> None:
    settings = deps.settings
    if not settings.operator_key and not settings.operator_key_parameter:
        raise Forbidden("the admin API is disabled: no operator key is configured", code="admin_disabled")
    if not presented:  # before the key is read: a request without one never reaches the parameter store
        raise Unauthorized("missing X-Operator-Key header", code="missing_operator_key")
    expected = deps.operator_key()
    if not expected:
        # the name stays in the log: callers are not yet known to be operators
        logger.warning("operator key parameter missing", extra={"parameter": settings.operator_key_parameter})
        raise Forbidden(
            "the admin API is disabled: the operator key has not been created yet (`make deploy` creates it)",
            code="operator_key_missing",
        )
    if not hmac.compare_digest(presented.encode(), expected.encode()):
        raise Forbidden("invalid operator key", code="invalid_operator_key")


def tenant_view(tenant: Tenant) -> dict[str, Any]:
    return {
        "id": tenant.id,
        "name": tenant.name,
        "created_at": to_iso(tenant.created_at),
        "storage_used": tenant.storage_used,
        "storage_quota": tenant.storage_quota,
        "document_count": tenant.document_count,
        "document_quota": tenant.document_quota,
        "requests_per_second": tenant.requests_per_second,
    }


def key_view(key: ApiKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "tenant_id": key.tenant_id,
        "name": key.name,
        "created_at": to_iso(key.created_at),
        "revoked_at": to_iso(key.revoked_at) if key.revoked_at else None,
        "status": "revoked" if key.revoked else "active",
        "scope": key.scope.value,
        "kb_ids": list(key.kb_ids) if key.kb_ids is not None else None,
    }


def _issue(deps: Dependencies, tenant_id: str, name: str, access: KeyAccess) -> tuple[ApiKey, str]:
    """A key limited to knowledge bases names existing ones of its tenant (a typo would give a key that
    reaches nothing; another tenant's id would never be reachable)."""
    kb_ids = tuple(dict.fromkeys(access.kb_ids)) if access.kb_ids is not None else None
    unknown = [
        kb_id
        for kb_id in kb_ids or ()
        if (kb := deps.kbs.get(kb_id)) is None or kb.tenant_id != tenant_id or kb.status != "active"
    ]
    if unknown:
        raise BadRequest(
            "the key names knowledge bases the tenant does not have",
            code="unknown_kb_id",
            data={"kb_ids": unknown},
        )
    return ApiKey.issue(tenant_id, name, Scope(access.scope), kb_ids)


def _tenant(deps: Dependencies, tenant_id: str) -> Tenant:
    tenant = deps.tenants.get(tenant_id)
    if tenant is None:
        raise NotFound("tenant not found", code="tenant_not_found")
    return tenant


def create_tenant(deps: Dependencies, request: CreateTenantRequest) -> tuple[Tenant, ApiKey, str]:
    """A new tenant and its first key; the secret is returned here and never again."""
    tenant_id = str(uuid.uuid4())
    key, secret = _issue(deps, tenant_id, request.key_name or "primary", request)
    # The key record first: a tenant row never exists without a record of its key.
    deps.api_keys.put(key)
    tenant = Tenant(tenant_id, request.name, key.key_hash)
    tenant.storage_quota, tenant.document_quota = request.storage_quota, request.document_quota
    deps.tenants.put(tenant)
    return tenant, key, secret


class TenantsQuery(Query):
    #: the `next_cursor` of the page before: the id of its last tenant
    cursor: str = code("invalid_cursor", default="", max_length=64)


#: a page of tenants stays under Lambda's 6 MB response (JSON, non-ASCII escaped): every tenant in one
#: answer passed it past ~6,000 tenants with CJK names
TENANTS_PAGE_MAX_BYTES = ANSWER_MAX_BYTES


#: tenants one page reads from the store (then cut to TENANTS_PAGE_MAX_BYTES)
TENANTS_READ = 1000


def tenants_page(deps: Dependencies, query: TenantsQuery) -> tuple[list[Tenant], str | None]:
    """The tenants after the id `query.cursor` in the store's order, at most TENANTS_READ within
    TENANTS_PAGE_MAX_BYTES (one at least), and the id the next page goes on after (None: no more). A page
    reads its tenants, not the table (every page read every tenant, and sorted them)."""
    read = deps.tenants.page(query.cursor, TENANTS_READ)
    page, last = cut_page(read, TENANTS_PAGE_MAX_BYTES, tenant_view)
    if last is None and len(read) == TENANTS_READ:
        last = page[-1]
    return page, last.id if last else None


class KeysQuery(Query):
    limit: int = code("invalid_limit", default=100, ge=1, le=1000)
    #: the `next_cursor` of the page before (opaque: where the store's order goes on, for this tenant)
    cursor: str = code("invalid_cursor", default="", max_length=200)


#: a page of keys stays under Lambda's 6 MB response: 1,000 keys limited to 100 knowledge bases each pass it
KEYS_PAGE_MAX_BYTES = ANSWER_MAX_BYTES
#: keys read a request while `list_keys` walks them all
KEYS_READ_BATCH = 500
#: what a keys cursor holds: a key's sha256, or "" (the store's first key)
_KEY_HASH = re.compile(r"(?:[0-9a-f]{64})?")


def _unrecorded_primary(deps: Dependencies, tenant: Tenant) -> ApiKey | None:
    """The tenant's primary key when it was never issued through here (the local tenant, tenants written
    before keys had records); it gets an id by the same rule, so it can be listed and revoked."""
    record = deps.api_keys.get(tenant.api_key_hash)
    if record is not None and record.tenant_id == tenant.id:
        return None
    return ApiKey(tenant.id, tenant.api_key_hash, "primary", tenant.created_at)


def keys_page(deps: Dependencies, tenant_id: str, query: KeysQuery) -> tuple[list[ApiKey], str | None]:
    """A page of the tenant's keys in the store's order (an unrecorded primary key first, on the first page):
    at most `query.limit`, within KEYS_PAGE_MAX_BYTES (one at least), and the cursor of the next page, which
    goes on after the last key given (None: no more). The store is read a page at a time, never whole."""
    tenant = _tenant(deps, tenant_id)
    fingerprint = _keys_fingerprint(tenant_id)
    after = _keys_after(query.cursor, fingerprint) if query.cursor else None
    primary = _unrecorded_primary(deps, tenant) if after is None else None
    found = ([primary] if primary else []) + deps.api_keys.page(tenant_id, after or "", query.limit + 1)
    page, last = cut_page(found[: query.limit], KEYS_PAGE_MAX_BYTES, key_view)
    if last is None and len(found) > query.limit:
        last = page[-1]
    if last is None:
        return page, None
    # after an unrecorded primary key the store is read from its first key
    return page, _keys_cursor("" if last is primary else last.key_hash, fingerprint)


def _keys_fingerprint(tenant_id: str) -> str:
    return listing_fingerprint("api-keys", tenant_id)


def _keys_cursor(after: str, fingerprint: str) -> str:
    return encode_cursor({"a": [after], "f": fingerprint})


def _keys_after(cursor: str, fingerprint: str) -> str:
    """The key hash a cursor of `_keys_cursor` goes on after ("": the store's first key); BadRequest
    `invalid_cursor` for anything else, or another tenant's cursor."""
    data = cursor_fields(cursor)
    after = data.get("a")
    if (
        data.get("f") != fingerprint
        or not isinstance(after, list)
        or len(after) != 1
        or not isinstance(after[0], str)
        or not _KEY_HASH.fullmatch(after[0])
    ):
        raise BadRequest("cursor is not one this listing gave (for this tenant)", code="invalid_cursor")
    return after[0]


def list_keys(deps: Dependencies, tenant_id: str) -> list[ApiKey]:
    """Every key of the tenant (the unrecorded primary one first), read from the store in batches."""
    tenant = _tenant(deps, tenant_id)
    primary = _unrecorded_primary(deps, tenant)
    keys = [primary] if primary else []
    after = ""
    while True:
        batch = deps.api_keys.page(tenant_id, after, KEYS_READ_BATCH)
        keys += batch
        if len(batch) < KEYS_READ_BATCH:
            return keys
        after = batch[-1].key_hash


def issue_key(deps: Dependencies, tenant_id: str, request: IssueKeyRequest) -> tuple[ApiKey, str]:
    _tenant(deps, tenant_id)
    key, secret = _issue(deps, tenant_id, request.name, request)
    deps.api_keys.put(key)
    return key, secret


def set_quotas(deps: Dependencies, tenant_id: str, request: TenantQuotas) -> Tenant:
    tenant = deps.tenants.set_quotas(
        tenant_id, request.storage_quota, request.document_quota, request.requests_per_second
    )
    if tenant is None:
        raise NotFound("tenant not found", code="tenant_not_found")
    return tenant


def revoke_key(deps: Dependencies, tenant_id: str, key_id: str) -> ApiKey:
    """Revoked at once: authentication reads the key record with a strongly consistent read. Revoking a
    revoked key is a no-op that returns it as it is."""
    key = next((k for k in list_keys(deps, tenant_id) if k.id == key_id), None)
    if key is None:
        raise NotFound("API key not found", code="api_key_not_found")
    if not key.revoked:
        key.revoked_at = datetime.now(UTC)
        deps.api_keys.put(key)
    return key


class StorageRecountQuery(Query):
    #: documents this request recounts (each a listing of its parsed outputs and a few reads)
    limit: int = code("invalid_limit", default=50, ge=1, le=100)
    #: the `next_cursor` of the page before (opaque: where the walk of this tenant's documents goes on)
    cursor: str = code("invalid_cursor", default="", max_length=2000)


class StorageRecountAnswer(BaseModel):
    """The answer of `admin/tenants/{tenant_id}/storage-recount` (a response model: documented, never
    validated): one page of the walk; sum the pages' counts."""

    documents: int = Field(description="documents this page looked at")
    corrected: int = Field(description="documents whose count was set to what they store")
    skipped: int = Field(
        description="documents left as they are: on their way and not yet indexed (their indexing counts "
        "them), or a recount the store deferred (the next recount tries them again)"
    )
    bytes_before: int = Field(description="what this page's documents counted before (bytes)")
    bytes_after: int = Field(description="what they count now (bytes)")
    usage_before: int = Field(description="the tenant's storage_used when this page began")
    usage_after: int = Field(description="the tenant's storage_used when it ended")
    next_cursor: str | None = Field(description="send it back for the next page; null: the walk is done")


def storage_recount(deps: Dependencies, tenant_id: str, query: StorageRecountQuery) -> dict[str, Any]:
    """One page of the tenant's storage recount (services/storage_recount.py): at most `query.limit`
    documents, each set to count what it stores, the tenant's usage moved by the same differences."""
    _tenant(deps, tenant_id)
    fingerprint = listing_fingerprint("storage-recount", tenant_id)
    start = _recount_position(query.cursor, fingerprint) if query.cursor else None
    page = recount_tenant_page(deps, tenant_id, start, query.limit)
    following = page.next
    return StorageRecountAnswer(
        documents=page.documents,
        corrected=page.corrected,
        skipped=page.skipped,
        bytes_before=page.bytes_before,
        bytes_after=page.bytes_after,
        usage_before=page.usage_before,
        usage_after=page.usage_after,
        next_cursor=None
        if following is None
        else encode_cursor({"k": following.kb_after, "r": following.row_after, "f": fingerprint}),
    ).model_dump()


def _recount_position(cursor: str, fingerprint: str) -> RecountPosition:
    """Where a cursor of `storage_recount` goes on; BadRequest `invalid_cursor` for anything else, or
    another tenant's cursor."""
    data = cursor_fields(cursor)

    def pair(value: Any) -> tuple[str, str] | None:
        if value is None:
            return None
        if isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value):
            return value[0], value[1]
        raise BadRequest("cursor is not one this recount gave", code="invalid_cursor")

    if data.get("f") != fingerprint:
        raise BadRequest("cursor is not one this recount gave (for this tenant)", code="invalid_cursor")
    return RecountPosition(pair(data.get("k")), pair(data.get("r")))


__all__ = [
    "authorize_operator",
    "create_tenant",
    "issue_key",
    "key_id_of",
    "key_view",
    "keys_page",
    "list_keys",
    "revoke_key",
    "set_quotas",
    "storage_recount",
    "tenant_view",
]
