"""What a document counts on its tenant's storage quota (`Knowledge.storage_size`): the one rule, and what
becomes of an attempt's parse outputs that nothing counts."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from chalicelib.domain.resources import Resource
from chalicelib.domain.storage_backends import backend_of
from chalicelib.domain.storage_keys import images_manifest_key, parsed_markdown_key
from chalicelib.domain.types import Knowledge, ParseStatus
from chalicelib.observability import logger
from chalicelib.ports import Dependencies
from chalicelib.ports.storage import StorageRefused, StorageUnavailable, UnknownStorageBackend
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
    of its outputs; a cancelled one keeps what it wrote (spec §1.23), a deleted row's is undone."""
    if kept_after_write(deps, knowledge, undo, undo_superseded=undo):
        return True
    remove_uncounted_outputs(deps, knowledge.id, knowledge.attempt)
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
    # the plan stays (small): a range of a fanned-out parse still running finds the row ended and keeps
    # what it writes, which the removal after a later attempt is indexed finds by the plan
    try:
        remove_attempt_outputs(deps, row, attempt, keep_plan=True)
    except REMOVAL_REFUSED as error:
        # the failure stands (it may be this very store that failed the document): the outputs stay, for
        # the next indexed attempt's removal or the delete
        logger.warning(
            "a failed attempt's outputs could not be removed",
            extra={"knowledge_id": knowledge_id, "attempt": attempt, "error": type(error).__name__},
        )
