"""Clone on the lifecycle queue (spec §1.25): the work behind POST /knowledge-bases/{id}/clone, driven by
the lifecycle worker's slices (`stages/lifecycle.py`); it shares the move's helpers (`tasks/move_clone.py`).

Clone: a two-way diff by file hash between the completed knowledge of the source and the target; extras in
the target are deleted, missing ones copied 10 at a time. A copy has a deterministic id (task, source), so a
redelivered message redoes (or only counts) the same copy: its source file and images are deep-copied to
keys under the copy's own prefix, chunk ids are remapped and image links rewritten, and the index entries
are copied with their vectors (nothing re-embedded), renamed as the copy's own first attempt. Each pass and
each copy read both knowledge bases again and check them as the request was (`check_compatible`: a re-embed
or its switch since then fails the pass, or the copy). Before the copy is marked completed the source and its
chunks are read again (a reparse, a chunk edited or switched, or the document switched meanwhile: the copy
goes and the source is planned again, at most MAX_SOURCE_CHANGES times a delivery), and after, the knowledge
bases and the copy (a delete of the target or the copy, or another model meanwhile: the copy goes). The copy's
bytes count on the tenant's storage quota (over it, the copy fails). A copy that fails removes everything it
wrote.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextvars import copy_context
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from chalicelib.domain.clock import to_iso
from chalicelib.domain.errors import Forbidden, SpanErrorCode
from chalicelib.domain.events import EventType
from chalicelib.domain.ids import attempt_chunk_prefix
from chalicelib.domain.status import is_in_flight
from chalicelib.domain.storage_backends import backend_of
from chalicelib.domain.storage_keys import images_manifest_key, parsed_markdown_key
from chalicelib.domain.types import (
    Chunk,
    ChunkType,
    EnableStatus,
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    SpanStatus,
    Stage,
    SummaryStatus,
    Task,
)
from chalicelib.faq.clone import faq_clone_work
from chalicelib.faq.entries import FAQ_KB_TYPE
from chalicelib.observability import logger
from chalicelib.ports import Dependencies, DuplicateKnowledge, FileStore, StorageQuotaExceeded
from chalicelib.services import resources
from chalicelib.services.chunk_pages import PAGE, attempt_chunk_pages
from chalicelib.services.document_switch import EntrySwitch
from chalicelib.services.events import knowledge_changed
from chalicelib.services.kb_rows import kb_rows
from chalicelib.services.quotas import check_storage_for_upload, reserve_document
from chalicelib.services.storage import files_of
from chalicelib.services.tag_names import tag_by_names, tag_names
from chalicelib.tasks.delete import delete_one
from chalicelib.tasks.move_across import relinker
from chalicelib.tasks.move_clone import (
    ItemFailed,
    Work,
    carry_wiki_pages,
    index_space,
    is_open,
    rekey,
    require_compatible,
)

#: copies made concurrently (WeKnora clones 10 at a time)
CLONE_BATCH = 10
#: times one source may change under its copy in one delivery before its item fails (an edit does not take
#: the source out of the plan as a reparse does, so a source edited without pause would be copied forever)
MAX_SOURCE_CHANGES = 3
_COPY_NAMESPACE = uuid.UUID("8a0f3d5e-6c1b-4f7e-9d2a-5b4c3e2f1a00")
#: a copy is a new document: its first attempt, whichever attempt of the source it copies
COPY_ATTEMPT = 1


class SourceChanged(Exception):
    """The source changed while it was copied (a chunk edited or switched, the document switched): the copy
    is removed and the source planned again (not recorded as the item's outcome, up to MAX_SOURCE_CHANGES)."""


class SourceReparsed(SourceChanged):
    """The source began another attempt while it was copied."""


def copy_tags(deps: Dependencies, source: Knowledge, copy: Knowledge) -> None:
    """The copy's tags, matched by name in the target knowledge base (created there when missing)."""
    tag_by_names(deps, copy, tag_names(deps, source))


def copy_id(task_id: str, source_id: str) -> str:
    """The copy's id: the same for every delivery of the task, so a redelivery finds its own copy."""
    return str(uuid.uuid5(_COPY_NAMESPACE, f"{task_id}/{source_id}"))


def _content_key(row: Knowledge) -> str:
    return row.file_hash or f"{row.type.value}:{row.source or row.id}"


@dataclass
class ClonePlan:
    deletes: list[Knowledge]
    copies: list[Knowledge]


def plan_clone(deps: Dependencies, task: Task, source: KnowledgeBase, target: KnowledgeBase) -> ClonePlan:
    """The two-way multiset diff by file hash, minus what this task already attempted. A copy this task made
    whose item is not recorded yet (a slice ended, or a delivery crashed) is planned again: its work then
    only finishes or counts it."""
    attempted = set(task.items)
    sources = [row for row in kb_rows(deps, source.id) if row.parse_status == ParseStatus.COMPLETED]
    unrecorded = {copy_id(task.id, s.id) for s in sources if f"copy:{s.id}" not in attempted}
    present, made = [], set()
    for row in kb_rows(deps, target.id):
        if row.id in unrecorded:
            made.add(row.id)
        elif row.parse_status != ParseStatus.DELETING:
            present.append(row)
    wanted: dict[str, list[Knowledge]] = {}
    for row in sorted(sources, key=lambda r: r.created_at):
        wanted.setdefault(_content_key(row), []).append(row)
    # Completed and in-flight rows of the target can match a source; failed, cancelled and draft rows are
    # not the source's content and go. Among matches, the unfinished and the older go first.
    have: dict[str, list[Knowledge]] = {}
    deletes: list[Knowledge] = []
    for row in sorted(present, key=lambda r: (r.parse_status == ParseStatus.COMPLETED, r.created_at)):
        if row.parse_status == ParseStatus.COMPLETED or is_in_flight(row.parse_status):
            have.setdefault(_content_key(row), []).append(row)
        elif f"delete:{row.id}" not in attempted:
            deletes.append(row)
    counts = Counter({key: len(rows) for key, rows in wanted.items()})
    for key, rows in have.items():
        extra = len(rows) - counts.get(key, 0)
        deletes += [row for row in rows[: max(extra, 0)] if f"delete:{row.id}" not in attempted]
    copies: list[Knowledge] = []
    for key, rows in wanted.items():
        missing = len(rows) - len(have.get(key, []))
        if missing <= 0:
            continue
        # copies this task already made come first (only counted again), then the rest in order
        ordered = sorted(rows, key=lambda r: copy_id(task.id, r.id) not in made)
        copies += [row for row in ordered if f"copy:{row.id}" not in attempted][:missing]
    return ClonePlan(deletes, copies)


def clone_work(deps: Dependencies, task: Task) -> Iterator[Work]:
    changed: Counter[str] = Counter()  # sources changed under their copy in this delivery
    while True:
        try:  # every pass: a re-embed, its switch or a delete may have landed during the one before
            source, target = require_clonable(deps, str(task.params["source_kb_id"]), task.kb_id)
        except ItemFailed as refusal:
            yield from _refused(task, f"kb:{task.kb_id}", refusal)
            return
        if source.type == FAQ_KB_TYPE:  # an FAQ knowledge base holds entries, not documents
            yield from faq_clone_work(deps, task, source, target)
            return
        plan = plan_clone(deps, task, source, target)
        if not plan.deletes and not plan.copies:
            return
        for row in plan.deletes:  # one at a time: each delete is already parallel inside
            task.items.append(f"delete:{row.id}")
            # only while it is still the target's: one the user moved out meanwhile stays where it went
            yield f"delete:{row.id}", partial(delete_one, deps, row.id, in_kb=target.id)
        for start in range(0, len(plan.copies), CLONE_BATCH):
            batch = plan.copies[start : start + CLONE_BATCH]
            with ThreadPoolExecutor(max_workers=len(batch), thread_name_prefix="clone") as pool:
                # a pool thread starts with an empty context: the meter (and the local function name) go along
                futures = [
                    pool.submit(copy_context().run, clone_one, deps, task, source, target, row)
                    for row in batch
                ]
            for row, future in zip(batch, futures, strict=True):
                outcome = partial(_outcome, future)
                if isinstance(future.exception(), SourceChanged):
                    changed[row.id] += 1
                    if changed[row.id] < MAX_SOURCE_CHANGES:
                        # its copy was removed; not recorded, so the next pass plans the source again as it
                        # stands (a new attempt: copied once completed, left out while on its way)
                        logger.info("a source changed while it was copied", extra={"knowledge_id": row.id})
                        continue
                    outcome = partial(_refuse, ItemFailed(SOURCE_KEPT_CHANGING))
                task.items.append(f"copy:{row.id}")  # recorded as it is counted: see plan_clone
                yield f"copy:{row.id}", outcome


def _outcome(future: Future[None]) -> None:
    future.result()  # re-raises the copy's error, which the worker records (or retries)


def _refuse(refusal: ItemFailed) -> None:
    raise refusal


def require_clonable(
    deps: Dependencies, source_kb_id: str, target_kb_id: str
) -> tuple[KnowledgeBase, KnowledgeBase]:
    """Both knowledge bases as they are now (strongly consistent: a delete, a re-embed or its switch written
    just now counts): present, the target open, and still compatible as the request was checked; else
    ItemFailed."""
    source = deps.kbs.get(source_kb_id, consistent=True)
    target = deps.kbs.get(target_kb_id, consistent=True)
    if source is None or target is None or not is_open(target):
        raise ItemFailed("the source or the target knowledge base is gone or being deleted")
    require_compatible(deps, source, target, same_engine=True)
    return source, target


def _refused(task: Task, item: str, refusal: ItemFailed) -> Iterator[Work]:
    """The task's one item for a clone that cannot go on (recorded once, whichever delivery finds it)."""
    if item in task.items:
        return
    task.items.append(item)
    yield item, partial(_refuse, refusal)


# ---------------------------------------------------------------- clone: one copy


def clone_one(
    deps: Dependencies, task: Task, source_kb: KnowledgeBase, target: KnowledgeBase, planned: Knowledge
) -> None:
    src = deps.knowledge.get(planned.id)
    if src is None or src.kb_id != source_kb.id or src.parse_status != ParseStatus.COMPLETED:
        raise ItemFailed(SOURCE_GONE)
    require_clonable(deps, source_kb.id, target.id)
    new_id = copy_id(task.id, src.id)
    existing = deps.knowledge.get(new_id)
    if existing is not None:
        # made by an earlier delivery, which may have died before it announced: again, under the same ids
        _copy_changed(deps, existing, EventType.KNOWLEDGE_CREATED, ParseStatus.PROCESSING.value)
        if existing.parse_status == ParseStatus.COMPLETED:
            _copy_changed(deps, existing, EventType.KNOWLEDGE_COMPLETED, ParseStatus.COMPLETED.value)
            return
    keys = _CopyKeys(deps, src, new_id)
    row = _copy_row(deps, src, new_id, target, keys)
    if existing is not None:  # its events name the row as it was made
        row = replace(row, created_at=existing.created_at)
    else:
        try:
            # nothing copied when the bytes cannot fit now; marking it indexed checks again (in its write)
            check_storage_for_upload(deps, row.tenant_id, src.file_size)
            reserved = reserve_document(deps, row.tenant_id)
        except Forbidden as quota:
            raise ItemFailed(quota.message) from quota
        try:
            deps.knowledge.insert(row)
        except DuplicateKnowledge as duplicate:
            if reserved:  # either another row holds the content, or an earlier delivery counted this copy
                deps.tenants.release_document(row.tenant_id)
            if duplicate.existing.id != new_id:
                raise ItemFailed(
                    f"the target knowledge base already holds this content as knowledge {duplicate.existing.id}"
                ) from duplicate
        except BaseException:  # no row was written (a throttle, a lost claim race): the place goes back
            if reserved:
                deps.tenants.release_document(row.tenant_id)
            raise
        else:
            _copy_changed(deps, row, EventType.KNOWLEDGE_CREATED, ParseStatus.PROCESSING.value)
    try:
        _copy_content(deps, src, row, source_kb, target, keys)
        # Read after the copy's last write: a delete of the target (or of the copy) that listed its rows
        # before the copy was there, or deleted it mid-way, left what was written after it; a switch of
        # either knowledge base's model left the copied entries in a space nobody searches.
        require_clonable(deps, source_kb.id, target.id)
        current = deps.knowledge.get(row.id)
        if current is None or current.parse_status == ParseStatus.DELETING:
            raise ItemFailed("the copy was deleted while it was made")
    except BaseException:
        _remove_copy(deps, src, row, target, keys)
        raise


SOURCE_GONE = "the source is no longer a completed knowledge of the source knowledge base"
SOURCE_KEPT_CHANGING = "the source kept changing while it was copied; clone again once it is left alone"


def _require_unchanged_source(
    deps: Dependencies, src: Knowledge, chunks: list[Chunk], copies: list[Chunk]
) -> None:
    """Read after the chunks and the index entries were copied, before the copy is marked completed: a
    reparse (or a delete) that landed while they were read left them empty or half of another attempt; a
    chunk edited or switched, or the document switched, between the chunks' read and the entries' copy left
    the copy's chunks saying one thing and its entries another. After this read, what was copied is the
    attempt as it was."""
    current = deps.knowledge.get(src.id)
    if current is None or current.kb_id != src.kb_id:
        raise ItemFailed(SOURCE_GONE)
    if current.attempt != src.attempt:
        raise SourceReparsed(src.id)
    if current.parse_status != ParseStatus.COMPLETED:
        raise ItemFailed(SOURCE_GONE)
    if current.enable_status != src.enable_status:  # the entries were copied switched as it is now
        raise SourceChanged(src.id)
    if _chunk_states(deps, src) != {chunk.id: _chunk_state(chunk) for chunk in chunks}:
        raise SourceChanged(src.id)
    # chunk_count counts what chunking wrote (text and parent chunks); later stages only add other kinds
    body = sum(1 for chunk in copies if chunk.chunk_type in (ChunkType.TEXT, ChunkType.PARENT_TEXT))
    if body != src.chunk_count:
        raise ItemFailed(
            f"the source has {body} of its {src.chunk_count} chunks stored: a copy would be incomplete"
        )


def _chunk_state(chunk: Chunk) -> tuple[str, bool]:
    """What a chunk's index entries are made from: its text and its switch."""
    return chunk.content, chunk.is_enabled


def _chunk_states(deps: Dependencies, src: Knowledge) -> dict[str, tuple[str, bool]]:
    """The source attempt's chunks as stored now, a page at a time (each read once, as in the first read)."""
    states: dict[str, tuple[str, bool]] = {}
    for page in attempt_chunk_pages(deps, src):
        states.update((chunk.id, _chunk_state(chunk)) for chunk in page)
    return states


class _CopyKeys:
    """Where the copy's objects go: deterministic keys under the copy's own prefix."""

    def __init__(self, deps: Dependencies, src: Knowledge, new_id: str) -> None:
        self.deps, self.src, self.new_id = deps, src, new_id
        prefix = f"{src.tenant_id}/{new_id}"
        ext = f".{src.file_type}" if src.file_type else ""
        self.file = f"{prefix}/source{ext}" if src.file_path else ""
        self.markdown = parsed_markdown_key(src.tenant_id, new_id, COPY_ATTEMPT)
        self.manifest = images_manifest_key(src.tenant_id, new_id, COPY_ATTEMPT)
        self.prefix = prefix

    def image(self, url: str) -> str:
        ext = posixpath.splitext(self.deps.files.key_of(url))[1]
        return f"{self.prefix}/images/{hashlib.sha256(url.encode()).hexdigest()[:24]}{ext}"


def _copy_row(
    deps: Dependencies, src: Knowledge, new_id: str, target: KnowledgeBase, keys: _CopyKeys
) -> Knowledge:
    return Knowledge(
        id=new_id,
        tenant_id=src.tenant_id,
        kb_id=target.id,
        type=src.type,
        title=src.title,
        description=src.description,
        description_by_user=src.description_by_user,
        source=src.source,
        file_name=src.file_name,
        file_type=src.file_type,
        file_size=src.file_size,
        file_hash=src.file_hash,
        file_path=deps.files.backend(target.storage_backend).url_for(keys.file) if keys.file else "",
        # the copy's objects are written to the target's backend (copied across when it is another one)
        storage_backend=target.storage_backend,
        parse_status=ParseStatus.PROCESSING,
        enable_status=EnableStatus.DISABLED,
        # a summary still on its way in the source is not on its way for the copy
        summary_status=src.summary_status
        if src.summary_status in (SummaryStatus.NONE, SummaryStatus.COMPLETED, SummaryStatus.FAILED)
        else SummaryStatus.NONE,
        enrichment=dict(src.enrichment),
        enable_multimodel=src.enable_multimodel,
        metadata=dict(src.metadata),
        process_overrides=dict(src.process_overrides),
        channel=src.channel,
        folder_path=src.folder_path,
        dedupe_key=rekey(src.dedupe_key, target.id),
        attempt=COPY_ATTEMPT,
    )


def _source_images(deps: Dependencies, src: Knowledge) -> tuple[list[dict[str, Any]], list[Chunk], list[str]]:
    """The source's image manifest (of its latest attempt), its chunks, and every stored image they name."""
    manifest_url = files_of(deps, src).url_for(images_manifest_key(src.tenant_id, src.id, src.attempt))
    images: list[dict[str, Any]] = (
        json.loads(deps.files.read(manifest_url)) if deps.files.exists(manifest_url) else []
    )
    chunks = deps.chunks.list(src.id)
    urls = [str(image["url"]) for image in images if image.get("url")]
    urls += [str(info["url"]) for chunk in chunks for info in chunk.image_info if info.get("url")]
    return images, chunks, [url for url in dict.fromkeys(urls) if _stored_here(deps, url)]


def _stored_here(deps: Dependencies, url: str) -> bool:
    """Only objects of this store are copied; any other link (none is expected) stays as it is."""
    try:
        deps.files.key_of(url)
    except ValueError:
        return False
    return True


def _copy_object(deps: Dependencies, files: FileStore, row: Knowledge, url: str, key: str) -> str:
    """A source object copied to the copy's `key`: server side within one backend; through the function
    (read, then write) from another backend, which no store does on its own (they refuse it)."""
    if backend_of(url) == row.storage_backend:
        return files.copy(url, key)
    return files.save(key, deps.files.read(url))


def _copy_content(
    deps: Dependencies,
    src: Knowledge,
    row: Knowledge,
    source_kb: KnowledgeBase,
    target: KnowledgeBase,
    keys: _CopyKeys,
) -> None:
    files = files_of(deps, row)  # the copy's backend: the target knowledge base's
    if keys.file:
        try:
            _copy_object(deps, files, row, src.file_path, keys.file)
        except FileNotFoundError as error:
            raise ItemFailed("the source's stored file is missing") from error
    images, chunks, urls = _source_images(deps, src)
    links: dict[str, str] = {}
    for url in urls:
        try:
            links[url] = _copy_object(deps, files, row, url, keys.image(url))
        except FileNotFoundError:
            logger.warning("a source image is missing; its link stays", extra={"knowledge_id": src.id})
    relink = relinker(links)
    markdown_url = files_of(deps, src).url_for(parsed_markdown_key(src.tenant_id, src.id, src.attempt))
    if deps.files.exists(markdown_url):
        files.save(
            keys.markdown,
            relink(deps.files.read(markdown_url).decode()).encode(),
            "text/markdown",
        )
    files.save(keys.manifest, json.dumps(relink(images)).encode(), "application/json")
    # the row's own text (a summary names the images too) points at the copy's images, as its chunks do
    relinked = {
        "description": relink(src.description),
        "metadata": relink(src.metadata),
    }
    if relinked != {"description": row.description, "metadata": row.metadata}:
        deps.knowledge.update_fields(row.id, relinked)
    resources.register_stored(deps, row)  # the copy's files, as the pipeline registers what it writes

    # The source's latest attempt, renamed as the copy's own attempt: its chunk ids (`<id>-a<attempt>-...`)
    # and each chunk's metadata attempt, which every reader of "this attempt's chunks" filters by.
    source_prefix = attempt_chunk_prefix(src.id, src.attempt)
    copy_prefix = attempt_chunk_prefix(row.id, row.attempt)
    chunks = [chunk for chunk in chunks if chunk.id.startswith(source_prefix)]
    id_map = {chunk.id: copy_prefix + chunk.id[len(source_prefix) :] for chunk in chunks}
    copies = [
        replace(
            chunk,
            id=id_map[chunk.id],
            tenant_id=row.tenant_id,
            kb_id=target.id,
            knowledge_id=row.id,
            content=relink(chunk.content),
            pre_chunk_id=id_map.get(chunk.pre_chunk_id, chunk.pre_chunk_id),
            next_chunk_id=id_map.get(chunk.next_chunk_id, chunk.next_chunk_id),
            parent_chunk_id=id_map.get(chunk.parent_chunk_id, chunk.parent_chunk_id),
            metadata={**relink(chunk.metadata), "attempt": row.attempt},
            image_info=relink(chunk.image_info),
        )
        for chunk in chunks
    ]
    deps.chunks.replace_all(row.id, copies)
    entries = 0
    if target.indexing_strategy.needs_embedding and chunks:
        engine, space = deps.engine(target.retrieval_engine), index_space(deps, target)
        entries = engine.copy(space, source_kb.id, src.id, target.id, row.id, id_map)
        # copied with the source's flags, which lag its row while its switch's task walks: set as the
        # copy's row (the source's switch, below) and its chunk rows say
        switch = EntrySwitch(engine, space, target.id)
        for start in range(0, len(copies), PAGE):
            switch.write(
                deps, row.id, copies[start : start + PAGE], src.enable_status == EnableStatus.ENABLED
            )
    carry_wiki_pages(deps, source_kb.id, src.id, target, id_map, row.id)
    copy_tags(deps, src, row)
    tracker = deps.tracker
    # the spans are the copy's, read by keys of the target knowledge base: they do not name the source's
    # document (the clone's task does, to a key that may read both knowledge bases)
    tracker.begin_stage(
        row, Stage.EMBEDDING, {"cloned": True, "model": target.embedding_model_id or "default"}
    )
    for stage in (Stage.DOCREADER, Stage.CHUNKING, Stage.MULTIMODAL, Stage.POSTPROCESS):
        tracker.skip_stage(row, stage, "cloned from a document of another knowledge base")
    tracker.end_stage(
        row,
        Stage.EMBEDDING,
        {"texts_embedded": 0, "cache_hits": 0, "entries_copied": entries, "chunks": len(copies)},
    )
    _require_unchanged_source(deps, src, chunks, copies)
    try:
        # the copy's bytes counted on the tenant with the row, within its quota (one transaction): the
        # source's counted size (its file and `derived_size`), since the copy holds its original, Markdown and images
        indexed = deps.knowledge.mark_indexed(
            row.id,
            row.attempt,
            chunk_count=src.chunk_count,
            storage_size=src.storage_size,
            completed=True,
            within_quota=True,
        )
    except StorageQuotaExceeded as error:  # the copy fails, and clone_one removes it
        raise ItemFailed(str(error), code=SpanErrorCode.QUOTA_EXCEEDED) from error
    if indexed:
        _copy_changed(deps, row, EventType.KNOWLEDGE_COMPLETED, ParseStatus.COMPLETED.value)
    if src.enable_status == EnableStatus.DISABLED:  # its entries were copied disabled too
        deps.knowledge.update_fields(row.id, {"enable_status": EnableStatus.DISABLED.value})
    tracker.close_root(row.id, row.attempt, SpanStatus.DONE)
    logger.info("cloned knowledge", extra={"knowledge_id": row.id, "source": src.id, "entries": entries})


def _remove_copy(
    deps: Dependencies, src: Knowledge, row: Knowledge, target: KnowledgeBase, keys: _CopyKeys
) -> None:
    """A failed copy leaves nothing: its index entries, chunks, spans, objects and row (with its claim)."""
    logger.warning("removing a failed copy", extra={"knowledge_id": row.id, "source": src.id})
    if target.indexing_strategy.needs_embedding:
        deps.engine(target.retrieval_engine).delete_by_knowledge(
            index_space(deps, target), target.id, [row.id]
        )
    deps.chunks.delete_all(row.id)
    deps.spans.delete_all(row.id)
    deps.wiki.delete_pages(target.id, row.id)
    deps.tags.remove_knowledge(row.id)
    resources.release_owner(deps, row.id)
    owned = [
        keys.file,
        keys.markdown,
        keys.manifest,
        *(keys.image(url) for url in _source_images(deps, src)[2]),
    ]
    for key in owned:
        if key:
            deps.files.delete(files_of(deps, row).url_for(key))
    if deps.knowledge.delete(row.id):  # its place in the tenant's count goes with it
        _copy_changed(deps, row, EventType.KNOWLEDGE_DELETED, "deleted")


def _copy_changed(deps: Dependencies, row: Knowledge, event_type: EventType, status: str) -> None:
    """A copy's event, at the copy's attempt. A copy removed and made again (its source changed mid-copy)
    has the same id: when its row was made tells the two apart, so the second is not dropped as a repeat."""
    knowledge_changed(
        deps, row, event_type, status=status, attempt=COPY_ATTEMPT, occurrence=to_iso(row.created_at)
    )
