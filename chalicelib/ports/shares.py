"""The shares of knowledge bases with other tenants, and the owners a tenant blocks (re-exported by
chalicelib/ports/state.py)."""

from __future__ import annotations

from typing import Protocol


class ShareRepo(Protocol):
    """Read-only shares of a knowledge base with other tenants. `tenants_of` is strongly consistent, so a
    revoked share is refused at once; `add` answers False (nothing kept) past the tenant's `cap` or when the
    tenant blocks the owner, also when the block lands while the add is under way; `shared_with` leaves out
    the blocked owners' knowledge bases."""

    def add(self, owner_tenant_id: str, kb_id: str, tenant_id: str, cap: int | None = None) -> bool: ...

    def remove(self, kb_id: str, tenant_id: str) -> bool: ...  # False: it was not shared with the tenant

    def tenants_of(self, kb_id: str) -> list[str]: ...

    def shared_with(self, tenant_id: str) -> list[str]: ...

    def drop(self, kb_id: str) -> None: ...  # every share of a deleted knowledge base (none: a no-op)

    def block(self, tenant_id: str, owner_tenant_id: str, cap: int | None = None) -> list[str] | None:
        """The tenant refuses the owner's shares from now on and loses those it has: the knowledge bases
        whose shares it removed, sorted. None (nothing written) past the tenant's `cap` of blocked owners."""
        ...

    def unblock(self, tenant_id: str, owner_tenant_id: str) -> bool: ...  # False: it was not blocked

    def blocked(self, tenant_id: str) -> list[str]: ...  # the owners the tenant blocks, sorted

    def blocks(self, tenant_id: str, owner_tenant_id: str) -> bool: ...  # strongly consistent
