"""The resource catalog's port: stored objects under stable `resource://` ids, and their access grants."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from chalicelib.domain.resources import AccessGrant, Resource


class ResourceCatalog(Protocol):
    def register(self, resource: Resource) -> Resource:
        """Stores the resource unless one with its id exists, and returns the stored one (idempotent: a
        redelivered registration answers the first one's resource, deleted or not)."""
        ...

    def get(self, resource_id: str) -> Resource | None: ...

    def get_many(self, resource_ids: Sequence[str]) -> dict[str, Resource]:
        """Resources by id (deleted ones too) in batched reads; missing ids are absent."""
        ...

    def owned_by(self, owner_id: str) -> list[Resource]:
        """Every resource bound to the owner (deleted ones too), oldest first."""
        ...

    def mark_deleted(self, resource_id: str, at: datetime) -> None:
        """Marks the resource deleted (its grants stop working); a deleted or missing one is left alone."""
        ...

    def restore(self, resource_id: str) -> None:
        """Clears the deleted mark (its object was stored again under the same URL, e.g. a document moved
        back to a backend it had left); a live or missing one is left alone."""
        ...

    def put_grant(self, grant: AccessGrant) -> None: ...

    def get_grant(self, token_hash: str) -> AccessGrant | None: ...
