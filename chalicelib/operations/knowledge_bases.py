"""Knowledge bases: create, read and change."""

from __future__ import annotations

import uuid
from dataclasses import asdict, replace
from typing import Any

from chalicelib.commands import (
    CreateKnowledgeBase,
    IndexingStrategySettings,
    Query,
    UpdateKnowledgeBase,
    code,
)
from chalicelib.domain.answer_size import ANSWER_MAX_BYTES, cut_page
from chalicelib.domain.errors import BadRequest, Conflict, Forbidden
from chalicelib.domain.process_config import apply_chunking, check_enrichment, resolve
from chalicelib.domain.types import (
    EnrichmentSettings,
    FaqIndexSettings,
    IndexingStrategy,
    KnowledgeBase,
    Task,
    TaskKind,
)
from chalicelib.operations.listing import cursor_fields, encode_cursor, listing_fingerprint
from chalicelib.ports import Dependencies
from chalicelib.services.offered import check_engine, check_models, check_storage_backend
from chalicelib.services.ownership import kb_allowed, require_kb, require_whole_tenant, shared_kbs
from chalicelib.tasks import deliver_again, new_task, start_task
from chalicelib.tasks.reembed import FROM_ENGINE, FROM_MODEL, dead_reembed, reembed_running

NOTHING_INDEXED = (
    "the indexing strategy turns every index off (vector, keyword, wiki, graph): nothing could be found; "
    "keep at least one on"
)


def create_kb(deps: Dependencies, tenant_id: str, request: CreateKnowledgeBase) -> KnowledgeBase:
    require_whole_tenant()
    check_models(
        deps.settings,
        embedding=request.embedding_model_id,
        chat=request.summary_model_id,
        vision=request.vlm_model_id,
        asr=request.asr_model_id,
    )
    check_engine(deps.settings, request.retrieval_engine)
    check_storage_backend(deps.settings, request.storage_backend)
    if request.indexing_strategy is not None and request.indexing_strategy.nothing_indexed():
        raise BadRequest(NOTHING_INDEXED, code="no_index_enabled")
    if request.faq_index is not None and request.type != "faq":
        raise BadRequest("faq_index applies to FAQ knowledge bases only", code="setting_cannot_be_honoured")
    if deps.kbs.by_name(tenant_id, request.name) is not None:
        raise Conflict(f"a knowledge base named {request.name!r} exists", code="duplicate_kb_name")
    require_room_for_a_kb(deps, tenant_id)
    strategy = request.indexing_strategy
    kb = KnowledgeBase(
        id=str(uuid.uuid4()),
        tenant_id=tenant_id,
        name=request.name,
        description=request.description,
        type=request.type,
        chunking_config=apply_chunking(
            None, request.chunking_config.changes() if request.chunking_config else {}
        ),
        indexing_strategy=IndexingStrategy(**strategy.model_dump()) if strategy else IndexingStrategy(),
        # pinned at creation: a later change of the default never moves a knowledge base's vector space
        embedding_model_id=request.embedding_model_id or deps.settings.default_embedding_model,
        summary_model_id=request.summary_model_id,
        vlm_model_id=request.vlm_model_id,
        asr_model_id=request.asr_model_id,
        ocr_languages=list(request.ocr_languages),
        asr_language=request.asr_language,
        spreadsheet_layout=request.spreadsheet_layout,
        retrieval_engine=request.retrieval_engine,
        storage_backend=request.storage_backend,
        enrichment=EnrichmentSettings(**request.enrichment.model_dump())
        if request.enrichment
        else EnrichmentSettings(),
        faq_index=FaqIndexSettings(**request.faq_index.model_dump())
        if request.faq_index
        else FaqIndexSettings(),
    )
    check_enrichment(resolve(kb, {}), ocr_available=deps.ocr() is not None)
    deps.kbs.put(kb)
    return kb


def require_room_for_a_kb(deps: Dependencies, tenant_id: str) -> None:
    """403 kb_limit_reached when the tenant owns its cap of knowledge bases. A count of the tenant index (it
    stops at the cap) before the write: creates racing past the check can overshoot by as many as run at
    once, never without bound."""
    cap = deps.settings.max_kbs_per_tenant
    if cap > 0 and deps.kbs.count(tenant_id, cap) >= cap:
        raise Forbidden(
            f"the tenant owns its limit of {cap} knowledge bases: delete some, or ask the operator",
            code="kb_limit_reached",
        )


def get_kb(deps: Dependencies, tenant_id: str, kb_id: str) -> KnowledgeBase:
    return require_kb(deps, tenant_id, kb_id)


def kb_view(kb: KnowledgeBase, tenant_id: str) -> dict[str, Any]:
    """A knowledge base as the API answers it to `tenant_id`: `shared` when another tenant owns it (its
    `tenant_id`) and shared it, read-only, with this one."""
    return {**kb.to_dict(), "shared": kb.tenant_id != tenant_id}


class ListKnowledgeBasesQuery(Query):
    """One page of the listing; `next_cursor` (beside `data`) continues it."""

    limit: int = code("invalid_query", default=100, ge=1, le=100)
    cursor: str | None = code("invalid_cursor", default=None, max_length=2000)


OWN, SHARED = "own", "shared"


def list_kbs(
    deps: Dependencies, tenant_id: str, query: ListKnowledgeBasesQuery
) -> tuple[list[KnowledgeBase], str | None]:
    """One page of the tenant's own knowledge bases (by name, then id), then of those other tenants shared
    with it (read-only, each naming its owner in `tenant_id`; by id), and the cursor of the next page (None
    on the last). A page may come short (knowledge bases the key may not name are left out): go on while
    there is a cursor."""
    fingerprint = _fingerprint(tenant_id)
    section, after = _decode(query.cursor, fingerprint) if query.cursor else (OWN, [])
    found: list[KnowledgeBase] = []
    if section == OWN:
        own = deps.kbs.page(tenant_id, (after[0], after[1]) if after else None, query.limit + 1)
        found = [kb for kb in own[: query.limit] if kb_allowed(kb.id)]
        if len(own) > query.limit:
            last = own[query.limit - 1]
            return _within_page_size(
                tenant_id, found, _encode(OWN, [last.name, last.id], fingerprint), fingerprint
            )
        after = [""]
    shared, go_on = shared_kbs(deps, tenant_id, after[0], query.limit - len(found))
    next_cursor = _encode(SHARED, [go_on], fingerprint) if go_on is not None else None
    return _within_page_size(tenant_id, found + shared, next_cursor, fingerprint)


#: a page's knowledge bases as JSON (non-ASCII escaped, as Lambda sends the answer) stay under its 6 MB
#: response: 100 with 10,000-character CJK descriptions and long settings passed it
PAGE_MAX_BYTES = ANSWER_MAX_BYTES


def _within_page_size(
    tenant_id: str, found: list[KnowledgeBase], next_cursor: str | None, fingerprint: str
) -> tuple[list[KnowledgeBase], str | None]:
    """The page, or its first knowledge bases within PAGE_MAX_BYTES (one at least) with the cursor of the
    last one kept: the tenant's own go on after its (name, id), shared ones after its id."""
    page, last = cut_page(found, PAGE_MAX_BYTES, lambda kb: kb_view(kb, tenant_id))
    if last is None:
        return page, next_cursor
    own = last.tenant_id == tenant_id
    position = [last.name, last.id] if own else [last.id]
    return page, _encode(OWN if own else SHARED, position, fingerprint)


def _fingerprint(tenant_id: str) -> str:
    return listing_fingerprint("knowledge-bases", tenant_id)


def _encode(section: str, after: list[str], fingerprint: str) -> str:
    return encode_cursor({"s": section, "a": after, "f": fingerprint})


def _decode(cursor: str, fingerprint: str) -> tuple[str, list[str]]:
    """(section, position): own knowledge bases after [name, id], or shared ones after [id]."""
    try:
        data = cursor_fields(cursor)
        section, after, matches = data["s"], data["a"], data["f"] == fingerprint
    except (ValueError, KeyError, TypeError) as error:
        raise BadRequest("cursor is not one this listing gave", code="invalid_cursor") from error
    size = {OWN: 2, SHARED: 1}.get(section) if isinstance(section, str) else None
    well_formed = isinstance(after, list) and len(after) == size and all(isinstance(a, str) for a in after)
    if not matches or not well_formed:
        raise BadRequest("cursor is not one this listing gave (for this tenant)", code="invalid_cursor")
    return section, after


def update_kb(
    deps: Dependencies, tenant_id: str, kb_id: str, request: UpdateKnowledgeBase
) -> tuple[KnowledgeBase, Task | None]:
    """PUT /knowledge-bases/{id}: the given fields, checked as at creation. The scope (`apply_to`): `new`
    documents only, or `reparse` every document now (a durable task). A new embedding model or engine is
    refused unless `reembed` asks for the durable re-embed, which builds the new index beside the old one
    and switches when done. Returns the knowledge base and the task started, if any."""
    for _ in range(5):
        kb = require_kb(deps, tenant_id, kb_id)
        if kb.status != "active":
            raise Conflict("the knowledge base is being deleted", code="kb_deleting")
        changed, reembed_to = _changed(deps, kb, request)
        task = None
        # a re-embed whose task died (its message dead-lettered) no longer holds the knowledge base: this
        # change replaces it, and its task runs once more to take its half-built index away
        dead_task = dead_reembed(deps, kb)  # settled in this change's own write
        if dead_task is not None:
            changed = replace(changed, reembed_to={})
        if reembed_to:
            was = {FROM_MODEL: kb.embedding_model_id, FROM_ENGINE: kb.retrieval_engine}
            task = new_task(tenant_id, TaskKind.REEMBED, kb.id, [], **reembed_to, **was)
            changed = replace(changed, reembed_to={"task_id": task.id, **reembed_to})
        elif request.apply_to == "reparse":
            task = new_task(tenant_id, TaskKind.REPARSE_KB, kb.id, [])
        updated = deps.kbs.update(changed)
        if updated is None:
            continue  # changed meanwhile: read again and apply the request to what is there now
        if dead_task:
            deliver_again(deps, dead_task)
        if task is not None:
            start_task(deps, task)
        return updated, task
    raise Conflict("the knowledge base kept changing; try again", code="kb_changed")


def _changed(
    deps: Dependencies, kb: KnowledgeBase, request: UpdateKnowledgeBase
) -> tuple[KnowledgeBase, dict[str, str]]:
    # null is "leave it", as for name and description: a str or list setting never becomes None
    given = request.model_dump(exclude_unset=True, exclude_none=True, exclude={"apply_to", "reembed"})
    if request.name is not None and request.name != kb.name:
        other = deps.kbs.by_name(kb.tenant_id, request.name)
        if other is not None and other.id != kb.id:
            raise Conflict(f"a knowledge base named {request.name!r} exists", code="duplicate_kb_name")
    if request.retrieval_engine:
        check_engine(deps.settings, request.retrieval_engine)
    if request.storage_backend is not None:
        check_storage_backend(deps.settings, request.storage_backend)
    strategy = kb.indexing_strategy
    if request.indexing_strategy is not None:
        merged = IndexingStrategySettings.model_validate(
            {**asdict(strategy), **request.indexing_strategy.model_dump(exclude_unset=True)}
        )
        if merged.nothing_indexed():
            raise BadRequest(NOTHING_INDEXED, code="no_index_enabled")
        strategy = IndexingStrategy(**merged.model_dump())
    enrichment = kb.enrichment
    if request.enrichment is not None:
        enrichment = replace(enrichment, **request.enrichment.model_dump(exclude_unset=True))
    changed = replace(
        kb,
        name=request.name if request.name is not None else kb.name,
        description=request.description if request.description is not None else kb.description,
        chunking_config=apply_chunking(kb.chunking_config, request.chunking_config.changes())
        if request.chunking_config is not None
        else kb.chunking_config,
        indexing_strategy=strategy,
        summary_model_id=given.get("summary_model_id", kb.summary_model_id),
        vlm_model_id=given.get("vlm_model_id", kb.vlm_model_id),
        asr_model_id=given.get("asr_model_id", kb.asr_model_id),
        ocr_languages=list(given.get("ocr_languages", kb.ocr_languages)),
        asr_language=given.get("asr_language", kb.asr_language),
        spreadsheet_layout=given.get("spreadsheet_layout", kb.spreadsheet_layout),
        # new documents only: a document keeps the backend it was created on (Knowledge.storage_backend)
        storage_backend=given.get("storage_backend", kb.storage_backend),
        enrichment=enrichment,
    )
    check_enrichment(resolve(changed, {}), ocr_available=deps.ocr() is not None)
    model = request.embedding_model_id if request.embedding_model_id else kb.embedding_model_id
    engine = request.retrieval_engine if request.retrieval_engine is not None else kb.retrieval_engine
    default_engine = deps.settings.retrieval_engine
    if model == kb.embedding_model_id and (engine or default_engine) == (
        kb.retrieval_engine or default_engine
    ):
        return changed, {}
    if request.apply_to == "reparse":
        raise BadRequest(
            "a new embedding model or engine re-embeds every document; reparse before or after it, not with it",
            code="reembed_with_reparse",
        )
    if reembed_running(deps, kb):
        raise Conflict(
            "a re-embed of this knowledge base is under way", code="reembed_running", data=dict(kb.reembed_to)
        )
    if not request.reembed:
        raise Conflict(
            "a new embedding model or retrieval engine needs every document embedded again: send "
            '"reembed": true to build the new index beside the old one and switch when it is done',
            code="reembed_required",
        )
    return changed, {"embedding_model_id": model, "retrieval_engine": engine}
