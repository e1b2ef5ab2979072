"""Shares: the owner of a knowledge base lets another tenant read it (the knowledge base, its knowledge, their
stage trees and chunks, hybrid search); every write from that tenant answers 404 as for a knowledge base it
cannot see. Who may see what is decided in services/ownership; this module only keeps the list.

Shares need no acceptance, so a tenant may block an owner tenant: that owner's shares with it are removed
and its next ones refused with the 404 an unknown tenant gets, so an owner cannot tell a block from a tenant
id that names no one (one whose earlier share went through may guess, as it would from any refusal)."""

from __future__ import annotations

from typing import Any

from chalicelib.commands import BlockTenantRequest, ShareRequest
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.ports import Dependencies
from chalicelib.services.ownership import kb_allowed, require_kb, require_whole_tenant

#: the owner tenants one tenant may block: a set on one item (1,000 ids of at most 64 characters: ~66 KB of
#: DynamoDB's 400 KB), listed in one answer
MAX_BLOCKED_TENANTS = 1_000


def _view(deps: Dependencies, kb_id: str) -> dict[str, Any]:
    return {"kb_id": kb_id, "tenant_ids": deps.shares.tenants_of(kb_id)}


def share(deps: Dependencies, tenant_id: str, kb_id: str, request: ShareRequest) -> dict[str, Any]:
    kb = require_kb(deps, tenant_id, kb_id)
    if request.tenant_id == tenant_id:
        raise BadRequest("a knowledge base is always its own tenant's", code="share_with_self")
    recipient = request.tenant_id
    if deps.tenants.get(recipient) is None:
        raise _tenant_not_found(recipient)
    if deps.shares.blocks(recipient, tenant_id):
        # a share whose add was cut short (a crash) just as the block landed may be left: this retry ends it
        deps.shares.remove(kb.id, recipient)
        raise _tenant_not_found(recipient)
    cap = deps.settings.max_shares_per_tenant
    if not deps.shares.add(tenant_id, kb.id, recipient, cap if cap > 0 else None):
        if deps.shares.blocks(recipient, tenant_id):  # the block landed while the add was under way
            raise _tenant_not_found(recipient)
        raise Conflict(
            f"tenant {request.tenant_id} has its limit of {cap} knowledge bases shared with it",
            code="share_limit_reached",
        )
    return _view(deps, kb.id)


def list_shares(deps: Dependencies, tenant_id: str, kb_id: str) -> dict[str, Any]:
    return _view(deps, require_kb(deps, tenant_id, kb_id).id)


def unshare(deps: Dependencies, tenant_id: str, kb_id: str, other_tenant_id: str) -> dict[str, Any]:
    kb = require_kb(deps, tenant_id, kb_id)
    if not deps.shares.remove(kb.id, other_tenant_id):
        raise NotFound(f"knowledge base {kb_id} is not shared with {other_tenant_id}", code="share_not_found")
    return _view(deps, kb.id)


def decline(deps: Dependencies, tenant_id: str, kb_id: str) -> dict[str, Any]:
    """The tenant a knowledge base was shared with gives the share up (the owner may share it again). Not
    shared with it, or not one the key may name: 404 share_not_found, whether the knowledge base exists or not."""
    if not kb_allowed(kb_id) or not deps.shares.remove(kb_id, tenant_id):
        raise NotFound(f"knowledge base {kb_id} is not shared with this tenant", code="share_not_found")
    return {"kb_id": kb_id, "declined": True}


def _tenant_not_found(tenant_id: str) -> NotFound:
    """One answer for a tenant that does not exist and one that blocks the caller."""
    return NotFound(f"tenant {tenant_id} not found", code="tenant_not_found")


def block_tenant(deps: Dependencies, tenant_id: str, request: BlockTenantRequest) -> dict[str, Any]:
    """The tenant blocks an owner tenant: every share of that owner's knowledge bases with it is removed (the
    knowledge bases named in the answer) and the owner's next shares are refused. Blocking again is a no-op
    that removes what is left. It acts on the tenant as a whole: a key limited to some knowledge bases is
    refused."""
    require_whole_tenant()
    owner = request.tenant_id
    if owner == tenant_id:
        raise BadRequest("a tenant cannot block itself", code="block_self")
    if deps.tenants.get(owner) is None:
        raise _tenant_not_found(owner)
    removed = deps.shares.block(tenant_id, owner, MAX_BLOCKED_TENANTS)
    if removed is None:
        raise Conflict(
            f"the tenant blocks its limit of {MAX_BLOCKED_TENANTS} tenants", code="block_limit_reached"
        )
    return {"tenant_id": owner, "blocked": True, "removed_kb_ids": removed}


def blocked_tenants(deps: Dependencies, tenant_id: str) -> dict[str, Any]:
    require_whole_tenant()
    return {"tenant_ids": deps.shares.blocked(tenant_id), "limit": MAX_BLOCKED_TENANTS}


def unblock_tenant(deps: Dependencies, tenant_id: str, owner_tenant_id: str) -> dict[str, Any]:
    """The owner may share with the tenant again (the shares the block removed stay removed)."""
    require_whole_tenant()
    if not deps.shares.unblock(tenant_id, owner_tenant_id):
        raise NotFound(f"tenant {owner_tenant_id} is not blocked", code="block_not_found")
    return {"tenant_id": owner_tenant_id, "blocked": False}
