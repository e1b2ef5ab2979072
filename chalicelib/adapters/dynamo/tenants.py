"""Tenants and their API keys in DynamoDB."""

from __future__ import annotations

from typing import Any

from pynamodb.exceptions import (
    DoesNotExist,
)

from chalicelib.adapters.dynamo.tables import Models, _iso_or_none
from chalicelib.domain.api_keys import ApiKey
from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.ids import api_key_hash
from chalicelib.domain.types import (
    Tenant,
)


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
