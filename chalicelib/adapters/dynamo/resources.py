"""The resource catalog in DynamoDB (the resources table): a resource is put only if its id is new (so a
redelivered registration finds the first one), a grant under the hash of its token."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pynamodb.exceptions import DoesNotExist, PutError, UpdateError

from chalicelib.adapters.dynamo.tables import CONDITION_FAILED, Models
from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.resources import AccessGrant, GrantMinter, Resource

GRANT_PREFIX = "grant#"


class DynamoResourceCatalog:
    def __init__(self, models: Models):
        assert models.resource is not None
        self.model = models.resource

    def register(self, resource: Resource) -> Resource:
        m = self.model
        item = m(
            resource.id,
            kind="resource",
            tenant_id=resource.tenant_id,
            created_at=to_iso(resource.created_at),
            url=resource.url,
            owner_kind=resource.owner_kind,
            owner_id=resource.owner_id,
            role=resource.role,
            attempt=resource.attempt,
            file_name=resource.file_name,
            content_type=resource.content_type,
            size=resource.size,
            deleted_at=to_iso(resource.deleted_at) if resource.deleted_at else None,
        )
        try:
            item.save(condition=m.id.does_not_exist())
        except PutError as error:
            if error.cause_response_code != CONDITION_FAILED:
                raise
            stored = self.get(resource.id)
            if stored is None:  # pragma: no cover - a put refused for an item that is not there
                raise
            return stored
        return resource

    def get(self, resource_id: str) -> Resource | None:
        try:
            item = self.model.get(resource_id, consistent_read=True)
        except DoesNotExist:
            return None
        return _resource(item) if item.kind == "resource" else None

    def get_many(self, resource_ids: Sequence[str]) -> dict[str, Resource]:
        # BatchGetItem, 100 keys a call; PynamoDB retries the unprocessed keys
        items = self.model.batch_get(list(dict.fromkeys(resource_ids)), consistent_read=True)
        return {item.id: _resource(item) for item in items if item.kind == "resource"}

    def owned_by(self, owner_id: str) -> list[Resource]:
        rows = [_resource(item) for item in self.model.owner_index.query(owner_id)]
        return sorted(rows, key=lambda r: (r.created_at, r.id))

    def mark_deleted(self, resource_id: str, at: datetime) -> None:
        m = self.model
        try:
            m(resource_id).update(
                actions=[m.deleted_at.set(to_iso(at))],
                condition=m.id.exists() & m.deleted_at.does_not_exist(),
            )
        except UpdateError as error:
            if error.cause_response_code != CONDITION_FAILED:
                raise

    def restore(self, resource_id: str) -> None:
        m = self.model
        try:
            m(resource_id).update(
                actions=[m.deleted_at.remove()],
                condition=(m.kind == "resource") & m.deleted_at.exists(),
            )
        except UpdateError as error:
            if error.cause_response_code != CONDITION_FAILED:
                raise

    def put_grant(self, grant: AccessGrant) -> None:
        self.model(
            GRANT_PREFIX + grant.token_hash,
            kind="grant",
            tenant_id=grant.tenant_id,
            created_at=to_iso(grant.created_at),
            resource_id=grant.resource_id,
            purpose=grant.purpose,
            expires_at=to_iso(grant.expires_at),
            minter_tenant_id=grant.minted_by.tenant_id if grant.minted_by else None,
            minter_key_hash=grant.minted_by.key_hash if grant.minted_by else None,
            purge_at=grant.purge_at,  # the table's TTL: an expired grant goes a day later
        ).save()

    def get_grant(self, token_hash: str) -> AccessGrant | None:
        try:
            item = self.model.get(GRANT_PREFIX + token_hash, consistent_read=True)
        except DoesNotExist:
            return None
        return AccessGrant(
            token_hash=token_hash,
            resource_id=str(item.resource_id),
            tenant_id=item.tenant_id,
            purpose=str(item.purpose),
            created_at=from_iso(item.created_at),
            expires_at=from_iso(str(item.expires_at)),
            minted_by=(
                GrantMinter(item.minter_tenant_id, str(item.minter_key_hash))
                if item.minter_tenant_id
                else None
            ),
        )


def _resource(item: Any) -> Resource:
    return Resource(
        id=item.id,
        url=item.url,
        tenant_id=item.tenant_id,
        owner_kind=item.owner_kind,
        owner_id=item.owner_id,
        role=item.role,
        attempt=int(item.attempt or 0),
        file_name=item.file_name or "",
        content_type=item.content_type or "",
        size=int(item.size or 0),
        created_at=from_iso(item.created_at),
        deleted_at=from_iso(item.deleted_at) if item.deleted_at else None,
    )
