"""Move and clone on the lifecycle queue (spec §1.25): the work behind POST /knowledge/move and
POST /knowledge-bases/{id}/clone, driven by the lifecycle worker's slices (`stages/lifecycle.py`).

Move, per knowledge (idempotent; a redelivery finishes what an earlier one began):
    row → target with the target's dedupe claim (one transaction; a live duplicate there fails the item)
    → a target on another storage backend: the objects are copied there and the old ones deleted
      (`tasks/move_across.py`)
    → reuse_vectors: index entries move to the target, chunks are repointed (no embedding call)
      reparse: the source's entries and chunks go, and a new attempt runs under the target's config
    → the source's graph contribution and wiki pages are retracted
    → the row is read again (before a reparse begins): a delete that landed meanwhile is finished, and
      what the move wrote removed.


Clone, which shares `ItemFailed`, `rekey`, `index_space` and `carry_wiki_pages`, is in `tasks/clone.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial

from chalicelib.domain.errors import PermanentStageError
from chalicelib.domain.types import (
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    Task,
)
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, DuplicateKnowledge, IndexSpace
from chalicelib.services import resources
from chalicelib.services.tag_names import tag_by_names
from chalicelib.tasks.delete import delete_one
from chalicelib.tasks.move_across import carry_objects

#: one item of a task and the call that does it
Work = tuple[str, Callable[[], None]]


class ItemFailed(PermanentStageError):
    """This item cannot be done (recorded against it; the task goes on)."""


def rekey(dedupe_key: str, kb_id: str) -> str:
    """The same content's dedupe key in another knowledge base (`tenant|kb|...`)."""
    if not dedupe_key:
        return ""
    parts = dedupe_key.split("|")
    return "|".join([parts[0], kb_id, *parts[2:]])


def index_space(deps: Dependencies, kb: KnowledgeBase) -> IndexSpace:
    return IndexSpace.of(deps.embedding_model(kb.embedding_model_id))


def _retract(deps: Dependencies, kb: KnowledgeBase | None, knowledge_id: str) -> None:
    if kb is None:
        return
    deps.graph.delete_knowledge(kb.id, knowledge_id)
    from chalicelib.services.dispatch import retract_wiki

    retract_wiki(deps, kb, knowledge_id)


# ---------------------------------------------------------------- move


def move_work(deps: Dependencies, task: Task) -> Iterator[Work]:
    for item in task.items[task.done :]:
        yield item, partial(move_one, deps, task, item)


def move_one(deps: Dependencies, task: Task, knowledge_id: str) -> None:
    source_kb_id, mode = str(task.params["source_kb_id"]), str(task.params["mode"])
    target = deps.kbs.get(task.kb_id)
    if target is None or target.status == "deleting":
        raise ItemFailed("the target knowledge base is gone or being deleted")
    source = deps.kbs.get(source_kb_id)
    row = deps.knowledge.get(knowledge_id)
    if row is None:  # an earlier delivery may have moved some of it before the delete finished
        _remove_move_leftovers(deps, knowledge_id, source, target)
        raise ItemFailed("the knowledge no longer exists")
    if row.tenant_id != task.tenant_id:
        raise ItemFailed("the knowledge no longer exists")
    if row.kb_id == source_kb_id:
        if row.parse_status != ParseStatus.COMPLETED:
            raise ItemFailed(f"only completed knowledge can be moved; this one is {row.parse_status.value}")
        try:
            moved = deps.knowledge.move_to_kb(
                row.id, source_kb_id, target.id, rekey(row.dedupe_key, target.id)
            )
        except DuplicateKnowledge as duplicate:
            raise ItemFailed(
                f"the target knowledge base already holds this content as knowledge {duplicate.existing.id}"
            ) from duplicate
        if moved is None:
            raise ItemFailed("the knowledge changed state while it was being moved; move it again")
        row = moved
    elif row.kb_id != target.id:
        raise ItemFailed("the knowledge is no longer in the source knowledge base")
    # The row is in the target: what follows is idempotent, and a redelivery lands here to finish it.
    old_backend = task.params.get("from_backends", {}).get(row.id)
    if old_backend is not None:  # the target is bound to another backend: the objects come along
        row = carry_objects(deps, row, str(old_backend), target.storage_backend)
    deps.tags.remove_knowledge(row.id)  # the source's relations (moving cleared the row's tag ids)
    names = task.params.get("tags", {}).get(row.id, [])
    if names:
        tag_by_names(deps, row, [str(name) for name in names])
    if mode == "reuse_vectors":
        _repoint(deps, row, source_kb_id, target)
        carry_wiki_pages(deps, source_kb_id, row.id, target, {})  # before the source's records go
    _retract(deps, source, row.id)
    _undo_if_deleted(deps, row.id, source, target)
    if mode != "reuse_vectors":
        _reparse_in_target(deps, row, source, target)


def _undo_if_deleted(
    deps: Dependencies, knowledge_id: str, source: KnowledgeBase | None, target: KnowledgeBase
) -> None:
    """A delete that landed during the move cleaned up before the move wrote (on the target, where the row
    already was), so what the move wrote after it would stay:

        move     move_to_kb ─────────────────────────────── _repoint: the source's entries → the target
        delete              mark_deleting ── the target's entries, chunks, tags ── row gone

    Read after every write of the move, a row gone or deleting has its delete finished here and what the
    move wrote removed, and the item is not moved."""
    current = deps.knowledge.get(knowledge_id)
    if current is not None and current.parse_status != ParseStatus.DELETING:
        return
    delete_one(deps, knowledge_id)  # idempotent: a delete under way ends here, so the row is gone after
    _remove_move_leftovers(deps, knowledge_id, source, target)
    raise ItemFailed("the knowledge was deleted while it was being moved")


def _remove_move_leftovers(
    deps: Dependencies, knowledge_id: str, source: KnowledgeBase | None, target: KnowledgeBase
) -> None:
    """What a move writes for a knowledge whose row is gone: index entries (either side), repointed chunks,
    tag relations, carried wiki pages, registered files. Nothing of a deleted row may stay, and ids are never
    reused, so removing them is always safe."""
    for kb in (source, target):
        if kb is not None and kb.indexing_strategy.needs_embedding:
            deps.engine(kb.retrieval_engine).delete_by_knowledge(index_space(deps, kb), kb.id, [knowledge_id])
    deps.chunks.delete_all(knowledge_id)
    deps.tags.remove_knowledge(knowledge_id)
    _retract(deps, target, knowledge_id)
    resources.release_owner(deps, knowledge_id)


def _repoint(deps: Dependencies, row: Knowledge, source_kb_id: str, target: KnowledgeBase) -> None:
    """Index entries into the target (dropped from the source) and the chunks repointed: no embedding."""
    if target.indexing_strategy.needs_embedding:
        moved = deps.engine(target.retrieval_engine).move_knowledge(
            index_space(deps, target), source_kb_id, target.id, [row.id]
        )
        logger.info("moved index entries", extra={"knowledge_id": row.id, "entries": moved})
    stale = [
        replace(chunk, kb_id=target.id) for chunk in deps.chunks.list(row.id) if chunk.kb_id != target.id
    ]
    if stale:
        deps.chunks.put_many(stale)


def carry_wiki_pages(
    deps: Dependencies,
    source_kb_id: str,
    knowledge_id: str,
    target: KnowledgeBase,
    id_map: dict[str, str],
    new_id: str = "",
) -> None:
    """The document's wiki page records (its `wiki_page` chunks travel with its chunks) join the target's
    wiki, whose index is rebuilt when the target keeps a wiki."""
    from chalicelib.ports import WikiPageRecord
    from chalicelib.services.dispatch import trigger_wiki

    records = [r for r in deps.wiki.pages(source_kb_id) if r.knowledge_id == knowledge_id]
    if not records:
        return
    owner = new_id or knowledge_id
    deps.wiki.put_pages(
        target.id,
        owner,
        [WikiPageRecord(owner, r.document, r.title, id_map.get(r.chunk_id, r.chunk_id)) for r in records],
    )
    if target.indexing_strategy.wiki_enabled:
        trigger_wiki(deps, target.id, "finalize")


def _reparse_in_target(
    deps: Dependencies, row: Knowledge, source: KnowledgeBase | None, target: KnowledgeBase
) -> None:
    """The source's index entries and the chunks go; a new attempt runs under the target's configuration."""
    if source is not None and source.indexing_strategy.needs_embedding:
        deps.engine(source.retrieval_engine).delete_by_knowledge(
            index_space(deps, source), source.id, [row.id]
        )
    if row.parse_status != ParseStatus.COMPLETED:
        return  # an earlier delivery already started the new attempt
    from chalicelib.commands import ReparseRequest
    from chalicelib.tasks.reparse import reparse

    reparse(deps, row.tenant_id, row.id, ReparseRequest())


# ---------------------------------------------------------------- clone: the diff
