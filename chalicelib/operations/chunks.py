"""A document's chunks through the API (the specification's chunk routes): list (cursor), read one, edit its
text (re-embedded and re-indexed under the same id; the summary is made again), enable or disable one; and
short-lived links to the stored original and parsed Markdown are `file_links`'s.

An edit embeds the new text before anything is written (a model that fails changes nothing: 503), and the
questions generated from the old text leave the chunk and the index; the graph facts read from it leave the
graph, and the new text's are read when the graph is on, on the enrichment queue. Metadata keys with a leading `_` are the
stages' own (the graph checkpoint): never shown, and dropped by an edit as the questions are. A chunk row's
`is_enabled` is the chunk's own switch; its entries are on while the chunk and its document both are (and
search shows no hit of a chunk whose row is off, whatever its entries say). Either change makes the summary
stale (it is made from the enabled chunks' text). A child's text edited, or a child switched off, marks its
parent (`CHILDREN_CHANGED`): search then shows the child's own text for its hits, not the parent's. The row
is written only while it is the row the edit read: a switch or another edit answered meanwhile is kept,
and the edit is made again on top of it. After it wrote, an edit re-reads
the row: one a delete or a reparse overtook takes back what it wrote (404 `knowledge_not_found`, 409
`knowledge_changed`); one a move overtook follows the document (written again into its new knowledge base,
over what the move carried, and taken out of the old one); and one the document's switch overtook follows
it. A document being deleted is gone from the listing, the chunk read and the download links at once (404);
an edit of its chunks is 400 `invalid_state`, as every other write to it. A download link is a grant on
the file's entry in the resource catalog (services/resources.py), answered by `GET /r/{token}`.

A longer text counts on the tenant's storage quota (its growth in UTF-8 bytes, added to the document's
`storage_size` before anything is written: 403 `storage_quota_exceeded` changes nothing). A shorter one
gives nothing back until the document is counted again (a reparse's indexing) or deleted: counting
growth only never counts less than what is stored. An edit made again on a row another write changed
gives back what the try that lost counted and counts its growth on that row (a try whose row was written,
then carried by a move, keeps what it counted). A try writes the index before the row: one whose row
another write changed meanwhile, and whose edit then fails, puts the chunk's entries back as that row says."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from chalicelib.commands import ChunkListQuery, EditChunkRequest
from chalicelib.domain.answer_size import ANSWER_MAX_BYTES, cut_page
from chalicelib.domain.errors import (
    AppError,
    BadRequest,
    Conflict,
    NotFound,
    ServiceUnavailable,
    StageError,
    TransientStageError,
)
from chalicelib.domain.ids import attempt_chunk_prefix, content_hash, question_entry_id
from chalicelib.domain.image_info import ShownImages
from chalicelib.domain.markup import strip_active_content
from chalicelib.domain.types import (
    Chunk,
    ChunkType,
    EnableStatus,
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    SummaryStatus,
)
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, IndexSpace, IndexWriteError, StorageQuotaExceeded
from chalicelib.services.dispatch import (
    refresh_refusal_answered,
    request_graph_refresh,
    request_summary_refresh,
)
from chalicelib.services.embedding_runs import embed_for_api
from chalicelib.services.indexing import chunk_entries, question_entry, take_back_chunks, write_entries
from chalicelib.services.indexing import searchable as document_searchable
from chalicelib.services.liveness import kept_after_write
from chalicelib.services.ownership import owned_knowledge, require_kb
from chalicelib.services.quotas import storage_refusal
from chalicelib.services.usable import require_usable_for_api

if TYPE_CHECKING:  # numpy stays off the API function's cold-start path
    from chalicelib.ports import Vectors

#: longer than any chunk id this service makes (and than a key DynamoDB takes)
MAX_CHUNK_ID = 300
#: chunk types whose text a person may edit (the rest are made from others: summaries, questions, tables)
EDITABLE = frozenset({ChunkType.TEXT, ChunkType.IMAGE_OCR, ChunkType.IMAGE_CAPTION})


def _internal(metadata_key: str) -> bool:
    """A chunk's metadata key that is the stages' own bookkeeping (a leading `_`: the graph window's
    checkpoint), never shown to the tenant."""
    return metadata_key.startswith("_")


def _view(chunk: Chunk) -> dict[str, Any]:
    data = chunk.to_dict()
    data["metadata"] = {k: v for k, v in chunk.metadata.items() if not _internal(k)}
    data["chunk_index"] = chunk.seq
    return data


def usable_knowledge(deps: Dependencies, tenant_id: str, knowledge_id: str) -> Knowledge:
    """The tenant's row, as `owned_knowledge`; a row being deleted is gone from use at once: the same 404."""
    knowledge = owned_knowledge(deps, tenant_id, knowledge_id)
    if knowledge.parse_status == ParseStatus.DELETING:
        raise _deleted(knowledge.id)
    return knowledge


def _deleted(knowledge_id: str) -> NotFound:
    return NotFound(f"knowledge {knowledge_id} not found", code="knowledge_not_found")


def list_chunks(
    deps: Dependencies, tenant_id: str, knowledge_id: str, query: ChunkListQuery
) -> dict[str, Any]:
    knowledge = usable_knowledge(deps, tenant_id, knowledge_id)
    prefix = attempt_chunk_prefix(knowledge.id, knowledge.attempt)
    if query.cursor and not query.cursor.startswith(prefix):
        raise BadRequest("the cursor is not one of this document's pages", code="invalid_cursor")
    page, after = deps.chunks.list_page(
        knowledge.id, prefix=prefix, after=query.cursor or None, limit=query.limit
    )
    items, last = cut_page([_view(chunk) for chunk in page], CHUNK_PAGE_MAX_BYTES)
    return {"items": items, "next_cursor": last["id"] if last else after or ""}


#: a page of chunks stays under Lambda's 6 MB response (JSON, non-ASCII escaped): 200 chunks of a scanned
#: CJK document's OCR text, each with its image's texts, would pass it
CHUNK_PAGE_MAX_BYTES = ANSWER_MAX_BYTES


def _chunk(deps: Dependencies, knowledge: Knowledge, chunk_id: str) -> Chunk:
    prefix = attempt_chunk_prefix(knowledge.id, knowledge.attempt)
    if len(chunk_id) > MAX_CHUNK_ID or not chunk_id.startswith(prefix):
        raise NotFound(f"chunk {chunk_id} not found", code="chunk_not_found")
    found = deps.chunks.get_many([(knowledge.id, chunk_id)]).get((knowledge.id, chunk_id))
    if found is None:
        raise NotFound(f"chunk {chunk_id} not found", code="chunk_not_found")
    return found


def get_chunk(deps: Dependencies, tenant_id: str, knowledge_id: str, chunk_id: str) -> dict[str, Any]:
    knowledge = usable_knowledge(deps, tenant_id, knowledge_id)
    return _view(_chunk(deps, knowledge, chunk_id))


def edit_chunk(
    deps: Dependencies, tenant_id: str, knowledge_id: str, chunk_id: str, request: EditChunkRequest
) -> dict[str, Any]:
    """The refreshes an edit makes due are queued after the row is written (`_queue_refreshes`): when the
    enrichment queue does not take one, the same request sent again, finding nothing to change, queues
    them again: the graph's when an edited chunk's text is sent unchanged, the summary's while it is pending
    when a chunk's edited text or its switched flag is sent unchanged (a save of chunks nobody changed asks
    for nothing: each message would make the summary again). A switch sent again also puts the chunk's
    entries as its row says (a write that raced it may have left them otherwise).

    The row is written only while it is the one the edit read (`put_unchanged`): another edit or a switch
    answered while this one embedded is never undone; this edit is made again on the row as it is then
    (its vectors reused for the same text), at most EDIT_TRIES times (409 `chunk_changed`)."""
    knowledge = owned_knowledge(deps, tenant_id, knowledge_id)
    if knowledge.parse_status == ParseStatus.DELETING:  # as every other write to a document being deleted
        raise BadRequest("the knowledge is being deleted", code="invalid_state")
    if knowledge.parse_status != ParseStatus.COMPLETED:
        raise Conflict(
            f"only a completed document's chunks can change; this one is {knowledge.parse_status.value}",
            code="not_completed",
        )
    first = chunk = _chunk(deps, knowledge, chunk_id)
    kb = require_kb(deps, tenant_id, knowledge.kb_id)
    embedded: _Embedded | None = None
    follow = False  # written, then the document moved: written again where it is now, changed or not
    counted = 0  # text bytes the edit counted on the document (given back when it does not stand)
    lost = False  # a try wrote the index, then another write changed the row first
    for tries in range(EDIT_TRIES):
        changed, refresh_again = _edited(chunk, request)
        if changed == chunk and not follow:
            switched_again = request.is_enabled is not None and chunk.metadata.get("switched") is True
            pending = knowledge.summary_status == SummaryStatus.PENDING
            if request.is_enabled is not None or tries > 0:  # the entries as the row says
                _switch_as_stored(deps, knowledge, kb, chunk)
            _queue_refreshes(
                deps,
                knowledge,
                chunk,
                graph=refresh_again,
                summary=pending and (refresh_again or switched_again),
            )
            return _view(chunk)
        texts = None
        # following a move, the text the move may have carried is the one the edit replaced
        new_text = changed.content != chunk.content or (follow and changed.content != first.content)
        if new_text and kb.indexing_strategy.needs_embedding:
            from chalicelib.chunker import index_text

            title = "" if changed.chunk_type != ChunkType.TEXT else knowledge.title
            texts = [index_text(title, changed.context_header, changed.content)]
        growth = _text_bytes(changed) - _text_bytes(chunk)
        grew = 0
        try:
            # a longer text is counted before any write (403 storage_quota_exceeded: nothing written)
            grew = _count_growth(deps, knowledge, growth) if growth > 0 else 0
            counted += grew
            # before any write: a model that fails changes nothing (503, the provider's words left out)
            embedded = _embedded(deps, kb, texts, embedded)
            # against the row first read: a move followed marks the parent where the document is now
            _mark_parent(deps, knowledge, kb, first, changed)
            written = _write(deps, knowledge, kb, chunk, changed, embedded, asked=_question_ids(first))
            # re-read after the write, also when the row had changed: a delete or a reparse that removed
            # it takes back what the index got (404 / 409)
            moved_to = _kept_or_moved(deps, knowledge, kb, first, written or changed, embedded)
        except Exception as error:  # the edit did not stand: what it counted goes back (here only)
            if follow and isinstance(error, AppError):  # the row as it was, where the document is now:
                # the same request makes the edit
                deps.chunks.put_unchanged(chunk, replace(first, kb_id=kb.id))
            _give_back(deps, knowledge, counted)
            if lost:
                _index_as_stored(deps, knowledge, kb, chunk_id)
            raise
        if written is not None and moved_to is None:  # the edit stands (at its row's attempt)
            graph = written.content != first.content or refresh_again
            _queue_refreshes(deps, knowledge, written, graph=graph, summary=True)
            return _view(written)
        if written is None:  # another write to the row came first: made again on the row as it is now
            # only this try's growth goes back: an earlier try's row that stood (a move carried it) is stored
            _give_back(deps, knowledge, grew)
            counted -= grew
            lost = lost or embedded.space is not None
        if moved_to is not None:
            # moved while the edit wrote: it follows the document, as the move carried (or will carry) the
            # rest of it; what the move carried of this chunk meanwhile is overwritten, so both agree
            knowledge, kb = moved_to
            follow = follow or written is not None
        chunk = _chunk(deps, knowledge, chunk_id)
    if lost:
        _index_as_stored(deps, knowledge, kb, chunk_id)
    raise Conflict(
        f"chunk {chunk_id} kept changing while it was edited; read it and try again", code="chunk_changed"
    )


#: writes of one edit that other writes to the same row overtook, before it answers 409 `chunk_changed`
EDIT_TRIES = 4


def _edited(chunk: Chunk, request: EditChunkRequest) -> tuple[Chunk, bool]:
    """The row as the request makes it from `chunk` (itself when nothing changes), and whether a text sent
    unchanged was a person's edit (its graph refresh asked again: maybe a retry the queue refused)."""
    changed = chunk
    refresh_again = False
    if request.content is not None:
        if chunk.chunk_type not in EDITABLE:
            raise BadRequest(
                f"a {chunk.chunk_type.value} chunk is made from others: edit those", code="not_editable"
            )
        text = strip_active_content(request.content).strip()
        if not text:
            raise BadRequest("content must not be empty", code="empty_content")
        if text != chunk.content:  # the questions asked about the old text go with it, as does what the
            # stages noted about it (the graph checkpoint: its facts were read from the old text)
            metadata = {k: v for k, v in changed.metadata.items() if k != "questions" and not _internal(k)}
            changed = replace(
                changed,
                content=text,
                content_hash=content_hash(text),
                metadata={**metadata, "edited": True},
                # the images the new text still shows (with what their tasks wrote of them)
                image_info=_still_shown(chunk.image_info, text),
            )
        else:  # maybe the retry of an edit whose graph refresh the queue did not take (a parser's text: none)
            refresh_again = chunk.metadata.get("edited") is True
    if request.is_enabled is not None and request.is_enabled != chunk.is_enabled:
        changed = replace(
            changed, is_enabled=request.is_enabled, metadata={**changed.metadata, "switched": True}
        )
    return changed, refresh_again


def _text_bytes(chunk: Chunk) -> int:
    return len(chunk.content.encode())


def _count_growth(deps: Dependencies, knowledge: Knowledge, growth: int) -> int:
    """Counts a chunk edit's `growth` (UTF-8 bytes of text) on the document's `storage_size` and on the
    tenant, in the row's one write (within the quota: 403 storage_quota_exceeded, nothing counted), so its
    delete gives it back and a reparse's indexing, which sets the size again, folds it away with the edited
    attempt. The write is conditional on the size read and the attempt still completed; one that lost a
    race reads again."""
    for _ in range(5):
        row = deps.knowledge.get(knowledge.id)
        if row is None or row.parse_status == ParseStatus.DELETING:
            raise _deleted(knowledge.id)
        if row.attempt != knowledge.attempt or row.parse_status != ParseStatus.COMPLETED:
            raise _changed(knowledge.id)
        expect = {
            "storage_size": row.storage_size,
            "attempt": row.attempt,
            "parse_status": ParseStatus.COMPLETED.value,
        }
        try:
            if deps.knowledge.update_fields(
                row.id, {}, expect=expect, storage_size=row.storage_size + growth
            ):
                return growth
        except StorageQuotaExceeded as error:
            raise storage_refusal(deps, row.tenant_id, growth, "the chunk's longer text") from error
    raise Conflict("the knowledge kept changing; try again", code="knowledge_changed")


def _give_back(deps: Dependencies, knowledge: Knowledge, counted: int) -> None:
    """Gives back what `_count_growth` counted for an edit that did not stand, while the row is still at the
    edit's attempt (conditional on the size read; the row and the tenant in one write). Nothing for a row
    gone or being deleted (its delete gives back what it counts) or reparsed (its indexing sets the size
    again)."""
    for _ in range(5 if counted > 0 else 0):
        row = deps.knowledge.get(knowledge.id)
        if row is None or row.parse_status == ParseStatus.DELETING or row.attempt != knowledge.attempt:
            return
        expect = {"storage_size": row.storage_size, "attempt": row.attempt}
        size = max(0, row.storage_size - counted)
        if deps.knowledge.update_fields(row.id, {}, expect=expect, storage_size=size):
            return


def _queue_refreshes(
    deps: Dependencies, knowledge: Knowledge, chunk: Chunk, *, graph: bool, summary: bool
) -> None:
    """An edit's refreshes: the chunk's graph facts (`graph`: its text changed) and the document's summary
    (made from the enabled chunks' text), when it has one. Each is tried briefly; one the enrichment queue
    does not take answers 503 `queue_unavailable` with the edit saved, and the same request sent again
    queues it again (the graph's is keyed by the text's hash, so a second one is harmless). The summary
    first: one the queue does not take stays pending, and a retry knows to ask."""
    with refresh_refusal_answered("the edit is saved"):
        if summary and knowledge.summary_status != SummaryStatus.NONE:
            request_summary_refresh(deps, knowledge)
        if graph:
            request_graph_refresh(deps, knowledge, chunk.id, chunk.content_hash)


@dataclass(frozen=True)
class _Embedded:
    """What an edit writes to one knowledge base's index: its space, the new text's index text and vectors
    (None: the text did not change, or the knowledge base keeps no index / no vectors)."""

    space: IndexSpace | None
    texts: list[str] | None
    vectors: Vectors | None


def _embedded(
    deps: Dependencies, kb: KnowledgeBase, texts: list[str] | None, had: _Embedded | None
) -> _Embedded:
    """The edit's index write for `kb`: vectors made by `kb`'s model, reused from `had` when they are in
    the same space (a move's knowledge bases share their model)."""
    if not kb.indexing_strategy.needs_embedding:
        return _Embedded(None, texts, None)
    model = require_usable_for_api(deps, kb)
    space = IndexSpace.of(model)
    if texts is None or not kb.indexing_strategy.vector_enabled:
        return _Embedded(space, texts, None)
    if had is not None and had.space == space and had.texts == texts and had.vectors is not None:
        return _Embedded(space, texts, had.vectors)
    return _Embedded(space, texts, embed_for_api(deps, kb.tenant_id, model, texts))


def _write(
    deps: Dependencies,
    knowledge: Knowledge,
    kb: KnowledgeBase,
    before: Chunk,
    changed: Chunk,
    embedded: _Embedded,
    *,
    asked: list[str],
) -> Chunk | None:
    """The edit written into `kb` (the document's, as last read): the index first, the row last, only
    while it is still `before` (None: another write came first; the row is left as that write made it).
    A write that fails on the way leaves the row as it was, so the same request sent again finds a change
    and makes it (the row written first would answer "no change"). `asked`: the index entries of the
    questions generated from the text the edit replaces. The row written, carrying `kb`'s id."""
    changed = replace(changed, kb_id=kb.id)
    if embedded.space is None:
        return changed if deps.chunks.put_unchanged(before, changed) else None
    space, engine = embedded.space, deps.engine(kb.retrieval_engine)
    # the row as this request read it: a switch of the document since is caught by the read after the put
    searchable = _searchable(changed, knowledge)
    try:
        if embedded.texts is not None:
            entries = chunk_entries(
                kb.id,
                knowledge.id,
                [replace(changed, is_enabled=searchable)],
                embedded.texts,
                embedded.vectors,
            )
            write_entries(deps, engine, space, entries)
            if asked := list(dict.fromkeys(asked + _question_ids(before))):
                engine.delete_by_ids(space, kb.id, asked)
        # the chunk's entries (its generated questions too) follow its switch, within the document's
        engine.set_enabled(space, kb.id, [changed.id], searchable)
    except (StageError, IndexWriteError) as error:  # answered without the engine's reply, nor logged
        raise _index_error(error) from error
    if not deps.chunks.put_unchanged(before, changed):
        return None
    # read again after the put: a switch of the document meanwhile; a chunk off is put off again, as a
    # document's switch on that listed it before this put may have turned it on since
    now = changed.is_enabled and document_searchable(deps, knowledge)
    if now != searchable or not now:
        engine.set_enabled(space, kb.id, [changed.id], now)
    return changed


#: on a parent chunk, that one of its children's text was edited or a child switched off: its text no
#: longer stands for them, and a child's hit shows the child's own text (operations/search.py)
CHILDREN_CHANGED = "_children_changed"


def _mark_parent(
    deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, before: Chunk, changed: Chunk
) -> None:
    """Marks the child's parent before the child changes (so no search shows a parent text the child no
    longer has). Once for good: a child switched on again leaves it marked (its hits show their own text).
    A parent gone or moved meanwhile is not marked (the read after the edit's write takes care of it)."""
    parent_id = before.parent_chunk_id
    if not parent_id or before.chunk_type != ChunkType.TEXT:
        return
    if changed.content == before.content and (changed.is_enabled or not before.is_enabled):
        return  # neither text nor switch-off: the parent's text still stands for the child
    try:
        deps.chunks.set_metadata(
            knowledge.id, parent_id, CHILDREN_CHANGED, True, kb_id=kb.id, attempt=knowledge.attempt
        )
    except TransientStageError as error:  # other writes kept changing the parent row
        raise Conflict("the chunk's parent kept changing; try again", code="chunk_changed") from error


def _switch_as_stored(deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, chunk: Chunk) -> None:
    """The chunk's entries switched as its row and its document say now: a switch sent again repairs
    entries a racing write left otherwise (a document's switch on that listed the chunk before its
    switch-off). A parent to mark is marked too (an edit the race interrupted)."""
    if chunk.parent_chunk_id and not chunk.is_enabled:
        _mark_parent(deps, knowledge, kb, replace(chunk, is_enabled=True), chunk)
    if not kb.indexing_strategy.needs_embedding:
        return
    space = IndexSpace.of(require_usable_for_api(deps, kb))
    try:
        deps.engine(kb.retrieval_engine).set_enabled(
            space, kb.id, [chunk.id], chunk.is_enabled and document_searchable(deps, knowledge)
        )
    except (StageError, IndexWriteError) as error:
        raise _index_error(error) from error


def _index_as_stored(deps: Dependencies, knowledge: Knowledge, kb: KnowledgeBase, chunk_id: str) -> None:
    """The chunk's entries in `kb` as its row says now (its text and generated questions embedded again, its
    switch within its document's), for an edit that fails after a try of it wrote the index and lost the
    row's put: the row that won is found by its own words again. Nothing for a document gone, reparsed or
    moved (the edit's entries went with it). A failure here is logged: the edit answers its own error."""
    row = deps.knowledge.get(knowledge.id)
    if row is None or row.parse_status != ParseStatus.COMPLETED or row.attempt != knowledge.attempt:
        return
    chunk = deps.chunks.get_many([(row.id, chunk_id)]).get((row.id, chunk_id))
    if chunk is None or row.kb_id != kb.id or chunk.kb_id != kb.id:
        return
    from chalicelib.chunker import index_text

    title = "" if chunk.chunk_type != ChunkType.TEXT else row.title
    asked = chunk.metadata.get("questions")
    questions = [str(q) for q in asked] if isinstance(asked, list) else []
    texts = [index_text(title, chunk.context_header, chunk.content)]
    texts += [index_text(row.title, "", q) for q in questions]  # as enrichment indexes them
    try:
        embedded = _embedded(deps, kb, texts, None)
        if embedded.space is None:
            return
        on = chunk.is_enabled and document_searchable(deps, row)
        vectors = embedded.vectors
        entries = chunk_entries(
            kb.id,
            row.id,
            [replace(chunk, is_enabled=on)],
            texts[:1],
            None if vectors is None else vectors[:1],
        )
        entries += [
            question_entry(
                kb.id, row.id, chunk.id, n, texts[n + 1], None if vectors is None else vectors[n + 1], on
            )
            for n in range(len(questions))
        ]
        engine = deps.engine(kb.retrieval_engine)
        write_entries(deps, engine, embedded.space, entries)
        engine.set_enabled(embedded.space, kb.id, [chunk.id], on)
    except (AppError, StageError, IndexWriteError) as error:
        logger.warning(
            "chunk entries not put back after a failed edit",
            extra={"knowledge_id": row.id, "chunk_id": chunk_id, "error": type(error).__name__},
        )


def _question_ids(chunk: Chunk) -> list[str]:
    """The index entries of the questions generated from the chunk's text (its metadata lists them)."""
    asked = chunk.metadata.get("questions")
    return [question_entry_id(chunk.id, n) for n in range(len(asked))] if isinstance(asked, list) else []


def _still_shown(image_info: list[dict[str, Any]], text: str) -> list[dict[str, Any]]:
    """The entries of the images `text` still shows (by chunking's rule), with what their tasks wrote."""
    shown = set(ShownImages(image_info).urls(text))
    return [info for info in image_info if info.get("url") in shown]


def _searchable(chunk: Chunk, document: Knowledge) -> bool:
    """Whether the chunk's entries are on: its own switch, within its document's (as `document` has it)."""
    return chunk.is_enabled and document.enable_status == EnableStatus.ENABLED


def _index_error(error: StageError | IndexWriteError) -> ServiceUnavailable:
    """An index write the edit could not make, answered with a fixed text (the row was not written)."""
    if isinstance(error, StageError) and not error.permanent:  # not answering, after a few quick tries
        return ServiceUnavailable("the search index is not answering; try again", code="index_unavailable")
    return ServiceUnavailable(
        "the search index refused the change; the chunk was not changed", code="index_refused"
    )


def _changed(knowledge_id: str) -> Conflict:
    return Conflict(
        f"knowledge {knowledge_id} was reparsed or moved while the chunk was edited; read it and try again",
        code="knowledge_changed",
    )


def _kept_or_moved(
    deps: Dependencies,
    knowledge: Knowledge,
    kb: KnowledgeBase,
    before: Chunk,
    changed: Chunk,
    embedded: _Embedded,
) -> tuple[Knowledge, KnowledgeBase] | None:
    """Re-reads the row after the edit wrote into `kb`, as the stages do. None: the edit stands. Deleted
    (or being deleted): the chunk's entry and its row go, so nothing of the document stays; 404. Reparsed:
    the edit's attempt is gone (the chunk as it was went with it), so its entry and row go too; 409. Moved
    to another knowledge base (at the same attempt): what the edit wrote in `kb` is orphaned there and
    goes, and the document as it is now and its knowledge base are returned for the edit to follow; one
    moved into a knowledge base being deleted goes with it (404)."""
    index = None if embedded.space is None else (deps.engine(kb.retrieval_engine), embedded.space)
    deleted = False
    moved: list[Knowledge] = []

    def take_back() -> None:
        take_back_chunks(deps, knowledge, [changed.id], index)

    def undo() -> None:
        nonlocal deleted
        take_back()
        deleted = True

    def undo_moved(row: Knowledge) -> None:
        if index is not None:  # a move carries what it finds; what the edit wrote after that stays here
            engine, space = index
            engine.delete_by_ids(space, knowledge.kb_id, [changed.id, *_question_ids(before)])
        moved.append(row)

    if kept_after_write(deps, knowledge, undo, undo_moved=undo_moved, undo_superseded=take_back):
        return None
    if deleted:
        raise _deleted(knowledge.id)
    if not moved or moved[0].attempt != knowledge.attempt:  # reparsed (by a move too): the attempt is gone
        if moved:
            take_back()
        raise _changed(knowledge.id)
    row = moved[0]
    target = deps.kbs.get(row.kb_id)
    if target is None or target.status == "deleting":  # the document goes with it
        take_back_chunks(deps, row, [changed.id], None)
        raise _deleted(knowledge.id)
    return row, target
