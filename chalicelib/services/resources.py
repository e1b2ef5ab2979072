"""The resource catalog's use cases: a knowledge's stored files registered under stable `resource://` ids
(bound to the knowledge), single-purpose download grants on them, and their resolution for `GET /r/{token}`.

A file is registered when it is written: an upload's original, an attempt's parsed Markdown and extracted
images by the pipeline, a clone's or a moved document's files after their copy (and at its first download
link, for a file stored before this was done). Registering is idempotent: the id derives from the physical
URL, and a put never replaces a resource. A knowledge's resources are marked deleted by the delete task, an
older attempt's parsed Markdown when a newer one is registered (a reparse replaced it), and the objects a
move to another backend left behind. An FAQ import's failed-rows CSV (files bucket, `faq-imports/`) is
registered under its knowledge base when a link to it is first asked for."""

from __future__ import annotations

import json
import mimetypes
import posixpath
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.errors import Gone, NotFound
from chalicelib.domain.resources import (
    AccessGrant,
    GrantMinter,
    Resource,
    header_safe,
    resource_id_for,
    token_hash,
)
from chalicelib.domain.storage_backends import backend_of
from chalicelib.domain.storage_keys import download_copy_key, images_manifest_key, parsed_markdown_key
from chalicelib.domain.types import Knowledge, KnowledgeType, ParseStatus
from chalicelib.ports import Dependencies
from chalicelib.services import ownership
from chalicelib.services.storage import files_of, signed_get

OWNER_KNOWLEDGE = "knowledge"
#: a file an FAQ import wrote (its failed rows' CSV): owned by the knowledge base, stored in the files bucket
#: (`deps.inbox`, under faq-imports/, which the bucket expires)
OWNER_FAQ_IMPORT = "faq-import"
PURPOSE_DOWNLOAD = "download"
#: what a knowledge's file is: its uploaded original, an attempt's parsed Markdown, an extracted image
ROLE_ORIGINAL = "original"
ROLE_PARSED = "parsed"
ROLE_IMAGE = "image"
ROLE_FAILED_ROWS = "failed-rows"


def _now() -> datetime:
    """Now, to the millisecond the tables keep (so a fake and DynamoDB answer the same times)."""
    return from_iso(to_iso(datetime.now(UTC)))


def download_name(knowledge: Knowledge, role: str, url: str = "") -> str:
    """The file's name as people see it: the uploaded file's, its Markdown's, an image's stored one (a
    resource keeps it `header_safe`, for the download's Content-Disposition)."""
    if role == ROLE_ORIGINAL:
        name = knowledge.file_name or f"{knowledge.id}.{knowledge.file_type}"
    elif role == ROLE_PARSED:
        name = f"{(knowledge.file_name or knowledge.id).rsplit('.', 1)[0]}.md"
    else:
        name = posixpath.basename(url)
    return name


def _content_type(role: str, url: str) -> str:
    if role == ROLE_PARSED:
        return "text/markdown"
    if role == ROLE_IMAGE:
        return mimetypes.guess_type(url)[0] or "application/octet-stream"
    return "application/octet-stream"


def register_file(
    deps: Dependencies,
    knowledge: Knowledge,
    role: str,
    url: str,
    attempt: int,
    file_name: str,
    size: int | None = None,
) -> Resource:
    """The resource over one of the knowledge's stored files (stored now), bound to it; `size` when the
    caller knows it (else the store is asked). Registering is idempotent (the id derives from the URL); a
    resource of this knowledge marked deleted is live again, since its URL holds an object again (a
    document moved back to a backend it had left), unless the knowledge is being deleted."""
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
            content_type=_content_type(role, url),
            size=deps.files.size(url) if size is None else size,
            created_at=_now(),
        )
    )
    if (
        resource.deleted
        and resource.owner_id == knowledge.id
        and knowledge.parse_status != ParseStatus.DELETING
    ):
        deps.resources.restore(resource.id)
        resource = replace(resource, deleted_at=None)
    if role == ROLE_PARSED:  # a reparse replaced the older attempts' Markdown: their links stop working
        for other in deps.resources.owned_by(knowledge.id):
            if other.role != ROLE_PARSED or other.id == resource.id or other.deleted:
                continue
            if other.attempt < attempt:
                deps.resources.mark_deleted(other.id, _now())
            elif other.attempt > attempt and not resource.deleted:  # this one registered late: superseded
                deps.resources.mark_deleted(resource.id, _now())
                resource = replace(resource, deleted_at=_now())
    return resource


def register_written(
    deps: Dependencies, knowledge: Knowledge, role: str, url: str, size: int | None, attempt: int = 0
) -> Resource:
    """A file just written (an upload's original, an attempt's Markdown, an extracted image), registered
    at once, so every stored file has its `resource://` id before anyone asks for a link."""
    name = header_safe(download_name(knowledge, role, url))
    return register_file(deps, knowledge, role, url, attempt, name, size)


def register_stored(deps: Dependencies, knowledge: Knowledge) -> None:
    """Registers what the document has stored now (its original, its current Markdown and images): for a
    clone's copy and a moved document, whose files were written by a copy rather than the pipeline."""
    if (
        knowledge.type == KnowledgeType.FILE
        and knowledge.file_path
        and deps.files.exists(knowledge.file_path)
    ):
        register_written(deps, knowledge, ROLE_ORIGINAL, knowledge.file_path, None)
    at = (knowledge.tenant_id, knowledge.id, knowledge.attempt)
    parsed = files_of(deps, knowledge).url_for(parsed_markdown_key(*at))
    if deps.files.exists(parsed):
        register_written(deps, knowledge, ROLE_PARSED, parsed, None, knowledge.attempt)
    manifest = files_of(deps, knowledge).url_for(images_manifest_key(*at))
    if deps.files.exists(manifest):
        for image in json.loads(deps.files.read(manifest)):
            url = str(image.get("url") or "")
            if url and deps.files.exists(url):
                register_written(deps, knowledge, ROLE_IMAGE, url, None, knowledge.attempt)


def register_import_file(
    deps: Dependencies, tenant_id: str, kb_id: str, role: str, url: str, file_name: str, content_type: str
) -> Resource:
    """The resource over a file an FAQ import of the knowledge base wrote to the files bucket (registered
    when a link to it is first asked for: idempotent, the id derives from the URL)."""
    return deps.resources.register(
        Resource(
            id=resource_id_for(url),
            url=url,
            tenant_id=tenant_id,
            owner_kind=OWNER_FAQ_IMPORT,
            owner_id=kb_id,
            role=role,
            attempt=0,
            file_name=header_safe(file_name),
            content_type=content_type,
            size=deps.inbox.size(url),
            created_at=_now(),
        )
    )


def release_urls(deps: Dependencies, urls: Iterable[str]) -> None:
    """Marks deleted the resources over these objects (a write undone: the objects are deleted)."""
    for url in urls:
        deps.resources.mark_deleted(resource_id_for(url), _now())


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
    """A download grant on one resource: its token (shown once; only its hash is stored) and expiry. The
    grant records who minted it (the request's tenant and API key), so redeeming it ends with that access."""
    token = secrets.token_urlsafe(32)
    created = _now()
    expires = created + timedelta(seconds=expires_seconds)
    access = ownership.current_access()
    deps.resources.put_grant(
        AccessGrant(
            token_hash=token_hash(token),
            resource_id=resource.id,
            tenant_id=resource.tenant_id,
            purpose=PURPOSE_DOWNLOAD,
            created_at=created,
            expires_at=expires,
            minted_by=GrantMinter(access.tenant_id, access.key_hash) if access is not None else None,
        )
    )
    return token, expires


def _still_allowed(deps: Dependencies, minter: GrantMinter, resource: Resource) -> bool:
    """Whether the grant's minter could still read the resource: its key is not revoked, a key limited to
    some knowledge bases still covers the document's, and a tenant other than the owner still has the
    knowledge base shared with it. Reads only what the case needs: the key record; the document (its
    knowledge base now: a move changes it) and the share only for a recipient or a limited key; an FAQ
    import's file, its knowledge base always (one deleted or being deleted ends its links)."""
    key = deps.api_keys.get(minter.key_hash)  # strongly consistent, as authentication's read
    # no record: a tenant's primary key from before key records (revoking it writes a record)
    if key is not None and (key.revoked or key.tenant_id != minter.tenant_id):
        return False
    kb_limit = key.kb_ids if key is not None else None
    owner = minter.tenant_id == resource.tenant_id
    if resource.owner_kind == OWNER_FAQ_IMPORT:  # the knowledge base itself: gone or going, its files too
        kb = deps.kbs.get(resource.owner_id)
        if kb is None or kb.tenant_id != resource.tenant_id or kb.status == "deleting":
            return False
        kb_id = kb.id
    else:
        if owner and kb_limit is None:
            return True
        knowledge = deps.knowledge.get(resource.owner_id) if resource.owner_kind == OWNER_KNOWLEDGE else None
        if knowledge is None or knowledge.tenant_id != resource.tenant_id:
            return False
        kb_id = knowledge.kb_id
    if kb_limit is not None and kb_id not in kb_limit:
        return False
    return owner or minter.tenant_id in deps.shares.tenants_of(kb_id)


def _no_such_link() -> NotFound:
    """An unknown token's answer, and a revoked one's (nothing tells them apart)."""
    return NotFound("no such download link", code="grant_not_found")


@dataclass(frozen=True)
class Redirect:
    location: str


def redeem(deps: Dependencies, token: str) -> Redirect:
    """Where a grant's token leads: a short-lived presigned GET of its resource's object, or 404
    grant_not_found (unknown, or its minter's key was revoked or its access to the file ended) / 410
    grant_expired / 410 resource_deleted."""
    grant = deps.resources.get_grant(token_hash(token)) if 0 < len(token) <= 128 else None
    if grant is None or grant.purpose != PURPOSE_DOWNLOAD:
        raise _no_such_link()
    if _now() >= grant.expires_at:
        raise Gone("this download link has expired: ask for a new one", code="grant_expired")
    resource = deps.resources.get(grant.resource_id)
    if resource is None or resource.deleted or resource.tenant_id != grant.tenant_id:
        raise Gone("the file of this download link has been deleted", code="resource_deleted")
    # a grant from before minters were recorded works until it expires (minutes)
    if grant.minted_by is not None and not _still_allowed(deps, grant.minted_by, resource):
        raise _no_such_link()
    import_file = resource.owner_kind == OWNER_FAQ_IMPORT  # in the files bucket, which always signs
    if not (deps.inbox if import_file else deps.files).exists(resource.url):
        raise Gone("the file of this download link is no longer stored", code="resource_deleted")
    seconds = max(1, min(60, int((grant.expires_at - _now()).total_seconds())))
    name = header_safe(resource.file_name)
    if import_file:
        return Redirect(deps.inbox.presign_get(resource.url, seconds, file_name=name))
    key = download_copy_key(resource.tenant_id, resource.owner_id, resource.role, resource.attempt)
    return Redirect(signed_get(deps, resource.url, key, seconds, file_name=name))
