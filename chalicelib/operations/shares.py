"""Shares: the owner of a knowledge base lets another tenant read it (the knowledge base, its knowledge, their
stage trees and chunks, hybrid search); every write from that tenant answers 404 as for a knowledge base it
cannot see. Who may see what is decided in services/ownership; this module only keeps the list."""

from __future__ import annotations

from typing import Any

from chalicelib.commands import ShareRequest
from chalicelib.domain.errors import BadRequest, Conflict, NotFound
from chalicelib.ports import Dependencies
from chalicelib.services.ownership import kb_allowed, require_kb


def _view(deps: Dependencies, kb_id: str) -> dict[str, Any]:
    return {"kb_id": kb_id, "tenant_ids": deps.shares.tenants_of(kb_id)}


def share(deps: Dependencies, tenant_id: str, kb_id: str, request: ShareRequest) -> dict[str, Any]:
    kb = require_kb(deps, tenant_id, kb_id)
    if request.tenant_id == tenant_id:
        raise BadRequest("a knowledge base is always its own tenant's", code="share_with_self")
    if deps.tenants.get(request.tenant_id) is None:
        raise NotFound(f"tenant {request.tenant_id} not found", code="tenant_not_found")
    cap = deps.settings.max_shares_per_tenant
    if not deps.shares.add(tenant_id, kb.id, request.tenant_id, cap if cap > 0 else None):
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
