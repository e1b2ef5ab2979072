"""Tenants and their API keys in DynamoDB."""

from __future__ import annotations

from typing import Any

from pynamodb.exceptions import (
    DoesNotExist,
    TransactWriteError,
    UpdateError,
)
from pynamodb.expressions.condition import size
from pynamodb.transactions import TransactWrite

from chalicelib.adapters.dynamo.tables import Models, _condition_failed, _iso_or_none, _transaction_conflict
from chalicelib.domain.api_keys import ApiKey, Scope
from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.door import Door
from chalicelib.domain.ids import api_key_hash
from chalicelib.domain.types import (
    Tenant,
)

#: a bound no counter reaches: the condition of an unlimited conditional add
NO_LIMIT = 2**62
#: items one scan request of a tenants page reads (key and share records among them, filtered out)
TENANT_SCAN_PAGE_ITEMS = 1000


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
        tenant.document_count = int(item.document_count or 0)
        tenant.storage_quota = int(item.storage_quota or 0)
        tenant.document_quota = int(item.document_quota or 0)
        tenant.requests_per_second = int(item.requests_per_second or 0)
        return tenant

    def add_usage(self, tenant_id: str, delta_bytes: int) -> None:
        if delta_bytes:
            self.model(tenant_id).update(
                actions=[self.model.storage_used.add(delta_bytes)], condition=self.model.id.exists()
            )

    def add_usage_within(self, tenant_id: str, delta_bytes: int, grows_by: int, quota: int) -> bool:
        limited = quota > 0 and grows_by > 0
        if limited and grows_by > quota:  # not even an empty (or missing) count has the room
            return False
        return self._conditional_add(
            tenant_id, self.model.storage_used, delta_bytes, quota - grows_by if limited else NO_LIMIT
        )

    def _conditional_add(self, tenant_id: str, attribute: Any, delta: int, at_most: int) -> bool:
        """attribute += delta while attribute <= at_most (a missing attribute counts as 0)."""
        m = self.model
        try:
            m(tenant_id).update(
                actions=[attribute.add(delta)],
                condition=m.id.exists() & (attribute.does_not_exist() | (attribute <= at_most)),
            )
        except UpdateError as error:
            if error.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def reserve_document(self, tenant_id: str, quota: int) -> bool:
        return self._conditional_add(
            tenant_id, self.model.document_count, 1, quota - 1 if quota > 0 else NO_LIMIT
        )

    def release_document(self, tenant_id: str) -> None:
        m = self.model
        try:  # never below zero: a count from before quotas existed starts at zero
            m(tenant_id).update(actions=[m.document_count.add(-1)], condition=m.document_count > 0)
        except UpdateError as error:
            if error.cause_response_code != "ConditionalCheckFailedException":
                raise

    def pipeline_door(self, tenant_id: str) -> Door:
        try:
            item = self.model.get(
                tenant_id, consistent_read=True, attributes_to_get=["pipeline_slots", "pipeline_waiters"]
            )
        except DoesNotExist:
            return Door()
        return Door(frozenset(item.pipeline_slots or ()), frozenset(item.pipeline_waiters or ()))

    def take_pipeline_place(
        self, tenant_id: str, place: str, cap: int, strike: frozenset[str], ticket_entry: str
    ) -> bool:
        m = self.model
        actions: list[Any] = [m.pipeline_slots.add({place})]
        if strike:
            actions.append(m.pipeline_waiters.delete(set(strike)))
        condition = m.pipeline_slots.does_not_exist() | (size(m.pipeline_slots) < cap)
        if ticket_entry:  # the first message of this turn to land takes the place; the others find it gone
            condition &= m.pipeline_waiters.contains(ticket_entry)
        return self._conditional_update(tenant_id, actions, condition)

    def add_pipeline_waiter(self, tenant_id: str, entry: str, listed: str) -> bool:
        m = self.model
        condition = m.pipeline_waiters.contains(listed) if listed else m.id.exists()
        return self._conditional_update(tenant_id, [m.pipeline_waiters.add({entry})], condition)

    def renew_pipeline_place(self, tenant_id: str, held: str, renewed: str) -> bool:
        m = self.model
        # one update may not both add to and delete from the set: the new lease goes in first, so the place
        # is never lost; until the old one is struck the document counts twice (fewer, never more, let in)
        if not self._conditional_update(
            tenant_id, [m.pipeline_slots.add({renewed})], m.pipeline_slots.contains(held)
        ):
            return False
        if renewed != held:
            m(tenant_id).update(actions=[m.pipeline_slots.delete({held})])
        return True

    def strike_pipeline_entries(
        self, tenant_id: str, places: frozenset[str], waiters: frozenset[str]
    ) -> None:
        m = self.model
        actions: list[Any] = []
        if places:
            actions.append(m.pipeline_slots.delete(set(places)))
        if waiters:
            actions.append(m.pipeline_waiters.delete(set(waiters)))
        if actions:
            m(tenant_id).update(actions=actions)

    def _conditional_update(self, tenant_id: str, actions: list[Any], condition: Any) -> bool:
        try:
            self.model(tenant_id).update(actions=actions, condition=condition)
        except UpdateError as error:
            if error.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def set_parser_engine_rules(self, tenant_id: str, rules: dict[str, str]) -> None:
        self.model(tenant_id).update(
            actions=[self.model.parser_engine_rules.set(rules)], condition=self.model.id.exists()
        )

    def set_quotas(
        self, tenant_id: str, storage_quota: int, document_quota: int, requests_per_second: int | None = None
    ) -> Tenant | None:
        m = self.model
        actions = [m.storage_quota.set(storage_quota), m.document_quota.set(document_quota)]
        if requests_per_second is not None:
            actions.append(m.requests_per_second.set(requests_per_second))
        try:
            m(tenant_id).update(
                actions=actions,
                condition=m.id.exists() & m.api_key_hash.exists(),
            )
        except UpdateError as error:
            if error.cause_response_code == "ConditionalCheckFailedException":
                return None
            raise
        return self.get(tenant_id)

    def put(self, tenant: Tenant) -> None:
        self.model(
            tenant.id,
            name=tenant.name,
            api_key_hash=tenant.api_key_hash,
            created_at=to_iso(tenant.created_at),
            parser_engine_rules=tenant.parser_engine_rules,
            storage_used=tenant.storage_used,
            document_count=tenant.document_count,
            storage_quota=tenant.storage_quota,
            document_quota=tenant.document_quota,
            requests_per_second=tenant.requests_per_second,
        ).save()

    def page(self, after: str, limit: int) -> list[Tenant]:
        m = self.model
        items = m.scan(
            filter_condition=m.api_key_hash.exists(),  # not key or share records
            last_evaluated_key={"id": {"S": after}} if after else None,
            limit=limit,  # PynamoDB reads pages until this many match, and no further
            page_size=TENANT_SCAN_PAGE_ITEMS,
        )
        return [self._from_item(item) for item in items]


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
            scope=key.scope.value,
            kb_ids=list(key.kb_ids) if key.kb_ids is not None else None,
        ).save()

    def page(self, tenant_id: str, after: str, limit: int) -> list[ApiKey]:
        """The tenant's keys after the hash `after`, by hash: a Query on the sparse tenant-keys index."""
        m = self.model
        items = m.tenant_keys_index.query(
            tenant_id, range_key_condition=m.id > API_KEY_ITEM_PREFIX + after, limit=limit
        )
        return [self._from_item(i) for i in items]

    @staticmethod
    def _from_item(item: Any) -> ApiKey:
        revoked = from_iso(item.revoked_at) if item.revoked_at else None
        return ApiKey(
            item.tenant_id,
            item.key_hash,
            item.name or "",
            from_iso(item.created_at),
            revoked,
            scope=Scope(item.scope) if item.scope else Scope.ADMIN,
            kb_ids=tuple(item.kb_ids) if item.kb_ids is not None else None,
        )


SHARE_ITEM_PREFIX = "share#"
SHARED_WITH_PREFIX = "shared-with#"


class DynamoShareRepo:
    """Read-only shares of a knowledge base with other tenants: one item per shared knowledge base, whose
    set of tenants is changed with ADD / DELETE updates (no read-modify-write race). A reverse item per
    tenant lists the knowledge bases shared with it; listings check each entry against the share item, so
    a reverse entry left by a crash between the two updates (of `add` or `remove`) shows nothing. Such a
    stale entry would hold a slot of the cap for ever: an `add` the cap refuses drops them and tries again.

    The reverse item also holds the owners the tenant blocks: both of an add's writes to it are conditional
    on the owner not being blocked, and a block removes the owner's shares only after it is written, so an
    add under way as a block lands either has its share seen and removed by the block or undoes it itself."""

    def __init__(self, models: Models):
        assert models.share is not None
        self.model = models.share

    def add(self, owner_tenant_id: str, kb_id: str, tenant_id: str, cap: int | None = None) -> bool:
        m = self.model
        if not self._list(owner_tenant_id, tenant_id, kb_id, cap) and not (
            self._drop_stale(tenant_id) and self._list(owner_tenant_id, tenant_id, kb_id, cap)
        ):
            return False
        m(SHARE_ITEM_PREFIX + kb_id).update(
            actions=[m.owner_tenant_id.set(owner_tenant_id), m.tenants.add({tenant_id})]
        )
        # another add's _drop_stale may have taken the entry off before the line above (it saw the share
        # item without the tenant); now the share item lists it, no drop can: put it back (a no-op mostly).
        # A block written since the first write may have read the share item before the line above: undo.
        if not self._relist(owner_tenant_id, tenant_id, kb_id):
            self.remove(kb_id, tenant_id)
            return False
        return True

    def _not_blocked(self, owner_tenant_id: str) -> Any:
        m = self.model
        return m.blocked.does_not_exist() | ~m.blocked.contains(owner_tenant_id)

    def _list(self, owner_tenant_id: str, tenant_id: str, kb_id: str, cap: int | None) -> bool:
        """The reverse entry, first: the cap and the block are the reverse item's own condition, so
        concurrent shares with one tenant cannot pass it. False when either refuses it."""
        m = self.model
        condition = self._not_blocked(owner_tenant_id)
        if cap is not None:
            condition &= m.kbs.does_not_exist() | (size(m.kbs) < cap) | m.kbs.contains(kb_id)
        return self._updated(SHARED_WITH_PREFIX + tenant_id, [m.kbs.add({kb_id})], condition)

    def _relist(self, owner_tenant_id: str, tenant_id: str, kb_id: str) -> bool:
        """Add's last write (tests/e2e/test_share_blocks_dynamo.py lands a block just before it)."""
        m = self.model
        return self._updated(
            SHARED_WITH_PREFIX + tenant_id, [m.kbs.add({kb_id})], self._not_blocked(owner_tenant_id)
        )

    def _held(self, tenant_id: str) -> tuple[Any | None, list[Any]]:
        """The tenant's reverse item (None: it has none) and the share items of its entries that list the
        tenant, strongly consistent (as tenants_of); the share items in batches of 100, not one read each."""
        try:
            item = self.model.get(SHARED_WITH_PREFIX + tenant_id, consistent_read=True)
        except DoesNotExist:
            return None, []
        keys = [SHARE_ITEM_PREFIX + kb_id for kb_id in sorted(item.kbs or ())]
        shares = self.model.batch_get(keys, consistent_read=True) if keys else []
        return item, [share for share in shares if tenant_id in (share.tenants or ())]

    def _drop_stale(self, tenant_id: str) -> int:
        """Drops the reverse entries whose share item does not list the tenant; how many it dropped. Each
        drop is a transaction with the check that the share item still does not list it, so an add that
        wrote its share item meanwhile keeps its entry."""
        m = self.model
        item, shares = self._held(tenant_id)
        if item is None:
            return 0
        held = {share.id.removeprefix(SHARE_ITEM_PREFIX) for share in shares}
        dropped = 0
        for kb_id in sorted(set(item.kbs or ()) - held):
            try:
                with TransactWrite(connection=m._get_connection().connection) as tx:
                    tx.condition_check(
                        m,
                        SHARE_ITEM_PREFIX + kb_id,
                        condition=m.tenants.does_not_exist() | ~m.tenants.contains(tenant_id),
                    )
                    tx.update(m(SHARED_WITH_PREFIX + tenant_id), actions=[m.kbs.delete({kb_id})])
            except TransactWriteError as error:
                # listed meanwhile, or another writer on these items: leave it (it counts, as before)
                if _condition_failed(error) or _transaction_conflict(error):
                    continue
                raise
            dropped += 1
        return dropped

    def remove(self, kb_id: str, tenant_id: str) -> bool:
        m = self.model
        if not self._updated(
            SHARE_ITEM_PREFIX + kb_id, [m.tenants.delete({tenant_id})], m.tenants.contains(tenant_id)
        ):
            return False
        self._unlist(tenant_id, kb_id)
        return True

    def _unlist(self, tenant_id: str, kb_id: str) -> None:
        """Remove's second write (tests/service/repo_contract.py makes it fail, as a crash would)."""
        m = self.model
        m(SHARED_WITH_PREFIX + tenant_id).update(actions=[m.kbs.delete({kb_id})])

    def drop(self, kb_id: str) -> None:
        m = self.model
        for tenant_id in self.tenants_of(kb_id):
            m(SHARED_WITH_PREFIX + tenant_id).update(actions=[m.kbs.delete({kb_id})])
        m(SHARE_ITEM_PREFIX + kb_id).delete()

    def shared_with(self, tenant_id: str) -> list[str]:
        item, shares = self._held(tenant_id)
        blocked = set(item.blocked or ()) if item is not None else set()
        return sorted(
            share.id.removeprefix(SHARE_ITEM_PREFIX)
            for share in shares
            if share.owner_tenant_id not in blocked
        )

    def tenants_of(self, kb_id: str) -> list[str]:
        try:
            item = self.model.get(SHARE_ITEM_PREFIX + kb_id, consistent_read=True)
        except DoesNotExist:
            return []
        return sorted(item.tenants or ())

    def block(self, tenant_id: str, owner_tenant_id: str, cap: int | None = None) -> list[str] | None:
        m = self.model
        room = None
        if cap is not None:
            room = m.blocked.does_not_exist() | (size(m.blocked) < cap) | m.blocked.contains(owner_tenant_id)
        if not self._updated(SHARED_WITH_PREFIX + tenant_id, [m.blocked.add({owner_tenant_id})], room):
            return None
        # read after the block is written: an add that wrote its share item before this read is seen here;
        # one that writes it after fails its _relist and undoes it
        _, shares = self._held(tenant_id)
        owned = sorted(
            share.id.removeprefix(SHARE_ITEM_PREFIX)
            for share in shares
            if share.owner_tenant_id == owner_tenant_id
        )
        return [kb_id for kb_id in owned if self.remove(kb_id, tenant_id)]

    def unblock(self, tenant_id: str, owner_tenant_id: str) -> bool:
        m = self.model
        return self._updated(
            SHARED_WITH_PREFIX + tenant_id,
            [m.blocked.delete({owner_tenant_id})],
            m.blocked.contains(owner_tenant_id),
        )

    def blocked(self, tenant_id: str) -> list[str]:
        try:
            item = self.model.get(SHARED_WITH_PREFIX + tenant_id, consistent_read=True)
        except DoesNotExist:
            return []
        return sorted(item.blocked or ())

    def blocks(self, tenant_id: str, owner_tenant_id: str) -> bool:
        return owner_tenant_id in self.blocked(tenant_id)

    def _updated(self, item_id: str, actions: list[Any], condition: Any) -> bool:
        """One conditional update of an item; False when its condition refused it (nothing written)."""
        m = self.model
        try:
            m(item_id).update(actions=actions, condition=condition)
        except UpdateError as error:
            if error.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise
        return True
