"""Tenants and their API keys, in memory."""

from __future__ import annotations

import copy
import threading
from dataclasses import replace
from typing import TYPE_CHECKING

from chalicelib.adapters.memory.clock import _ms
from chalicelib.domain.api_keys import ApiKey
from chalicelib.domain.door import Door
from chalicelib.domain.ids import api_key_hash
from chalicelib.domain.types import (
    Tenant,
)

if TYPE_CHECKING:
    pass


class MemoryTenantRepo:
    def __init__(self) -> None:
        self._rows: dict[str, Tenant] = {}
        self._places: dict[str, set[str]] = {}
        self._waiters: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def get(self, tenant_id: str) -> Tenant | None:
        with self._lock:
            row = self._rows.get(tenant_id)
            return copy.deepcopy(row) if row else None

    def by_api_key(self, api_key: str) -> Tenant | None:
        wanted = api_key_hash(api_key)
        with self._lock:
            row = next((t for t in self._rows.values() if t.api_key_hash == wanted), None)
            return copy.deepcopy(row) if row else None

    def add_usage(self, tenant_id: str, delta_bytes: int) -> None:
        with self._lock:
            tenant = self._rows.get(tenant_id)
            if tenant is not None:
                tenant.storage_used += delta_bytes

    def add_usage_within(self, tenant_id: str, delta_bytes: int, grows_by: int, quota: int) -> bool:
        with self._lock:  # the read and the add in one step, as DynamoDB's conditional update
            tenant = self._rows.get(tenant_id)
            if tenant is None or (quota > 0 and grows_by > 0 and tenant.storage_used + grows_by > quota):
                return False
            tenant.storage_used += delta_bytes
            return True

    def reserve_document(self, tenant_id: str, quota: int) -> bool:
        with self._lock:
            tenant = self._rows.get(tenant_id)
            if tenant is None or (quota > 0 and tenant.document_count >= quota):
                return False
            tenant.document_count += 1
            return True

    def release_document(self, tenant_id: str) -> None:
        with self._lock:
            tenant = self._rows.get(tenant_id)
            if tenant is not None and tenant.document_count > 0:
                tenant.document_count -= 1

    def pipeline_door(self, tenant_id: str) -> Door:
        with self._lock:
            return Door(
                frozenset(self._places.get(tenant_id, ())), frozenset(self._waiters.get(tenant_id, ()))
            )

    def take_pipeline_place(
        self, tenant_id: str, place: str, cap: int, strike: frozenset[str], ticket_entry: str
    ) -> bool:
        with self._lock:
            places = self._places.setdefault(tenant_id, set())
            waiters = self._waiters.setdefault(tenant_id, set())
            if len(places) >= cap or (ticket_entry and ticket_entry not in waiters):
                return False
            places.add(place)
            waiters.difference_update(strike)
            return True

    def add_pipeline_waiter(self, tenant_id: str, entry: str, listed: str) -> bool:
        with self._lock:
            waiters = self._waiters.setdefault(tenant_id, set())
            if listed and listed not in waiters:
                return False
            waiters.add(entry)
            return True

    def renew_pipeline_place(self, tenant_id: str, held: str, renewed: str) -> bool:
        with self._lock:
            places = self._places.setdefault(tenant_id, set())
            if held not in places:
                return False
            places.discard(held)
            places.add(renewed)
            return True

    def strike_pipeline_entries(
        self, tenant_id: str, places: frozenset[str], waiters: frozenset[str]
    ) -> None:
        with self._lock:
            self._places.get(tenant_id, set()).difference_update(places)
            self._waiters.get(tenant_id, set()).difference_update(waiters)

    def set_parser_engine_rules(self, tenant_id: str, rules: dict[str, str]) -> None:
        with self._lock:
            tenant = self._rows.get(tenant_id)
            if tenant is not None:
                tenant.parser_engine_rules = dict(rules)

    def set_quotas(
        self, tenant_id: str, storage_quota: int, document_quota: int, requests_per_second: int | None = None
    ) -> Tenant | None:
        with self._lock:
            tenant = self._rows.get(tenant_id)
            if tenant is None:
                return None
            tenant.storage_quota, tenant.document_quota = storage_quota, document_quota
            if requests_per_second is not None:
                tenant.requests_per_second = requests_per_second
            return copy.deepcopy(tenant)

    def put(self, tenant: Tenant) -> None:
        with self._lock:
            self._rows[tenant.id] = replace(copy.deepcopy(tenant), created_at=_ms(tenant.created_at))

    def page(self, after: str, limit: int) -> list[Tenant]:
        with self._lock:
            return [copy.deepcopy(self._rows[k]) for k in sorted(self._rows) if k > after][:limit]


class MemoryApiKeyRepo:
    def __init__(self) -> None:
        self._rows: dict[str, ApiKey] = {}
        self._lock = threading.Lock()

    def get(self, key_hash: str) -> ApiKey | None:
        with self._lock:
            row = self._rows.get(key_hash)
            return copy.deepcopy(row) if row else None

    def put(self, key: ApiKey) -> None:
        stored = replace(
            copy.deepcopy(key),
            created_at=_ms(key.created_at),
            revoked_at=_ms(key.revoked_at) if key.revoked_at else None,
        )
        with self._lock:
            self._rows[key.key_hash] = stored

    def page(self, tenant_id: str, after: str, limit: int) -> list[ApiKey]:
        with self._lock:  # by hash, as the tenant-keys index's range key orders them
            rows = [k for h, k in sorted(self._rows.items()) if k.tenant_id == tenant_id and h > after]
            return [copy.deepcopy(k) for k in rows[:limit]]


class MemoryShareRepo:
    """As DynamoShareRepo: a share item per knowledge base and a reverse set per tenant, written in that
    order by `add` (reverse first, under the cap) and the other way by `remove`; listings check reverse
    entries against the share items, and an `add` the cap refuses drops the stale ones and tries again.
    Beside its reverse set, the owners the tenant blocks (under one lock here, so no add races a block)."""

    def __init__(self) -> None:
        self._rows: dict[str, tuple[str, set[str]]] = {}
        self._reverse: dict[str, set[str]] = {}
        self._blocked: dict[str, set[str]] = {}
        self._lock = threading.Lock()

    def add(self, owner_tenant_id: str, kb_id: str, tenant_id: str, cap: int | None = None) -> bool:
        with self._lock:
            if owner_tenant_id in self._blocked.get(tenant_id, ()):
                return False
            listed = self._reverse.setdefault(tenant_id, set())
            if cap is not None and kb_id not in listed and len(listed) >= cap:
                listed -= {kb for kb in listed if tenant_id not in self._tenants(kb)}
                if len(listed) >= cap:
                    return False
            listed.add(kb_id)
            _, tenants = self._rows.get(kb_id, (owner_tenant_id, set()))
            self._rows[kb_id] = (owner_tenant_id, tenants | {tenant_id})
            return True

    def remove(self, kb_id: str, tenant_id: str) -> bool:
        with self._lock:
            row = self._rows.get(kb_id)
            if row is None or tenant_id not in row[1]:
                return False
            self._rows[kb_id] = (row[0], row[1] - {tenant_id})
            self._unlist(tenant_id, kb_id)
            return True

    def _unlist(self, tenant_id: str, kb_id: str) -> None:
        """Remove's second write (tests/service/repo_contract.py makes it fail, as a crash would)."""
        self._reverse.get(tenant_id, set()).discard(kb_id)

    def _tenants(self, kb_id: str) -> set[str]:
        row = self._rows.get(kb_id)
        return row[1] if row else set()

    def drop(self, kb_id: str) -> None:
        with self._lock:
            for tenant_id in self._tenants(kb_id):
                self._reverse.get(tenant_id, set()).discard(kb_id)
            self._rows.pop(kb_id, None)

    def tenants_of(self, kb_id: str) -> list[str]:
        with self._lock:
            return sorted(self._tenants(kb_id))

    def shared_with(self, tenant_id: str) -> list[str]:
        with self._lock:
            listed, blocked = self._reverse.get(tenant_id, set()), self._blocked.get(tenant_id, set())
            return sorted(
                kb_id
                for kb_id in listed
                if tenant_id in self._tenants(kb_id) and self._rows[kb_id][0] not in blocked
            )

    def block(self, tenant_id: str, owner_tenant_id: str, cap: int | None = None) -> list[str] | None:
        with self._lock:
            blocked = self._blocked.setdefault(tenant_id, set())
            if cap is not None and owner_tenant_id not in blocked and len(blocked) >= cap:
                return None
            blocked.add(owner_tenant_id)
            removed = sorted(
                kb_id
                for kb_id in self._reverse.get(tenant_id, set())
                if kb_id in self._rows
                and self._rows[kb_id][0] == owner_tenant_id
                and tenant_id in self._rows[kb_id][1]
            )
            for kb_id in removed:
                owner, tenants = self._rows[kb_id]
                self._rows[kb_id] = (owner, tenants - {tenant_id})
                self._unlist(tenant_id, kb_id)
            return removed

    def unblock(self, tenant_id: str, owner_tenant_id: str) -> bool:
        with self._lock:
            blocked = self._blocked.get(tenant_id, set())
            if owner_tenant_id not in blocked:
                return False
            blocked.discard(owner_tenant_id)
            return True

    def blocked(self, tenant_id: str) -> list[str]:
        with self._lock:
            return sorted(self._blocked.get(tenant_id, set()))

    def blocks(self, tenant_id: str, owner_tenant_id: str) -> bool:
        with self._lock:
            return owner_tenant_id in self._blocked.get(tenant_id, set())
