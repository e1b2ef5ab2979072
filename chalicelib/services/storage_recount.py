"""The operator's storage recount of a tenant (POST /v1/admin/tenants/{id}/storage-recount): each of its
documents counted again by the one rule, `stored_size.recount_document` (what it stores is what it counts),
a page of documents a request, so a tenant of any size is walked in requests of bounded work: documents
indexed before their parse outputs counted (their file alone) are counted in full, and drift repaired."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from chalicelib.domain.types import Knowledge
from chalicelib.observability import logger
from chalicelib.ports import Dependencies
from chalicelib.services.kb_rows import position
from chalicelib.services.stored_size import RECOUNT_DEFERRED, awaits_its_indexing, recount_document

#: knowledge bases one page may look at (each one read), whether or not they hold documents
KBS_PER_PAGE = 100
#: a page ends after the document that passes this (the API answers within 28 s; a document with many page
#: ranges takes hundreds of reads), with a cursor, however few documents it recounted
PAGE_SECONDS = 12.0

KbPosition = tuple[str, str]  # (name, id): the tenant's knowledge bases' order
RowPosition = tuple[str, str]  # (created_at ISO, id): a knowledge base's documents' order


@dataclass(frozen=True)
class RecountPosition:
    """Where a walk goes on: in the knowledge base after `kb_after` (None: the tenant's first), after its
    document at `row_after` (None: from its first)."""

    kb_after: KbPosition | None = None
    row_after: RowPosition | None = None


@dataclass
class TenantRecount:
    """One page of a tenant's recount. `skipped`: documents left as they are (on their way and not yet
    indexed: their indexing counts them; or a recount deferred by the store), counted in the bytes as they
    are. `usage_*`: the tenant's storage_used when the page began and ended."""

    documents: int = 0
    corrected: int = 0
    skipped: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    usage_before: int = 0
    usage_after: int = 0
    next: RecountPosition | None = field(default=None)


def recount_tenant_page(
    deps: Dependencies, tenant_id: str, start: RecountPosition | None, limit: int
) -> TenantRecount:
    """Recounts up to `limit` of the tenant's documents from `start`, knowledge base by knowledge base
    (at most KBS_PER_PAGE of them read, and documents for at most about PAGE_SECONDS), and says where the next page goes on (`next`; None: done).
    A document counted twice (a knowledge base renamed during the walk) is recounted twice: a no-op."""
    deadline = time.monotonic() + PAGE_SECONDS
    page = TenantRecount(usage_before=_usage(deps, tenant_id))
    current = start or RecountPosition()
    page.next = current  # (where the next page goes on if this one's knowledge bases run out)
    for _ in range(KBS_PER_PAGE):
        kbs = deps.kbs.page(tenant_id, current.kb_after, 1)
        if not kbs:
            page.next = None
            break
        kb = kbs[0]
        budget = limit - page.documents
        rows = deps.knowledge.page_by_kb(kb.id, after=current.row_after, limit=budget)
        for done, row in enumerate(rows):
            if page.documents and time.monotonic() >= deadline:  # the next page goes on from here
                after = position(rows[done - 1]) if done else current.row_after
                page.next = RecountPosition(current.kb_after, after)
                page.usage_after = _usage(deps, tenant_id)
                return page
            _recount(deps, row, page)
        if len(rows) == budget:  # the page is full: the next goes on after its last document
            page.next = RecountPosition(current.kb_after, position(rows[-1]))
            break
        current = page.next = RecountPosition((kb.name, kb.id))
    page.usage_after = _usage(deps, tenant_id)
    return page


def _recount(deps: Dependencies, row: Knowledge, page: TenantRecount) -> None:
    page.documents += 1
    recount = None
    # a document on its way, never indexed at its attempt, is counted by its indexing (and a reparse may
    # be removing its ended attempt's outputs right now, which that reparse's own recount gives back)
    if not awaits_its_indexing(row):
        try:
            recount = recount_document(deps, row.id)
        except RECOUNT_DEFERRED as error:  # the next recount of the tenant tries it again
            logger.warning(
                "a document's storage recount was deferred",
                extra={"knowledge_id": row.id, "error": type(error).__name__},
            )
    if recount is None:
        page.skipped += 1
        page.bytes_before += row.storage_size
        page.bytes_after += row.storage_size
        return
    page.corrected += recount.corrected
    page.bytes_before += recount.before
    page.bytes_after += recount.after


def _usage(deps: Dependencies, tenant_id: str) -> int:
    tenant = deps.tenants.get(tenant_id)
    return 0 if tenant is None else tenant.storage_used
