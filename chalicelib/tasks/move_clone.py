"""Move and clone on the lifecycle queue (spec §1.25): the work behind POST /knowledge/move and
POST /knowledge-bases/{id}/clone, driven by the lifecycle worker's slices (`stages/lifecycle.py`).

Move, per knowledge (idempotent; a redelivery finishes what an earlier one began):
    the knowledge bases read again and checked as the request was (`check_compatible`: a re-embed or its
    switch since the request fails the item, and nothing is changed)
    → the document's tag names read from the source and kept in the files bucket (`_keep_tag_names`): the
      move clears the row's tag ids, and a redelivery after it reads them there
    → row → target with the target's dedupe claim (one transaction; a live duplicate there fails the item)
    → a target on another storage backend: the objects are copied there and the old ones deleted
      (`tasks/move_across.py`)
    → the tags in the target by name, their relations written whatever the row says already
      (`_tag_in_target`: a redelivery finds the row tagged, its relations just removed)
    → reuse_vectors: index entries move to the target, chunks are repointed (no embedding call)
      reparse: the source's entries and chunks go, and a new attempt runs under the target's config
    → the source's graph contribution and wiki pages are retracted
    → the row and the target are read again (right after the row moved, and before a reparse begins): a
      delete of either that landed meanwhile is finished, and what the move wrote removed; a later move
      that took the row on from the target meanwhile gets what this one carried there after it
      (`_follow_moved_on`)
    → `Knowledge Moved` announced to the source's and the target's subscribers (then a reparse's own
      `Knowledge Reparse Started`)


Clone, which shares `ItemFailed`, `check_compatible`, `rekey`, `index_space` and `carry_wiki_pages`, is in
`tasks/clone.py`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from functools import partial
from typing import NoReturn

from chalicelib.domain.clock import to_iso
from chalicelib.domain.errors import BadRequest, Conflict, PermanentStageError
from chalicelib.domain.events import moved_events
from chalicelib.domain.types import (
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    Task,
)
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, DuplicateKnowledge, IndexSpace, WikiPageRecord
from chalicelib.ports.wiki import PagePosition
from chalicelib.services import resources
from chalicelib.services.events import announce, reparse_started_again
from chalicelib.services.tag_names import tag_by_names, tag_names
from chalicelib.services.usable import index_space_if_usable
from chalicelib.tasks.delete import delete_one
from chalicelib.tasks.move_across import carry_objects, remove_carried
from chalicelib.tasks.reembed import reembed_running

#: one item of a task and the call that does it
Work = tuple[str, Callable[[], None]]


class ItemFailed(PermanentStageError):
    """This item cannot be done (recorded against it; the task goes on)."""


def check_compatible(
    deps: Dependencies, source: KnowledgeBase, target: KnowledgeBase, *, same_engine: bool
) -> None:
    """Same KB type and embedding model (vectors of one space), and for moved or copied index entries the
    same retrieval engine and the same kind of entries (`index_entries`); else a 400 with a stable code.
    Neither may be re-embedding (409 `reembed_running`): its switch would take the entries moved or copied
    in its old space away with it.
    A re-embed whose task ended or died (`reembed_running`) is none: its knowledge base stayed on its old
    model."""
    if source.id == target.id:
        raise BadRequest("the source and the target are the same knowledge base", code="same_knowledge_base")
    if source.type != target.type:
        raise BadRequest(
            f"a {source.type} knowledge base cannot move into a {target.type} one", code="kb_type_mismatch"
        )
    default_model = deps.settings.default_embedding_model
    if (source.embedding_model_id or default_model) != (target.embedding_model_id or default_model):
        raise BadRequest(
            "the knowledge bases use different embedding models", code="embedding_model_mismatch"
        )
    default_engine = deps.settings.retrieval_engine
    if same_engine and (source.retrieval_engine or default_engine) != (
        target.retrieval_engine or default_engine
    ):
        raise BadRequest(
            "the knowledge bases use different retrieval engines: index entries cannot be reused",
            code="retrieval_engine_mismatch",
        )
    entries = {"source": index_entries(source), "target": index_entries(target)}
    if same_engine and entries["source"] != entries["target"]:
        # entries moved into a knowledge base without an index would stay in the source's for good; a
        # document without entries (or without vectors) in one that searches them would never be found
        raise BadRequest(
            f"the source knowledge base's index holds {entries['source']}, the target's "
            f"{entries['target']}: index entries cannot be reused (a move can reparse instead)",
            code="indexing_strategy_mismatch",
            data=entries,
        )
    for role, kb in (("source", source), ("target", target)):
        if reembed_running(deps, kb):
            raise Conflict(
                f"the {role} knowledge base is being re-embedded: try again once its re-embed is done",
                code="reembed_running",
                data=dict(kb.reembed_to),
            )


def index_entries(kb: KnowledgeBase) -> str:
    """What a knowledge base's index holds of a document (`indexing_strategy`): entries with vectors, entries
    for keyword search only, or none. Keyword search reads the entries of both kinds alike."""
    strategy = kb.indexing_strategy
    if not strategy.needs_embedding:
        return "nothing"
    return "entries with vectors" if strategy.vector_enabled else "keyword-only entries"


def require_compatible(
    deps: Dependencies, source: KnowledgeBase, target: KnowledgeBase, *, same_engine: bool
) -> None:
    """`check_compatible` once more where the work is done: a re-embed may have begun, or switched either
    knowledge base to another model, since the request was checked. A mismatch fails the item."""
    try:
        check_compatible(deps, source, target, same_engine=same_engine)
    except (BadRequest, Conflict) as mismatch:
        raise ItemFailed(mismatch.message) from mismatch


def is_open(kb: KnowledgeBase | None) -> bool:
    """The knowledge base exists and no delete of it has begun."""
    return kb is not None and kb.status != "deleting"


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
    try:
        _move_one(deps, task, knowledge_id)
    except ItemFailed:
        _forget_tag_names(deps, task, knowledge_id)  # the item ends here: nothing reads them again
        raise


def _move_one(deps: Dependencies, task: Task, knowledge_id: str) -> None:
    source_kb_id, mode = str(task.params["source_kb_id"]), str(task.params["mode"])
    # strongly consistent: a delete, a re-embed or its switch written just now must count
    source = deps.kbs.get(source_kb_id, consistent=True)
    target = deps.kbs.get(task.kb_id, consistent=True)
    if target is None or not is_open(target):
        _undo_if_moved_into(deps, knowledge_id, task.kb_id, source, target)
        raise ItemFailed("the target knowledge base is gone or being deleted")
    row = deps.knowledge.get(knowledge_id)
    carried: list[str] | None = None  # the tag names this delivery read in the source
    if row is None:  # an earlier delivery may have moved some of it before the delete finished
        _remove_move_leftovers(deps, knowledge_id, source, target, target.id)
        raise ItemFailed("the knowledge no longer exists")
    if row.tenant_id != task.tenant_id:
        raise ItemFailed("the knowledge no longer exists")
    if row.kb_id == source_kb_id:
        if row.parse_status != ParseStatus.COMPLETED:
            raise ItemFailed(f"only completed knowledge can be moved; this one is {row.parse_status.value}")
        if source is None or not is_open(source):  # its delete takes the row: nothing is moved
            raise ItemFailed(SOURCE_DELETED)
        # checked before the first write: a mismatch changes nothing
        require_compatible(deps, source, target, same_engine=mode == "reuse_vectors")
        carried = _keep_tag_names(deps, task, row)  # before the move clears the row's tag ids
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
        # a delete of the target whose sweep listed its rows before this one arrived would never see it
        _undo_if_deleted(deps, row.id, source, target)
    elif row.kb_id != target.id:
        _carry_on_from_source(deps, row, source, task.params.get("attempts", {}).get(row.id), mode)
        raise ItemFailed("the knowledge is no longer in the source knowledge base")
    # The row is in the target: what follows is idempotent, and a redelivery lands here to finish it.
    old_backend = task.params.get("from_backends", {}).get(row.id)
    if old_backend is not None:  # the target is bound to another backend: the objects come along
        row = carry_objects(deps, row, str(old_backend), target.storage_backend)
    # the source's relations (moving cleared the row's tag ids), and any an earlier delivery wrote in the
    # target: `_tag_in_target` writes those again
    deps.tags.remove_knowledge(row.id)
    names = carried if carried is not None else _kept_tag_names(deps, task, row.id)
    _tag_in_target(deps, row, target, names)
    if names:
        _forget_tag_names(deps, task, row.id)
    if mode == "reuse_vectors":
        _repoint(deps, row, source_kb_id, target)
        carry_wiki_pages(deps, source_kb_id, row.id, target, {})  # before the source's records go
    _retract(deps, source, row.id)
    current = _undo_if_deleted(deps, row.id, source, target)
    if mode == "reuse_vectors":
        _follow_moved_on(deps, row, target, current)
    # to both knowledge bases' subscribers, before the reparse below (a delivery that began it announced
    # this already); a redelivery that finishes the item announces the same ids
    if row.parse_status == ParseStatus.COMPLETED:
        announce(
            deps,
            *moved_events(
                tenant_id=row.tenant_id,
                knowledge_id=row.id,
                from_kb_id=source_kb_id,
                to_kb_id=target.id,
                status=row.parse_status.value,
                attempt=row.attempt,
                task_id=task.id,
            ),
        )
    if mode != "reuse_vectors":
        _reparse_in_target(deps, row, source, target, task.params.get("attempts", {}).get(row.id))


#: where a move keeps a document's tag names while its row crosses (the files bucket; deleted once used)
TAG_NAMES_PREFIX = "move-tags/"
#: 100 names of up to 100 characters (4 bytes each in UTF-8), JSON-quoted, with room to spare
TAG_NAMES_MAX_BYTES = 256 * 1024


def _tag_names_key(task: Task, knowledge_id: str) -> str:
    return f"{TAG_NAMES_PREFIX}{task.tenant_id}/{task.id}/{knowledge_id}.json"


def _asked_tags(task: Task) -> dict[str, list[str]] | None:
    """The names a task written before this release carries in its params (every document's, in the one
    item: one of well-tagged documents was over DynamoDB's 400 KB and never written)."""
    tags = task.params.get("tags")
    return tags if isinstance(tags, dict) else None


def _keep_tag_names(deps: Dependencies, task: Task, row: Knowledge) -> list[str]:
    """The names of the document's tags in the source, read as its item runs (never bulk data in the task),
    and kept in the files bucket until the target has them: the move clears the row's tag ids, and a
    redelivery after it reads them there (`_kept_tag_names`). A tag renamed or deleted since the request
    counts as it is now."""
    asked = _asked_tags(task)
    if asked is not None:
        return [str(name) for name in asked.get(row.id, [])]
    names = tag_names(deps, row) if row.tag_ids else []
    if names:
        deps.inbox.save(_tag_names_key(task, row.id), json.dumps(names).encode(), "application/json")
    return names


def _kept_tag_names(deps: Dependencies, task: Task, knowledge_id: str) -> list[str]:
    """What `_keep_tag_names` kept, for a delivery that found the row moved already; none once used (the row
    names the tags then, and `_tag_in_target` writes their relations again)."""
    asked = _asked_tags(task)
    if asked is not None:
        return [str(name) for name in asked.get(knowledge_id, [])]
    try:
        data = deps.inbox.read(
            deps.inbox.url_for(_tag_names_key(task, knowledge_id)), limit=TAG_NAMES_MAX_BYTES
        )
    except FileNotFoundError:
        return []
    return [str(name) for name in json.loads(data)]


def _forget_tag_names(deps: Dependencies, task: Task, knowledge_id: str) -> None:
    if _asked_tags(task) is None:
        deps.inbox.delete(deps.inbox.url_for(_tag_names_key(task, knowledge_id)))


def _tag_in_target(deps: Dependencies, row: Knowledge, target: KnowledgeBase, names: list[str]) -> None:
    """The document's tags in the target, whatever an earlier delivery did (`remove_knowledge` has just taken
    every relation): the relations of the tags the row names already are written again (an earlier
    delivery's, which `add_tags` skips as present, or an edit's since), then the carried names are added,
    tags created by name where missing. `row`: as read before the move, or as it moved (no tags)."""
    if not names and not row.tag_ids:
        return
    current = deps.knowledge.get(row.id)
    if current is None or current.kb_id != target.id:  # not once a later move took it on
        return
    if current.tag_ids:
        deps.tags.relate(target.id, current.id, to_iso(current.created_at), current.tag_ids)
    tag_by_names(deps, current, names)


TARGET_DELETED = "the target knowledge base was deleted during the move"
SOURCE_DELETED = "the source knowledge base is being deleted: the knowledge was not moved"


def _undo_if_deleted(
    deps: Dependencies, knowledge_id: str, source: KnowledgeBase | None, target: KnowledgeBase
) -> Knowledge:
    """A delete that landed during the move cleaned up before the move wrote (on the target, where the row
    already was), so what the move wrote after it would stay:

        move     move_to_kb ─────────────────────────────── _repoint: the source's entries → the target
        delete              mark_deleting ── the target's entries, chunks, tags ── row gone

    The same for a delete of the whole target whose sweep listed its rows before the row arrived (as a
    create's `_undo_if_kb_closed`): its knowledge base turned `deleting` before that listing, so a
    consistent read after the move sees it. Read after the move's writes, a row gone or deleting, or a
    target gone or deleting, has the row's delete finished here and what the move wrote removed, and the
    item is not moved. A row a later move took on from the target is not the target's to take. Answers the
    row as read (`_follow_moved_on` starts from it: the read after the move's last write)."""
    current = deps.knowledge.get(knowledge_id)
    if current is None or current.parse_status == ParseStatus.DELETING:
        _undo_move(
            deps,
            knowledge_id,
            source,
            target,
            "the knowledge was deleted while it was being moved",
            target.id,
        )
    if current.kb_id != target.id:  # a later move took it on: not the target's to take (`_follow_moved_on`)
        return current
    if not is_open(deps.kbs.get(target.id, consistent=True)):
        _undo_move(deps, knowledge_id, source, target, TARGET_DELETED, target.id)
    return current


def _follow_moved_on(
    deps: Dependencies, row: Knowledge, target: KnowledgeBase, current: Knowledge | None
) -> None:
    """A later move may take the document on from the target as soon as the row is there, and carries what
    it finds there then; what this move carried in after that follows the document where it is now (index
    entries, chunks, wiki pages), or goes when it was reparsed or is being deleted there (that takes what is
    there). `current`: the row as the caller just read it (no write since); read again after each carry, as
    a third move may have come meanwhile."""
    here = target
    while current is not None and current.kb_id != here.id:
        there = deps.kbs.get(current.kb_id, consistent=True)
        if (
            there is None
            or not is_open(there)
            or current.attempt != row.attempt
            or current.parse_status == ParseStatus.DELETING
        ):
            # whatever `here` indexes now (entries written before its indexing was switched off too)
            if (space := index_space_if_usable(deps, here)) is not None:
                deps.engine(here.retrieval_engine).delete_by_knowledge(space, here.id, [row.id])
            deps.chunks.repoint(row.id, current.kb_id)
            _retract(deps, here, row.id)
            return
        _repoint(deps, current, here.id, there)
        carry_wiki_pages(deps, here.id, row.id, there, {})
        _retract(deps, here, row.id)
        here = there
        current = deps.knowledge.get(row.id)


def _carry_on_from_source(
    deps: Dependencies, row: Knowledge, source: KnowledgeBase | None, asked_at: object, mode: str
) -> None:
    """A later move took the row on before this one finished with the source (a delivery died between moving
    the row and carrying): while the row is at the attempt this move was asked for (`asked_at`, the task's),
    its index entries follow it (`_follow_moved_on`), or, for a move that reparses, the source's go and the
    row is parsed again where it is now. At another attempt nothing is touched: the entries may be the move's
    that did move the row, which carries them when it is delivered again."""
    if source is None or asked_at != row.attempt:
        return
    if mode != "reuse_vectors":
        here = deps.kbs.get(row.kb_id, consistent=True)
        if here is not None and is_open(here) and row.parse_status == ParseStatus.COMPLETED:
            _reparse_in_target(deps, row, source, here)
        return
    # whatever the source indexes now: entries written before its indexing was switched off follow too
    space = index_space_if_usable(deps, source)
    if space is not None and deps.engine(source.retrieval_engine).count(space, source.id, row.id):
        _follow_moved_on(deps, row, source, row)  # `row` was read just now, by `move_one`


def _undo_if_moved_into(
    deps: Dependencies,
    knowledge_id: str,
    target_id: str,
    source: KnowledgeBase | None,
    target: KnowledgeBase | None,
) -> None:
    """A delivery that moved the row into the target and ended before its read of the target, which was
    deleted since: the row would stay in a deleted knowledge base. A row the target's delete took (after an
    earlier delivery carried its index entries or wiki pages there) leaves those behind: they go here."""
    row = deps.knowledge.get(knowledge_id)
    if row is None:
        _remove_move_leftovers(deps, knowledge_id, source, target, target_id)
    elif row.kb_id == target_id:
        _undo_move(deps, knowledge_id, source, target, TARGET_DELETED, target_id)


def _undo_move(
    deps: Dependencies,
    knowledge_id: str,
    source: KnowledgeBase | None,
    target: KnowledgeBase | None,
    reason: str,
    target_id: str,
) -> NoReturn:
    delete_one(deps, knowledge_id)  # idempotent: a delete under way ends here, so the row is gone after
    _remove_move_leftovers(deps, knowledge_id, source, target, target_id)
    raise ItemFailed(reason)


def _remove_move_leftovers(
    deps: Dependencies,
    knowledge_id: str,
    source: KnowledgeBase | None,
    target: KnowledgeBase | None,
    target_id: str,
) -> None:
    """What a move writes for a knowledge whose row is gone: index entries (either side), repointed chunks,
    tag relations, carried wiki pages, registered files, and what it had not yet retracted from the source
    (graph facts, wiki pages). Nothing of a deleted row may stay, and ids are never reused, so removing them
    is always safe. A target deleted since (None) is cleaned by its id: its entries in the source's engine
    and index space, which it shared (`check_compatible`, for a move that carries entries)."""
    for kb_id, kb in ((source.id if source else "", source), (target_id, target or source)):
        # whatever it indexes now (entries written before its indexing was switched off are still there)
        space = index_space_if_usable(deps, kb) if kb is not None else None
        if kb is not None and space is not None:
            deps.engine(kb.retrieval_engine).delete_by_knowledge(space, kb_id, [knowledge_id])
    deps.chunks.delete_all(knowledge_id)
    deps.tags.remove_knowledge(knowledge_id)
    _retract(deps, source, knowledge_id)  # a move that died before it retracted them from the source
    if target is not None:
        _retract(deps, target, knowledge_id)
    else:  # its wiki is gone with it: only records a move carried after its delete purged it
        deps.wiki.delete_pages(target_id, knowledge_id)
    resources.release_owner(deps, knowledge_id)
    # what a move across storage backends copied and no row names (a delete that read its record while a
    # copy was still being written, then the commit failed and the delivery died before taking them back)
    remove_carried(deps, knowledge_id)


def _repoint(deps: Dependencies, row: Knowledge, source_kb_id: str, target: KnowledgeBase) -> None:
    """Index entries into the target (dropped from the source) and the chunks repointed: no embedding.
    Whatever the target indexes now: a document indexed before its source's indexing was switched off keeps
    its entries, and they go with it (into a target that indexes nothing too, `check_compatible`), where
    its delete takes them; left under the source's id, nothing would ever remove them."""
    space = (
        index_space(deps, target)
        if target.indexing_strategy.needs_embedding
        else index_space_if_usable(deps, target)
    )
    if space is not None:
        moved = deps.engine(target.retrieval_engine).move_knowledge(space, source_kb_id, target.id, [row.id])
        logger.info("moved index entries", extra={"knowledge_id": row.id, "entries": moved})
    # only each row's kb_id: an edit that follows the document writes the row meanwhile, and stays
    deps.chunks.repoint(row.id, target.id)


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
    from chalicelib.services.dispatch import trigger_wiki

    records = _document_pages(deps, source_kb_id, knowledge_id)
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


def _document_pages(deps: Dependencies, kb_id: str, knowledge_id: str) -> list[WikiPageRecord]:
    """The document's page records, read from its own place in the wiki's key order on (not every record
    of the knowledge base for each document carried); a page holds a document's records and a few more."""
    from chalicelib.enrich.wiki import MAX_PAGES  # the wiki's prompt and parsers: not on the API's cold start

    records: list[WikiPageRecord] = []
    after: PagePosition = (knowledge_id, "")  # before the document's first record
    while True:
        window, more = deps.wiki.pages_after(kb_id, after, MAX_PAGES)
        mine = [r for r in window if r.knowledge_id == knowledge_id]
        records += mine
        if not more or len(mine) < len(window) or not mine:
            return records
        after = (knowledge_id, mine[-1].chunk_id)


def _reparse_in_target(
    deps: Dependencies,
    row: Knowledge,
    source: KnowledgeBase | None,
    target: KnowledgeBase,
    asked_at: object = None,
) -> None:
    """The source's index entries and the chunks go; a new attempt runs under the target's configuration.
    `asked_at`: the attempt the move was asked for (the task's), whose next one the move begins."""
    # whatever the source indexes now (entries written before its indexing was switched off are still there)
    space = index_space_if_usable(deps, source) if source is not None else None
    if source is not None and space is not None:
        deps.engine(source.retrieval_engine).delete_by_knowledge(space, source.id, [row.id])
    if row.parse_status != ParseStatus.COMPLETED:
        # an earlier delivery already started the new attempt, and may have died before it announced it
        if isinstance(asked_at, int):
            reparse_started_again(deps, row, asked_at + 1)
        return
    from chalicelib.commands import ReparseRequest
    from chalicelib.tasks.reparse import reparse

    reparse(deps, row.tenant_id, row.id, ReparseRequest())


# ---------------------------------------------------------------- clone: the diff
