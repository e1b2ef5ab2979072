"""What a document counts on its tenant's storage quota (`Knowledge.storage_size`): the one rule, what
becomes of an attempt's parse outputs that nothing counts, and the recount that sets the count to what the
document stores (`recount_document`; services/storage_recount walks a tenant's documents with it). The
recount lives here, not in storage_recount, because `kept_parse_write` uses it and that module uses this
one's rules (no import loop)."""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from chalicelib.domain.resources import Resource
from chalicelib.domain.status import is_in_flight
from chalicelib.domain.storage_backends import backend_of
from chalicelib.domain.storage_keys import images_manifest_key, parsed_markdown_key
from chalicelib.domain.types import Knowledge, ParseStatus
from chalicelib.observability import logger
from chalicelib.ports import Dependencies
from chalicelib.ports.storage import (
    MAX_LISTED_KEYS,
    FileStore,
    StorageRefused,
    StorageUnavailable,
    UnknownStorageBackend,
)
from chalicelib.services import page_range_store, resources
from chalicelib.services.liveness import kept_after_write
from chalicelib.services.storage import files_of

#: what a store may answer a removal of outputs with: the outputs then stay for a later removal or the delete
REMOVAL_REFUSED = (StorageRefused, StorageUnavailable, UnknownStorageBackend)


def derived_size(deps: Dependencies, knowledge: Knowledge, images: Iterable[Mapping[str, Any]]) -> int:
    """The bytes the document's attempt stored besides its original: the parsed Markdown and each image it
    extracted or fetched (`images`: the attempt's manifest, each entry with its stored `size`; a URL once,
    as page ranges list a shared image once each). Indexing counts the row's `file_size` (the upload, or the
    URL's fetched document) plus these, in the write that checks the quota (`mark_indexed(add_file_size=
    True)`: the file size as that write finds it, not as read before): a reparse counts its own parse in
    place of the earlier one's (which it removes), a redelivery the same size again (nothing more), and the
    row's delete gives all of it back. Raises FileNotFoundError when the attempt's Markdown is gone."""
    markdown = files_of(deps, knowledge).url_for(
        parsed_markdown_key(knowledge.tenant_id, knowledge.id, knowledge.attempt)
    )
    return _part_size(deps, markdown, images)


def _part_size(deps: Dependencies, markdown: str, images: Iterable[Mapping[str, Any]]) -> int:
    """A parse's Markdown (an attempt's, or one of its page ranges') and the images its manifest lists."""
    image_sizes = {str(image["url"]): int(image.get("size") or 0) for image in images}
    return deps.files.size(markdown) + sum(image_sizes.values())


def remove_attempt_outputs(
    deps: Dependencies,
    knowledge: Knowledge,
    attempt: int,
    keep: Collection[str] = (),
    *,
    keep_plan: bool = False,
    catalog: Sequence[Resource] | None = None,
) -> None:
    """Removes what `attempt`'s parse stored: its Markdown, image manifest, the images it lists or the
    resource catalog recorded for it (not those in `keep`, nor the document's original) and what a page-range
    parse of it left (plan, ranges, their images; with `keep_plan`, not the plan, by which a later removal
    finds what a range still running writes after this one). Idempotent: the manifest goes after its images,
    the plan last, a catalogued image is marked deleted once removed, and a missing object is no error.
    `catalog`: the document's resources, when the caller read them already (one read for many attempts)."""
    store = files_of(deps, knowledge)
    plan = store.url_for(
        page_range_store.range_key(replace(knowledge, attempt=attempt), page_range_store.PLAN)
    )
    parsed = store.url_for(parsed_markdown_key(knowledge.tenant_id, knowledge.id, attempt))
    manifest = store.url_for(images_manifest_key(knowledge.tenant_id, knowledge.id, attempt))
    removed: list[str] = []
    if deps.files.exists(manifest):
        for image in json.loads(deps.files.read(manifest)):
            url = str(image["url"])
            if url not in keep and url != knowledge.file_path and url not in removed:
                deps.files.delete(url)
                removed.append(url)
    deps.files.delete(manifest)
    deps.files.delete(parsed)
    # a retried parse's first try's images: named by their bytes, which a remote server may answer otherwise
    # the second time, so no manifest lists them; the resource catalog recorded each as it was stored
    read = deps.resources.owned_by(knowledge.id) if catalog is None else catalog
    for resource in catalogued_images(knowledge, read, attempt):
        url = resource.url
        if not resource.deleted and url not in removed and url not in keep and url != knowledge.file_path:
            deps.files.delete(url)
            removed.append(url)
    resources.release_urls(deps, removed)  # (not deleted again by the next attempt's removal)
    for url in page_range_store.range_objects(deps, knowledge, attempt):  # the plan comes last
        if url not in keep and url != knowledge.file_path and not (keep_plan and url == plan):
            deps.files.delete(url)
    if keep_plan and attempt > 1:
        # the plan an earlier removal kept: a range of that attempt, superseded since, undoes its own late
        # write; kept, plans would pile up one per reparse of a cancelled page-range parse (and fill the
        # recount's listing of the document's outputs)
        earlier = replace(knowledge, attempt=attempt - 1)
        deps.files.delete(store.url_for(page_range_store.range_key(earlier, page_range_store.PLAN)))


def catalogued_images(
    knowledge: Knowledge, catalog: Iterable[Resource], attempt: int | None = None
) -> list[Resource]:
    """The document's images as the resource catalog recorded each when it was stored (`catalog`: its
    resources), of one attempt when given: a retried parse's first try's too, which no manifest lists (an
    image is named by its bytes, and a remote server may answer other bytes the second time). Those of the
    document's current backend: another one's were left, and released, by a move."""
    return [
        resource
        for resource in catalog
        if resource.role == resources.ROLE_IMAGE
        and (attempt is None or resource.attempt == attempt)
        and backend_of(resource.url) == knowledge.storage_backend
    ]


def kept_parse_write(deps: Dependencies, knowledge: Knowledge, undo: Callable[[], Any]) -> bool:
    """A parse's write (a whole document's, or a page range's) kept for its attempt going on. Else what it
    wrote counts for no one: a superseded attempt's is undone (`undo`), a failed one's removed with the rest
    of its outputs; a cancelled one keeps what it wrote (spec §1.23) and is counted (the cancel's recount
    may have run before it landed; a redelivered write finds it counted), a deleted row's is undone."""
    if kept_after_write(deps, knowledge, undo, undo_superseded=undo):
        return True
    remove_uncounted_outputs(deps, knowledge.id, knowledge.attempt)
    recount_quietly(deps, knowledge.id, attempt=knowledge.attempt, status=ParseStatus.CANCELLED)
    return False


def remove_uncounted_outputs(deps: Dependencies, knowledge_id: str, attempt: int) -> None:
    """An attempt that failed (at a stage, refused by the quota, timed out) before it was indexed: nothing
    counts its parse outputs, so they go now rather than when a later attempt is indexed (each reparse stores a
    fresh set). Only while the row is still at `attempt`, failed, and never marked indexed at it
    (`processed_at`, which a reparse resets): an indexed attempt's outputs are what the row counts and stay. A
    cancelled attempt keeps what it wrote (spec §1.23: its chunks link to its images) until its reparse or
    delete. Called again (a redelivered failure, a late stage write) it removes nothing twice."""
    row = deps.knowledge.get(knowledge_id)
    if (
        row is None
        or row.attempt != attempt
        or row.parse_status != ParseStatus.FAILED
        or row.processed_at is not None
    ):
        return
    # the failure stands whatever the store answers (it may be this very store that failed the document)
    remove_ended_attempt(deps, row, attempt)


def remove_ended_attempt(deps: Dependencies, knowledge: Knowledge, attempt: int) -> None:
    """The outputs of an attempt that ended unindexed (failed, or ended by a reparse or a restart, which call
    this last, once the new attempt is queued) go. The plan stays (small): a range of a fanned-out parse
    still running finds the attempt ended and keeps or undoes what it writes, and a later removal finds it by
    the plan. A store that refuses the removal leaves the outputs for a later attempt's indexing or the
    delete; what ended the attempt stands."""
    try:
        remove_attempt_outputs(deps, knowledge, attempt, keep_plan=True)
    except REMOVAL_REFUSED as error:
        logger.warning(
            "the ended attempt's outputs stay until a later attempt is indexed or the delete",
            extra={"knowledge_id": knowledge.id, "attempt": attempt, "error": type(error).__name__},
        )


# ---------------------------------------------------------------- the recount


@dataclass(frozen=True)
class Recount:
    """A document's count (`storage_size`) before and after a recount: equal when nothing was corrected."""

    knowledge_id: str
    before: int
    after: int

    @property
    def corrected(self) -> bool:
        return self.before != self.after


class RecountUnsure(Exception):
    """Nothing written: the document's `parsed/` listing went past MAX_RECOUNTED_KEYS (an attempt past
    them could be missed, and a count below what is stored kept), its reads past RECOUNT_SECONDS, or the
    row kept moving through every try."""


#: a recount whose write lost a race (the row, or the tenant's usage, moved meanwhile) reads again
RECOUNT_TRIES = 4
#: the most keys a recount lists under a document's `parsed/` prefix, a page (MAX_LISTED_KEYS) at a time:
#: a 5,000-page PDF read in 1-page ranges (WEKNORA_PARSE_RANGE_PAGES=1) stores ~10,000 there, each range's
#: Markdown and manifest; past it, RecountUnsure
MAX_RECOUNTED_KEYS = 100_000
#: a recount's reads of one document stop after this long (RecountUnsure, nothing written): it runs in API
#: requests (a cancel, the operator's recount page) that API Gateway cuts at 28 s, and a many-range parse
#: costs a size and a manifest read per range (on S3 ~10-20 ms each: ~400-700 ranges fit)
RECOUNT_SECONDS = 15.0
#: a parse's Markdown among the keys of the document's `parsed/` listing: an attempt's, or one of its page
#: ranges' (`attempt-3.ranges/pages-000100.md`); its manifest is its name with `.images.json` for `.md`
_PARSED_MARKDOWN = re.compile(r"/parsed/attempt-(\d+)(?:\.ranges/pages-\d+)?\.md$")


def awaits_its_indexing(row: Knowledge) -> bool:
    """The document is on its way and was never indexed at its attempt: that attempt's outputs are counted
    by its indexing, within the quota, not by a recount."""
    return is_in_flight(row.parse_status) and row.processed_at is None


def stored_bytes(deps: Dependencies, row: Knowledge, until: float | None = None) -> int:
    """What the document stores now: its file and, for each attempt whose Markdown is still stored (its
    own, or a page range's), each such Markdown and the images its manifest lists (`derived_size`'s rule),
    a page-range parse's copy of its source, and the images the resource catalog recorded for the attempt
    that no manifest lists and no removal marked deleted (a retried parse's first try's); an image once.
    A listing of the document's `parsed/` prefix, page by page, finds them; then a size and a manifest
    read each, and one catalog read (which also finds an attempt whose images were stored and its Markdown
    never was).
    Not the current attempt while it is on its way and not yet indexed: its indexing counts it, within the
    quota, by the difference from the row's size; counted here first (outside the quota) it would leave that
    check no growth to refuse, and its failure's removal would not give it back. Of an indexed row, not
    the attempts before its own: indexing counted its attempt alone and removes theirs right after (counted
    in that moment, they would stay counted, as an indexed count is never lowered).
    Raises RecountUnsure (a listing past MAX_RECOUNTED_KEYS, or reads past `until`, a monotonic time:
    RECOUNT_SECONDS from now when not given)."""
    until = time.monotonic() + RECOUNT_SECONDS if until is None else until
    store = files_of(deps, row)
    prefix = parsed_markdown_key(row.tenant_id, row.id, 0).rsplit("/", 1)[0] + "/"
    keys = _parsed_keys(store, prefix, row.id, until)
    listed = set(keys)  # (a manifest or plan looked up once per Markdown: not a scan of the list each)
    parts: dict[int, list[str]] = {}
    for key in keys:
        if found := _PARSED_MARKDOWN.search(key):
            parts.setdefault(int(found.group(1)), []).append(key)
    catalog = deps.resources.owned_by(row.id)
    for resource in catalogued_images(row, catalog):
        if not resource.deleted:
            parts.setdefault(resource.attempt, [])
    if awaits_its_indexing(row):
        parts.pop(row.attempt, None)
    if row.processed_at is not None:
        parts = {attempt: found for attempt, found in parts.items() if attempt >= row.attempt}
    total = row.file_size
    counted = {row.file_path}
    for attempt, markdowns in sorted(parts.items()):
        own = replace(row, attempt=attempt)
        for markdown in markdowns:
            if time.monotonic() >= until:
                raise RecountUnsure(row.id)
            manifest = markdown.removesuffix(".md") + ".images.json"
            try:
                images = json.loads(deps.files.read(store.url_for(manifest))) if manifest in listed else []
                fresh = [image for image in images if str(image["url"]) not in counted]
                total += _part_size(deps, store.url_for(markdown), fresh)
            except FileNotFoundError:  # removed since the listing: a removal's recount counts what is left
                continue
            counted |= {str(image["url"]) for image in fresh}
        if page_range_store.range_key(own, page_range_store.PLAN) in listed:
            source = str((page_range_store.read_plan(deps, own) or {}).get("source") or "")
            if source and source not in counted:  # (the original itself, or a copy the parse made)
                with contextlib.suppress(FileNotFoundError):  # removed since the listing
                    total += deps.files.size(source)
                counted.add(source)
        for resource in catalogued_images(row, catalog, attempt):
            if not resource.deleted and resource.url not in counted:
                total += resource.size
                counted.add(resource.url)
    return total


def _parsed_keys(store: FileStore, prefix: str, knowledge_id: str, until: float) -> list[str]:
    """Every key under the document's `parsed/` prefix, in key order: each page of the listing goes on
    after the last key of the one before, until one comes back short. Objects written or removed meanwhile
    may be found or not, as with one listing (a removal's own recount counts what is left). Raises
    RecountUnsure past MAX_RECOUNTED_KEYS, or when the listing outlasts the recount's time (`until`)."""
    keys: list[str] = []
    while True:
        if time.monotonic() >= until:
            raise RecountUnsure(knowledge_id)
        page = store.list_keys(prefix, MAX_LISTED_KEYS, keys[-1] if keys else "")
        keys += page
        if len(page) < MAX_LISTED_KEYS:
            return keys
        if len(keys) >= MAX_RECOUNTED_KEYS:
            raise RecountUnsure(knowledge_id)


def recount_document(
    deps: Dependencies,
    knowledge_id: str,
    *,
    attempt: int | None = None,
    status: ParseStatus | None = None,
) -> Recount | None:
    """Sets the document's count to what it stores (`stored_bytes`) and moves its tenant's usage by the
    difference, in one write conditional on the row's size, file size, attempt and status as read (a race
    lost reads again), whatever the quota: those bytes are stored already, and refusing to count them
    would keep them outside it. An indexed attempt's count is never lowered: a chunk edit's growth counts
    on it without a record of its own (operations/chunks), until the next indexing sets the count again.
    None when the row is missing or being deleted, or no longer at `attempt` (and `status`), when given:
    the writer that moved it counts it then. Idempotent: a second recount writes nothing."""
    until = time.monotonic() + RECOUNT_SECONDS  # for every try: a race lost reads again within it
    for _ in range(RECOUNT_TRIES):
        row = deps.knowledge.get(knowledge_id)
        if (
            row is None
            or row.parse_status == ParseStatus.DELETING
            or (attempt is not None and row.attempt != attempt)
            or (status is not None and row.parse_status != status)
        ):
            return None
        size = stored_bytes(deps, row, until)
        if row.processed_at is not None:
            size = max(size, row.storage_size)
        if size == row.storage_size:
            return Recount(row.id, row.storage_size, size)
        expect = {
            "storage_size": row.storage_size,
            "file_size": row.file_size,
            "attempt": row.attempt,
            "parse_status": row.parse_status.value,
        }
        if deps.knowledge.update_fields(row.id, {}, expect=expect, storage_size=size, within_quota=False):
            return Recount(row.id, row.storage_size, size)
    raise RecountUnsure(knowledge_id)


#: what a recount that follows another operation may meet and leave for a later recount: the store's
#: errors, a listing it cannot trust, a row that kept moving
RECOUNT_DEFERRED = (*REMOVAL_REFUSED, RecountUnsure)


def recount_quietly(
    deps: Dependencies, knowledge_id: str, *, attempt: int, status: ParseStatus | None = None
) -> Recount | None:
    """`recount_document` after an operation that has happened (a cancel, a kept write, a reparse's
    removal): its failure is logged, by its class only, and never fails that operation; the operator's
    recount (POST /v1/admin/tenants/{id}/storage-recount) counts it later."""
    try:
        return recount_document(deps, knowledge_id, attempt=attempt, status=status)
    except RECOUNT_DEFERRED as error:
        logger.warning(
            "a document's storage recount is left for later",
            extra={"knowledge_id": knowledge_id, "attempt": attempt, "error": type(error).__name__},
        )
        return None
