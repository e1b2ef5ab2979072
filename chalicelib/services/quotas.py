"""The operator's per-tenant limits (0: none): documents are counted when a row is created and released when
it is deleted (one conditional write each, so two uploads cannot both take the last place); a file's stored
bytes are counted when it is accepted (an upload, a presigned upload's arrival, written text) with
`take_storage`, the check in the add itself, and given back by its delete; a URL import's, whose size is
known only at indexing, are counted then, where going over fails the document with the reason. FAQ entries
(created, edited, imported, cloned) count theirs with `take_storage`."""

from __future__ import annotations

from chalicelib.domain.errors import Forbidden
from chalicelib.ports import Dependencies


def reserve_document(deps: Dependencies, tenant_id: str) -> bool:
    """Counts one more document of the tenant, or a 403 when it holds its quota. False when no tenant row
    exists to count on (nothing was reserved, nothing to release)."""
    tenant = deps.tenants.get(tenant_id)
    if tenant is None:
        return False
    if not deps.tenants.reserve_document(tenant_id, tenant.document_quota):
        raise Forbidden(
            f"the tenant holds its quota of {tenant.document_quota} documents: delete some, or ask the "
            "operator for a larger quota",
            code="document_quota_exceeded",
        )
    return True


def check_storage_for_upload(deps: Dependencies, tenant_id: str, size: int | None) -> None:
    """A 403 when a file of `size` bytes cannot fit in what is left of the tenant's storage quota."""
    tenant = deps.tenants.get(tenant_id)
    if tenant is None or not tenant.storage_quota or size is None:
        return
    if tenant.storage_used + size > tenant.storage_quota:
        raise Forbidden(
            f"the file ({size} bytes) does not fit in the tenant's storage quota: "
            f"{tenant.storage_used} of {tenant.storage_quota} bytes are used",
            code="storage_quota_exceeded",
        )


def storage_left(deps: Dependencies, tenant_id: str) -> int | None:
    """The bytes the tenant may still store under its quota (0 when used up); None: no quota (or no
    tenant row to count on)."""
    tenant = deps.tenants.get(tenant_id)
    if tenant is None or not tenant.storage_quota:
        return None
    return max(0, tenant.storage_quota - tenant.storage_used)


def take_storage(
    deps: Dependencies,
    tenant_id: str,
    size: int,
    what: str,
    *,
    grows_by: int | None = None,
) -> None:
    """Counts `size` more bytes on the tenant's `storage_used` (a negative size gives bytes back), or a 403
    `storage_quota_exceeded` (nothing counted) when the growth (`grows_by`, else `size`) is positive and
    does not fit: the quota is checked in the add itself (one conditional write), so writers racing for the
    last bytes cannot pass it together. Every writer that counts bytes within the quota comes here (a
    replace import's new entry takes its old entry's count over first: faq/replacing.move_count)."""
    growth = size if grows_by is None else grows_by
    tenant = deps.tenants.get(tenant_id)
    if tenant is None or not (size or growth > 0):
        return  # no tenant row to count on, or nothing to count
    if not deps.tenants.add_usage_within(tenant_id, size, growth, tenant.storage_quota):
        raise storage_refusal(deps, tenant_id, growth, what)


def storage_refusal(deps: Dependencies, tenant_id: str, growth: int, what: str) -> Forbidden:
    """The answer to a growth past the tenant's storage quota (take_storage's, or a row's counted write's:
    KnowledgeRepo.update_fields' `storage_size`): 403 storage_quota_exceeded."""
    return Forbidden(
        f"{what} ({growth} bytes) does not fit in the tenant's storage quota "
        f"({storage_left(deps, tenant_id) or 0} bytes left)",
        code="storage_quota_exceeded",
    )
