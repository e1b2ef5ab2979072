"""The resource catalog in memory (tests, `make run` without DynamoDB)."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime

from chalicelib.domain.resources import AccessGrant, Resource


class MemoryResourceCatalog:
    def __init__(self) -> None:
        self._resources: dict[str, Resource] = {}
        self._grants: dict[str, AccessGrant] = {}
        self._lock = threading.Lock()

    def register(self, resource: Resource) -> Resource:
        with self._lock:
            return self._resources.setdefault(resource.id, resource)

    def get(self, resource_id: str) -> Resource | None:
        with self._lock:
            return self._resources.get(resource_id)

    def get_many(self, resource_ids: Sequence[str]) -> dict[str, Resource]:
        with self._lock:
            return {i: self._resources[i] for i in resource_ids if i in self._resources}

    def owned_by(self, owner_id: str) -> list[Resource]:
        with self._lock:
            rows = [r for r in self._resources.values() if r.owner_id == owner_id]
        return sorted(rows, key=lambda r: (r.created_at, r.id))

    def mark_deleted(self, resource_id: str, at: datetime) -> None:
        with self._lock:
            row = self._resources.get(resource_id)
            if row is not None and row.deleted_at is None:
                self._resources[resource_id] = replace(row, deleted_at=at)

    def restore(self, resource_id: str) -> None:
        with self._lock:
            row = self._resources.get(resource_id)
            if row is not None and row.deleted_at is not None:
                self._resources[resource_id] = replace(row, deleted_at=None)

    def put_grant(self, grant: AccessGrant) -> None:
        with self._lock:
            self._grants[grant.token_hash] = grant

    def get_grant(self, token_hash: str) -> AccessGrant | None:
        with self._lock:
            return self._grants.get(token_hash)
