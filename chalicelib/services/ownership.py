"""Whose is it: a knowledge base or a knowledge row of the calling tenant, else the same 404 a missing one
gets (another tenant's ids are never told apart from missing ones).

Access rules, decided here and nowhere else: a request's key (set by the API's `caller_tenant` as the
request's `Access`) may be limited to some knowledge bases, and every other one answers 404 as if it did not
exist; a knowledge base another tenant shared with the caller's tenant is visible to a route that only reads
(its required scope is `read`), and answers 404 to everything else. Without a request's access (queue
stages, tasks) a tenant sees exactly its own objects, as before."""

from __future__ import annotations

import json
from contextvars import ContextVar, Token
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from chalicelib.domain.api_keys import Scope
from chalicelib.domain.clock import from_iso
from chalicelib.domain.errors import Conflict, Forbidden, NotFound
from chalicelib.domain.ids import is_uuid
from chalicelib.domain.storage_keys import upload_intent_key, upload_result_key
from chalicelib.domain.types import Knowledge, KnowledgeBase, utcnow
from chalicelib.ports import Dependencies


@dataclass(frozen=True)
class Access:
    """What the request's key may reach: its tenant, the scope the route needs (already checked against the
    key's), and the knowledge bases the key is limited to (None: every one)."""

    tenant_id: str
    required: Scope
    kb_ids: frozenset[str] | None = None
    #: the key's sha256 (what the key records are read by): a download link records it, so a revoke ends it
    key_hash: str = ""


_ACCESS: ContextVar[Access | None] = ContextVar("weknora_access", default=None)


def begin_request() -> Token[Access | None]:
    """A request starts with no access (nothing leaks from a previous request on a warm Lambda)."""
    return _ACCESS.set(None)


def end_request(token: Token[Access | None]) -> None:
    _ACCESS.reset(token)


def grant(access: Access) -> None:
    _ACCESS.set(access)


def current_access() -> Access | None:
    """The request's access (None outside a request: queue stages, tasks)."""
    return _ACCESS.get()


def require_whole_tenant() -> None:
    """For what acts on the tenant as a whole (its settings, a new knowledge base, which would lie outside
    the key's own list): a key limited to some knowledge bases is refused (403 kb_limited_key)."""
    access = _ACCESS.get()
    if access is not None and access.kb_ids is not None:
        raise Forbidden("this API key is limited to some knowledge bases", code="kb_limited_key")


def kb_allowed(kb_id: str) -> bool:
    """Whether the request's key may name this knowledge base at all (a key limited to others: no)."""
    access = _ACCESS.get()
    return access is None or access.kb_ids is None or kb_id in access.kb_ids


def _reads_shared(tenant_id: str) -> bool:
    """The request only reads, as this tenant: what was shared with it is visible."""
    access = _ACCESS.get()
    return access is not None and access.tenant_id == tenant_id and access.required is Scope.READ


def _visible(deps: Dependencies, tenant_id: str, kb_id: str, owner_tenant_id: str) -> bool:
    if not kb_allowed(kb_id):
        return False
    if owner_tenant_id == tenant_id:
        return True
    return _reads_shared(tenant_id) and tenant_id in deps.shares.tenants_of(kb_id)


def shared_kbs(
    deps: Dependencies, tenant_id: str, after: str, limit: int
) -> tuple[list[KnowledgeBase], str | None]:
    """The knowledge bases other tenants shared with this one that the request may read (none outside a
    reading request), in id order after the id `after` ('' from the first): at most `limit` of them, and
    the id to go on after (None: no more). The shares are read in batches and the page's knowledge bases
    in one, whatever the number shared (which the share cap bounds)."""
    if not _reads_shared(tenant_id):
        return [], None
    kb_ids = [kb_id for kb_id in deps.shares.shared_with(tenant_id) if kb_id > after and kb_allowed(kb_id)]
    page = kb_ids[:limit]
    found = deps.kbs.get_many(page) if page else {}
    visible = [found[kb_id] for kb_id in page if kb_id in found and found[kb_id].status == "active"]
    go_on = (page[-1] if page else after) if len(kb_ids) > limit else None
    return visible, go_on


def require_kb(
    deps: Dependencies, tenant_id: str, kb_id: str, *, deleting_too: bool = False
) -> KnowledgeBase:
    """`deleting_too`: one being deleted is answered too (its DELETE repeated), not refused 409."""
    kb = deps.kbs.get(kb_id)
    if kb is None or not _visible(deps, tenant_id, kb.id, kb.tenant_id):
        raise NotFound(f"knowledge base {kb_id} not found", code="kb_not_found")
    if kb.status == "deleting" and not deleting_too:
        raise Conflict(f"knowledge base {kb_id} is being deleted", code="kb_deleting")
    return kb


def owned_knowledge(deps: Dependencies, tenant_id: str, knowledge_id: str) -> Knowledge:
    """The row if it belongs to the tenant; another tenant's ids answer 404, as missing ones do."""
    knowledge = deps.knowledge.get(knowledge_id)
    if knowledge is None or not knowledge_visible(deps, tenant_id, knowledge):
        raise NotFound(f"knowledge {knowledge_id} not found", code="knowledge_not_found")
    return knowledge


def knowledge_visible(deps: Dependencies, tenant_id: str, knowledge: Knowledge) -> bool:
    return _visible(deps, tenant_id, knowledge.kb_id, knowledge.tenant_id)


def missing_knowledge_error(deps: Dependencies, tenant_id: str, knowledge_id: str) -> NotFound:
    """The 404 for a knowledge id without a row of this tenant. A presigned upload of this tenant that
    has no row yet says whether it is still awaited or why it was rejected; nothing about another
    tenant's upload, or one into a knowledge base the key may not name, is ever revealed (the intent names
    both)."""
    not_found = NotFound(f"knowledge {knowledge_id} not found", code="knowledge_not_found")
    if not is_uuid(knowledge_id):  # every id is a UUID; anything else names no upload (nor an object key)
        return not_found
    intent_url = deps.inbox.url_for(upload_intent_key(knowledge_id))
    if deps.knowledge.get(knowledge_id) is not None or not deps.inbox.exists(intent_url):
        return not_found
    intent = json.loads(deps.inbox.read(intent_url))
    if intent.get("tenant_id") != tenant_id or not kb_allowed(str(intent.get("kb_id", ""))):
        return not_found
    result_url = deps.inbox.url_for(upload_result_key(knowledge_id))
    if deps.inbox.exists(result_url):
        rejected = json.loads(deps.inbox.read(result_url))
        return NotFound(rejected["message"], code=rejected["code"], data=rejected.get("data"))
    if _upload_never_arrived(deps, knowledge_id, intent):
        return NotFound(
            "the presigned upload URL expired before a file arrived: ask for a new upload URL",
            code=UPLOAD_EXPIRED,
        )
    return NotFound("the presigned upload has not arrived yet", code="upload_pending")


#: what GET /knowledge/{id} answers for a presigned upload whose URL expired with no file sent to it
UPLOAD_EXPIRED = "upload_expired"

#: how long after the URL's expiry an upload may still arrive: S3 checks the expiry when a PUT starts, so a
#: PUT begun just before it still lands (the largest file, 50 MB, at a slow 0.5 Mbit/s: ~13 minutes), and
#: its event comes seconds after that. A file that did land waits in the inbox until accepted: that one is
#: `upload_pending` at any time, however long the uploads queue takes.
UPLOAD_LATE_ALLOWANCE = timedelta(minutes=15)


def _upload_never_arrived(deps: Dependencies, knowledge_id: str, intent: dict[str, Any]) -> bool:
    """The intent's URL expired more than the allowance ago and no object is at its key. An intent written
    before the expiry was recorded (no `expires_at`) stays pending, as it did, until the bucket expires it."""
    expires_at, key = intent.get("expires_at"), intent.get("key")
    if not isinstance(expires_at, str) or not isinstance(key, str):
        return False
    if utcnow() <= from_iso(expires_at) + UPLOAD_LATE_ALLOWANCE:
        return False
    # an accept may have created the row and consumed the object since the row was read: read it again
    return not deps.inbox.exists(deps.inbox.url_for(key)) and deps.knowledge.get(knowledge_id) is None
