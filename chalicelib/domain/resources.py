"""Stable `resource://` references to stored objects and the single-purpose download grants on them
(WeKnora's resource_catalog.go: Register, Bind, MarkDeleted, CreateAccessGrant)."""

from __future__ import annotations

import base64
import hashlib
import unicodedata
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

RESOURCE_SCHEME = "resource://"


def resource_id_for(physical_url: str) -> str:
    """The id of the resource over a stored object: derived from its physical URL (a uuid5, base64url, 22
    characters), so registering the same object again (a retried stage, a second download) finds the
    resource it already has instead of making a second one."""
    raw = uuid.uuid5(uuid.NAMESPACE_URL, physical_url).bytes
    return RESOURCE_SCHEME + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def token_hash(token: str) -> str:
    """What is stored of a grant's token: its SHA-256 (the token itself is shown once, never kept)."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Resource:
    id: str
    url: str  # the physical object (s3://bucket/key, local://key)
    tenant_id: str
    owner_kind: str  # "knowledge" | "faq-import" (owned by its knowledge base)
    owner_id: str
    role: str  # "original" | "parsed" | "image" | "failed-rows"
    attempt: int  # the parse attempt of a parsed Markdown (0 for an original)
    file_name: str
    content_type: str
    size: int
    created_at: datetime
    deleted_at: datetime | None = None

    @property
    def deleted(self) -> bool:
        return self.deleted_at is not None


#: how long an expired grant is kept (answering 410 grant_expired) before the table's TTL removes it (then a
#: 404 grant_not_found); DynamoDB deletes within about two days of the time, never before it
GRANT_KEPT_AFTER_EXPIRY = timedelta(days=1)


@dataclass(frozen=True)
class GrantMinter:
    """Who asked for a grant: the tenant (the resource's owner, or one it shared the knowledge base with)
    and the API key it used, by the key's sha256 (the key records are read by it; `key_id_of` gives the
    key's public id). Redeeming checks both still have the access that minted the grant."""

    tenant_id: str
    key_hash: str


@dataclass(frozen=True)
class AccessGrant:
    token_hash: str
    resource_id: str
    tenant_id: str  # the resource's owner
    purpose: str  # "download": the only one
    created_at: datetime
    expires_at: datetime
    #: None on a grant minted before minters were recorded (or outside a request): it works until it expires
    minted_by: GrantMinter | None = None

    @property
    def purge_at(self) -> int:
        """When the grant may go (epoch seconds, the table's TTL attribute): its expiry plus a margin."""
        return int((self.expires_at + GRANT_KEPT_AFTER_EXPIRY).timestamp())


def header_safe(name: str) -> str:
    """A file name that cannot break out of the Content-Disposition header it is put in (ASCII only: a
    header is Latin-1, so a signed name keeps to ASCII)."""
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    return "".join(ch for ch in folded if ch.isprintable() and ch not in '"\\\r\n')[:200] or "download"
