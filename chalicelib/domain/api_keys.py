"""API keys: a tenant may hold several; each is shown once when issued and stored only as its sha256.

A key's public id is derived from that hash (`key_` + its first 16 hex digits), so the key a tenant row
has always carried (`Tenant.api_key_hash`, the tenant's primary key) gets an id by the same rule and can
be listed and revoked like any issued key.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from chalicelib.domain.ids import api_key_hash
from chalicelib.domain.types import utcnow

KEY_PREFIX = "wk-"


class Scope(StrEnum):
    """What a key may do, each scope including the ones before it: `read` (GET routes and searches),
    `write` (create, edit, delete knowledge, tags, FAQ, tasks), `admin` (the tenant's settings, shares, and
    anything that changes the tenant itself). A key issued before scopes existed is `admin`."""

    READ = "read"
    WRITE = "write"
    ADMIN = "admin"

    @property
    def rank(self) -> int:
        return list(Scope).index(self)

    def covers(self, required: Scope) -> bool:
        return self.rank >= required.rank


def new_secret() -> str:
    """A fresh API key: 256 bits from the OS's CSPRNG."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def key_id_of(key_hash: str) -> str:
    return f"key_{key_hash[:16]}"


@dataclass
class ApiKey:
    tenant_id: str
    key_hash: str
    name: str = ""
    created_at: datetime = field(default_factory=utcnow)
    revoked_at: datetime | None = None
    scope: Scope = Scope.ADMIN
    #: the knowledge bases this key may touch; None = every one of its tenant's (and those shared with it)
    kb_ids: tuple[str, ...] | None = None

    @property
    def id(self) -> str:
        return key_id_of(self.key_hash)

    @property
    def revoked(self) -> bool:
        return self.revoked_at is not None

    @classmethod
    def issue(
        cls,
        tenant_id: str,
        name: str = "",
        scope: Scope = Scope.ADMIN,
        kb_ids: tuple[str, ...] | None = None,
    ) -> tuple[ApiKey, str]:
        """A new key record and the secret (the only time the secret exists outside the caller)."""
        secret = new_secret()
        return cls(tenant_id, api_key_hash(secret), name, scope=scope, kb_ids=kb_ids), secret
