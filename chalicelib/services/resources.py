"""The resource catalog's use cases: a knowledge's stored files registered under stable `resource://` ids
(bound to the knowledge), single-purpose download grants on them, and their resolution for `GET /r/{token}`.

A file is registered when a download link is first asked for (idempotent: the id derives from the physical
URL, and a put never replaces a resource); a knowledge's resources are marked deleted by the delete task,
and an older attempt's parsed Markdown when a newer one is registered (a reparse replaced it)."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.errors import Gone, NotFound
from chalicelib.domain.resources import AccessGrant, Resource, header_safe, resource_id_for, token_hash
from chalicelib.domain.storage_backends import backend_of
from chalicelib.domain.storage_keys import download_copy_key
from chalicelib.domain.types import Knowledge
from chalicelib.ports import Dependencies
from chalicelib.services.storage import signed_get

OWNER_KNOWLEDGE = "knowledge"
PURPOSE_DOWNLOAD = "download"


def _now() -> datetime:
    """Now, to the millisecond the tables keep (so a fake and DynamoDB answer the same times)."""
    return from_iso(to_iso(datetime.now(UTC)))


def register_file(
    deps: Dependencies, knowledge: Knowledge, role: str, url: str, attempt: int, file_name: str
) -> Resource:
    """The resource over one of the knowledge's stored files, bound to it (registered on first call)."""
    content_type = "text/markdown" if role == "parsed" else "application/octet-stream"
    resource = deps.resources.register(
        Resource(
            id=resource_id_for(url),
            url=url,
            tenant_id=knowledge.tenant_id,
            owner_kind=OWNER_KNOWLEDGE,
            owner_id=knowledge.id,
            role=role,
            attempt=attempt,
            file_name=file_name,
            content_type=content_type,
            size=deps.files.size(url),
            created_at=_now(),
        )
    )
    if role == "parsed":  # a reparse replaced the older attempts' Markdown: their links stop working
        for older in deps.resources.owned_by(knowledge.id):
            if older.role == "parsed" and older.id != resource.id and not older.deleted:
                deps.resources.mark_deleted(older.id, _now())
    return resource


def release_owner(deps: Dependencies, owner_id: str, role: str = "") -> None:
    """Marks every resource bound to the owner (of one role, if given) deleted: its grants stop working.
    Idempotent (a retried delete or reparse finds them marked)."""
    for resource in deps.resources.owned_by(owner_id):
        if not resource.deleted and role in ("", resource.role):
            deps.resources.mark_deleted(resource.id, _now())


def release_stored_on(deps: Dependencies, owner_id: str, backend_id: str) -> None:
    """Marks deleted the owner's resources over objects of one backend ("" = the default one): a document
    that moved to another backend left those objects behind. Idempotent."""
    for resource in deps.resources.owned_by(owner_id):
        if not resource.deleted and backend_of(resource.url) == backend_id:
            deps.resources.mark_deleted(resource.id, _now())


def file_resource_id(knowledge: Knowledge) -> str:
    """The resource id a knowledge's stored original has (or gets on its first download)."""
    return resource_id_for(knowledge.file_path) if knowledge.file_path else ""


def create_grant(deps: Dependencies, resource: Resource, expires_seconds: int) -> tuple[str, datetime]:
    """A download grant on one resource: its token (shown once; only its hash is stored) and expiry."""
    token = secrets.token_urlsafe(32)
    created = _now()
    expires = created + timedelta(seconds=expires_seconds)
    deps.resources.put_grant(
        AccessGrant(
            token_hash=token_hash(token),
            resource_id=resource.id,
            tenant_id=resource.tenant_id,
            purpose=PURPOSE_DOWNLOAD,
            created_at=created,
            expires_at=expires,
        )
    )
    return token, expires


@dataclass(frozen=True)
class Redirect:
    location: str


def redeem(deps: Dependencies, token: str) -> Redirect:
    """Where a grant's token leads: a short-lived presigned GET of its resource's object, or 404
    grant_not_found / 410 grant_expired / 410 resource_deleted."""
    grant = deps.resources.get_grant(token_hash(token)) if 0 < len(token) <= 128 else None
    if grant is None or grant.purpose != PURPOSE_DOWNLOAD:
        raise NotFound("no such download link", code="grant_not_found")
    if _now() >= grant.expires_at:
        raise Gone("this download link has expired: ask for a new one", code="grant_expired")
    resource = deps.resources.get(grant.resource_id)
    if resource is None or resource.deleted or resource.tenant_id != grant.tenant_id:
        raise Gone("the file of this download link has been deleted", code="resource_deleted")
    if not deps.files.exists(resource.url):
        raise Gone("the file of this download link is no longer stored", code="resource_deleted")
    seconds = max(1, min(60, int((grant.expires_at - _now()).total_seconds())))
    name = header_safe(resource.file_name)
    key = download_copy_key(resource.tenant_id, resource.owner_id, resource.role, resource.attempt)
    return Redirect(signed_get(deps, resource.url, key, seconds, file_name=name))
