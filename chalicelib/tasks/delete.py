"""Deleting one knowledge, for every task that deletes (one, a batch, a whole knowledge base, a move's
source)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context

from chalicelib.domain.events import EventType
from chalicelib.domain.ids import execution_name
from chalicelib.domain.storage_keys import upload_intent_key
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, UnknownStorageBackend
from chalicelib.services import resources
from chalicelib.services.events import knowledge_changed
from chalicelib.services.fairness import leave_pipeline
from chalicelib.services.stored_objects import drop_signed_copies, stored_objects
from chalicelib.services.stored_size import catalogued_images
from chalicelib.services.usable import index_space_if_usable
from chalicelib.tasks.move_across import remove_carried


def delete_one(deps: Dependencies, knowledge_id: str, *, in_kb: str | None = None) -> None:
    """WeKnora's order (spec §1.22), idempotent: mark deleting → stop the execution (queued stage messages
    drop themselves) → collect the images → delete index entries, chunks and spans in parallel (an error
    stops here and the task retries) → the stored objects → the row, its dedupe claim and its bytes of the
    tenant's usage, last and in one transaction (so a retry after a crash or a failed object delete finds the
    row and redoes it all). `in_kb` (a knowledge base's delete): only while the row is still in it, so a
    document a move took out after the delete listed it stays where it went."""
    knowledge = deps.knowledge.mark_deleting(knowledge_id, in_kb=in_kb)
    if knowledge is None:
        return  # already gone, or moved out of the knowledge base being deleted
    deps.workflow.stop(execution_name(knowledge.id, knowledge.attempt), "the knowledge is being deleted")
    resources.release_owner(deps, knowledge.id)  # its download links stop working, before its files go
    try:
        # with the images the catalog recorded (a retried parse's first try's, which no manifest lists)
        catalogued = [r.url for r in catalogued_images(knowledge, deps.resources.owned_by(knowledge.id))]
        objects = list(dict.fromkeys([*catalogued, *stored_objects(deps, knowledge)]))
    except UnknownStorageBackend:  # the operator removed its backend: the row goes, the objects are theirs
        logger.warning(
            "the knowledge's storage backend is no longer configured: its objects are left where they are",
            extra={"knowledge_id": knowledge.id, "storage_backend": knowledge.storage_backend},
        )
        objects = []
    kb = deps.kbs.get(knowledge.kb_id)
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="delete") as pool:
        # a pool thread starts with an empty context: the meter (and the local function name) go along
        futures = [
            pool.submit(copy_context().run, deps.chunks.delete_all, knowledge.id),
            pool.submit(copy_context().run, deps.spans.delete_all, knowledge.id),
        ]
        # whatever the knowledge base indexes now: entries written before its indexing was switched off
        # are still there
        space = index_space_if_usable(deps, kb) if kb is not None else None
        if kb is not None and space is not None:
            engine = deps.engine(kb.retrieval_engine)
            futures.append(
                pool.submit(copy_context().run, engine.delete_by_knowledge, space, kb.id, [knowledge.id])
            )
        for future in futures:
            future.result()  # the first error stops the delete: the row stays `deleting`, the task retries
    if kb is not None:  # the document's graph contribution and its wiki pages go with it
        deps.graph.delete_knowledge(kb.id, knowledge.id)
        from chalicelib.services.dispatch import retract_wiki

        retract_wiki(deps, kb, knowledge.id)
    deps.tags.remove_knowledge(knowledge.id)  # its tag relations (WeKnora: after the index, before the row)
    # Every object goes before the row: one that cannot be deleted now (a store that does not answer, a
    # refused permission) stops here, the row stays `deleting` and the task comes back, so nothing of a
    # deleted document is left behind unrecorded. An image comes before the manifest that lists it, so a
    # retry still finds what is left.
    for url in objects:
        deps.files.delete(url)
    drop_signed_copies(deps, knowledge, objects)
    # A move across backends not finished: no row names its copies before its commit, nor the old objects
    # after it; its record does, and goes last (a retried move that finds the row gone finds neither).
    remove_carried(deps, knowledge.id, keep=(knowledge.storage_backend,), row=knowledge)
    if knowledge.channel == "presigned":
        # its upload intent, if a crash left it: before the row, so a PUT replayed with the still-valid
        # presigned URL finds neither and creates nothing (operations/create.py `accept_uploaded_object`)
        deps.inbox.delete(deps.inbox.url_for(upload_intent_key(knowledge.id)))
    # Announced before the row goes, as nothing is left to read the event from after: a delivery that dies
    # in between is redelivered, finds the row and announces again under the same id (a repeat consumers
    # and webhook deliveries drop), where one that announced after the delete would leave nothing to say.
    knowledge_changed(deps, knowledge, EventType.KNOWLEDGE_DELETED, status="deleted")
    # Its bytes and its place in the tenant's count go in the same transaction.
    deps.knowledge.delete(knowledge.id)
    leave_pipeline(deps, knowledge.tenant_id, knowledge.id)
