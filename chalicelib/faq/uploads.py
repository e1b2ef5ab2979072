"""An FAQ import's upload: its key, and the bound on what a tenant can park in storage through upload grants.

A grant (`faq/import/upload-url`) is a presigned form for one key, bound to MAX_FILE_BYTES, that works until
it expires (`presign_expires_seconds`) and may be used again until then. What it uploads lies outside the
tenant's storage quota until an import consumes it (the import deletes it; the bucket's `faq-imports/` rule
expires it after 7 days). So a tenant holds at most MAX_PENDING_UPLOADS grants at a time: each grant leaves a
marker object next to its upload's key, and counts while its form can still upload (the form's expiry is
the key's first 8 hex digits) or while its upload waits for an import. Counting uploads alone would not do:
grants taken first and used after would all pass, and a form used again after its import consumed the
upload would park another file. Every key of a tenant's grants is under one prefix, listed at once.

The count and the marker's write are not one step: a burst of concurrent grant requests can all see room,
so the bound is MAX_PENDING_UPLOADS plus that burst (the requests under way at one moment), not exact.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from chalicelib.domain.errors import AppError, BadRequest
from chalicelib.faq.commands import IMPORT_FILE_TYPES, FaqUploadUrlRequest
from chalicelib.faq.entries import require_faq_kb
from chalicelib.faq.rows import MAX_FILE_BYTES
from chalicelib.ports import Dependencies
from chalicelib.ports.storage import MAX_LISTED_KEYS

#: grants a tenant may hold at once (MAX_FILE_BYTES an upload, outside the quota, for 7 days at most; a form
#: used again within its expiry replaces its object, whose old version the bucket keeps a day)
MAX_PENDING_UPLOADS = 20
#: a form counts this long past its expiry: storage's clock and the function's may differ
CLOCK_SKEW_SECONDS = 300
#: what a grant's marker is named with (the upload's key, its type replaced); `object_key` never takes it
MARKER = ".grant"
#: how long the bucket's `faq-imports/` rule keeps an upload (infra/template.json)
KEPT_DAYS = 7


class TooManyPendingUploads(AppError):
    status = 429
    code = "too_many_pending_uploads"


def upload_url(
    deps: Dependencies, tenant_id: str, kb_id: str, request: FaqUploadUrlRequest
) -> dict[str, Any]:
    kb = require_faq_kb(deps, tenant_id, kb_id)  # the key's tenant and knowledge base: the caller's own
    kind = request.file_name.rsplit(".", 1)[-1].lower() if "." in request.file_name else ""
    if kind not in IMPORT_FILE_TYPES:
        raise BadRequest(
            f"an FAQ import is a {', '.join(IMPORT_FILE_TYPES)} file, not {request.file_name!r}",
            code="unsupported_file_type",
        )
    require_room_for_an_upload(deps, kb.tenant_id)
    expires = deps.settings.presign_expires_seconds
    key = upload_key(kb.tenant_id, kb.id, kind, time.time() + expires)
    record_grant(deps, key)
    form = deps.inbox.presign_post(key, expires, MAX_FILE_BYTES)  # S3 refuses more (a PUT takes 5 GB)
    grant = {"url": form.url, "method": "POST", "fields": form.fields, "object_key": key}
    return {**grant, "expires_in": expires, "max_size": MAX_FILE_BYTES}


def uploads_prefix(tenant_id: str) -> str:
    return f"faq-imports/{tenant_id}/uploads/"


def upload_key(tenant_id: str, kb_id: str, kind: str, expires_at: float) -> str:
    """faq-imports/<tenant>/uploads/<kb>/<8 hex: the form's expiry, epoch seconds><24 random hex>.<kind>"""
    return f"{uploads_prefix(tenant_id)}{kb_id}/{int(expires_at):08x}{uuid.uuid4().hex[:24]}.{kind}"


def marker_key(key: str) -> str:
    return f"{key.rsplit('.', 1)[0]}{MARKER}"


def is_upload_of(key: str, tenant_id: str, kb_id: str) -> bool:
    """The key is an upload of this tenant's knowledge base (its form is checked at the boundary:
    commands.UPLOAD_KEY). The layout before the per-tenant prefix (faq-imports/<tenant>/<kb>/uploads/) is
    taken too, for grants minted before it: the bucket expires those 7 days after; drop it then."""
    owned = (f"{uploads_prefix(tenant_id)}{kb_id}/", f"faq-imports/{tenant_id}/{kb_id}/uploads/")
    return key.startswith(owned) and ".." not in key


def _kb_of(key: str, prefix: str) -> str:
    return key[len(prefix) :].split("/", 1)[0]


def require_room_for_an_upload(deps: Dependencies, tenant_id: str) -> None:
    """Refuses (429) a grant past MAX_PENDING_UPLOADS; the markers of forms that expired unused go, and so
    does everything under a knowledge base that is gone (nothing can import it any more)."""
    now = time.time()
    prefix = uploads_prefix(tenant_id)
    keys = deps.inbox.list_keys(prefix, MAX_LISTED_KEYS)
    gone = {kb_id for kb_id in {_kb_of(k, prefix) for k in keys} if not _kb_lives(deps, tenant_id, kb_id)}
    pending: set[str] = set()
    for key in keys:
        grant = key.rsplit(".", 1)[0]
        if _kb_of(key, prefix) in gone:
            deps.inbox.delete(deps.inbox.url_for(key))
        elif not key.endswith(MARKER) or _form_works(grant, now):
            pending.add(grant)  # an upload not imported yet, or a form that can still upload
        else:  # nothing more can come through its form: its slot is free
            deps.inbox.delete(deps.inbox.url_for(key))
    # a full listing may not be all of them (only a burst of grants makes so many): refused, and the markers
    # just deleted make room for the next request
    if len(pending) >= MAX_PENDING_UPLOADS or len(keys) >= MAX_LISTED_KEYS:
        expires = deps.settings.presign_expires_seconds
        raise TooManyPendingUploads(
            f"at most {MAX_PENDING_UPLOADS} FAQ import uploads may be pending at once: import the files "
            "uploaded (an import consumes its upload), or wait: an upload form's place frees when it expires "
            f"({expires} seconds after it was given), an uploaded file's when it is imported or "
            f"{KEPT_DAYS} days after",
            data={"pending": len(pending), "limit": MAX_PENDING_UPLOADS},
        )


def _kb_lives(deps: Dependencies, tenant_id: str, kb_id: str) -> bool:
    kb = deps.kbs.get(kb_id)
    return kb is not None and kb.tenant_id == tenant_id and kb.status != "deleting"


def record_grant(deps: Dependencies, key: str) -> None:
    """The grant's marker, written before its form is signed: it is counted from then on."""
    deps.inbox.save(marker_key(key), b"", "application/octet-stream")


def _form_works(grant: str, now: float) -> bool:
    try:
        expires_at = int(grant.rsplit("/", 1)[-1][:8], 16)
    except ValueError:  # not a key this module made: counted, it cannot be told apart
        return True
    return now < expires_at + CLOCK_SKEW_SECONDS
