"""An attempt's parse outputs are written once and go when the attempt ends unindexed.

- A duplicate docreader delivery (SQS is at least once) that ran alongside the first, past its span check,
  rewrote the Markdown and manifest after the first had been chunked and indexed: with other image bytes
  (a remote image answered otherwise) the counted row's manifest listed images it did not count, and the
  first parse's images were orphaned. It now leaves what the first stored, drops its own images, and queues
  no second chunking.
- A restart (local startup recovery, a DLQ redrive) left a never-indexed attempt's outputs stored: nothing
  counted them, and a failing later attempt never removed them. They now go, as a reparse's do.
- A page-range assembly whose attempt failed during its write removed the plan, by which a later removal
  finds what a range still running writes. The plan now stays."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryFileStore, MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.storage_keys import images_manifest_key, parsed_markdown_key
from chalicelib.domain.types import IN_FLIGHT_STATUSES, KnowledgeBase, ParseStatus, StageMessage
from chalicelib.operations.recovery import recover_after_restart, restart
from chalicelib.services import stored_size

from .conftest import deliver, drain, upload
from .test_attempt_outputs_removed import attempts_stored
from .test_late_range_writes import Reader, attempt_one_objects, fanned_out, images
from .test_storage_counts_derived import (  # noqa: F401  (photos: a fixture)
    GALLERY,
    _Photos,
    images_stored,
    markdown_stored,
    photos,
    row_of,
    used,
)


def manifest_of(files: MemoryFileStore, tenant_id: str, knowledge_id: str, attempt: int = 1) -> bytes:
    data, _ = files._objects[images_manifest_key(tenant_id, knowledge_id, attempt)]
    return data


def markdown_of(files: MemoryFileStore, tenant_id: str, knowledge_id: str, attempt: int = 1) -> bytes:
    data, _ = files._objects[parsed_markdown_key(tenant_id, knowledge_id, attempt)]
    return data


def duplicate_alongside(
    deps: Services, knowledge_id: str, tenant_id: str, monkeypatch: pytest.MonkeyPatch, first: Any
) -> None:
    """Runs a second delivery of the document's docreader message: `first()` (the first delivery, and what
    follows it) runs once this one has parsed, before it writes."""
    from chalicelib.stages import docreader

    real = docreader._finish
    fired: list[int] = []

    def first_goes_ahead(*args: Any) -> Any:
        if not fired:
            fired.append(1)
            first()
        return real(*args)

    monkeypatch.setattr(docreader, "_finish", first_goes_ahead)
    docreader.run(deps, StageMessage(tenant_id=tenant_id, knowledge_id=knowledge_id, attempt=1))
    assert fired


def test_a_duplicate_delivery_with_other_images_leaves_the_indexed_outputs(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    photos: _Photos,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created = upload(deps, kb, "gallery.md", GALLERY)
    counted: dict[str, Any] = {}

    def first() -> None:
        photos.side = 240  # the remote server answers other bytes to the first delivery
        drain(deps)
        row = row_of(deps, created.id)
        assert row.processed_at is not None
        counted.update(
            manifest=manifest_of(files, kb.tenant_id, created.id),
            markdown=markdown_of(files, kb.tenant_id, created.id),
            size=row.storage_size,
        )

    duplicate_alongside(deps, created.id, kb.tenant_id, monkeypatch, first)
    assert manifest_of(files, kb.tenant_id, created.id) == counted["manifest"]
    assert markdown_of(files, kb.tenant_id, created.id) == counted["markdown"]
    # the images stored are the counted manifest's: the duplicate's own (other bytes) went
    listed = {image["url"] for image in json.loads(counted["manifest"])}
    assert len(listed) == 30
    assert {files.url_for(key) for key in files.keys(f"{kb.tenant_id}/exports/")} == listed
    row = row_of(deps, created.id)
    assert row.storage_size == counted["size"] == used(deps, kb.tenant_id)
    assert row.storage_size == len(GALLERY) + markdown_stored(deps, row) + images_stored(files, kb.tenant_id)
    # the duplicate hands over too (its first may have died before its own hand-over): chunking is
    # idempotent, and the counted outputs stay as they are
    drain(deps)
    assert manifest_of(files, kb.tenant_id, created.id) == counted["manifest"]
    assert row_of(deps, created.id).storage_size == counted["size"] == used(deps, kb.tenant_id)


def test_a_duplicate_delivery_with_the_same_parse_is_chunked_once(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    photos: _Photos,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created = upload(deps, kb, "gallery.md", GALLERY)
    duplicate_alongside(deps, created.id, kb.tenant_id, monkeypatch, lambda: drain(deps, ("docreader",)))
    drain(deps)
    row = row_of(deps, created.id)
    assert row.processed_at is not None and attempts_stored(files, created.id) == {1}
    assert len(deps.chunks.list(row.id)) == row.chunk_count > 0
    assert row.storage_size == len(GALLERY) + markdown_stored(deps, row) + images_stored(files, kb.tenant_id)


def test_a_write_cut_short_between_markdown_and_manifest_is_completed_by_the_retry(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    photos: _Photos,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created = upload(deps, kb, "gallery.md", GALLERY)
    real = files.save_if_absent

    def crash_on_the_manifest(key: str, *args: Any) -> bool:
        if key.endswith(".images.json"):
            raise RuntimeError("the invocation died")
        return real(key, *args)

    monkeypatch.setattr(files, "save_if_absent", crash_on_the_manifest)
    deliver(deps, "docreader")
    assert attempts_stored(files, created.id) == {1}  # the Markdown only
    monkeypatch.setattr(files, "save_if_absent", real)
    from chalicelib.stages import docreader

    docreader.run(deps, StageMessage(tenant_id=kb.tenant_id, knowledge_id=created.id, attempt=1))
    assert json.loads(manifest_of(files, kb.tenant_id, created.id))  # completed, with the images
    queue.purge("docreader")  # (the failed try's message: handled by the run above)
    drain(deps)
    row = row_of(deps, created.id)
    assert row.processed_at is not None
    assert row.storage_size == len(GALLERY) + markdown_stored(deps, row) + images_stored(files, kb.tenant_id)


def test_another_parses_markdown_without_its_manifest_is_taken_over(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    photos: _Photos,  # noqa: F811
) -> None:
    """A delivery finds another parse's Markdown and no manifest (that delivery died between its two writes;
    a page fetched again rarely gives the same bytes): nothing read or counted it, so this parse takes the
    attempt over instead of failing the document."""
    from chalicelib.stages import docreader

    created = upload(deps, kb, "gallery.md", GALLERY)
    other = b"# Gallery\n\nanother parse\n"
    files.save(parsed_markdown_key(kb.tenant_id, created.id, 1), other)
    docreader.run(deps, StageMessage(tenant_id=kb.tenant_id, knowledge_id=created.id, attempt=1))
    assert markdown_of(files, kb.tenant_id, created.id) != other
    assert images_manifest_key(kb.tenant_id, created.id, 1) in files._objects
    assert deps.queue.bodies("chunking")  # type: ignore[attr-defined]


def test_a_startup_restart_removes_the_unindexed_attempts_outputs(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    photos: _Photos,  # noqa: F811
) -> None:
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps, ("docreader",))  # parsed, not indexed: the stack stops here
    assert attempts_stored(files, created.id) == {1} and images_stored(files, kb.tenant_id) > 0
    assert recover_after_restart(deps).restarted == [created.id]
    assert row_of(deps, created.id).attempt == 2
    assert attempts_stored(files, created.id) == set() and images_stored(files, kb.tenant_id) == 0
    drain(deps)
    row = row_of(deps, created.id)
    assert row.processed_at is not None and attempts_stored(files, created.id) == {2}
    assert row.storage_size == len(GALLERY) + markdown_stored(deps, row) + images_stored(files, kb.tenant_id)
    assert row.storage_size == used(deps, kb.tenant_id)


def test_a_startup_restart_keeps_an_indexed_attempts_outputs(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    photos: _Photos,  # noqa: F811
) -> None:
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)  # indexed: its state machine is on its way when the stack stops
    row = row_of(deps, created.id)
    assert row.processed_at is not None and row.parse_status in IN_FLIGHT_STATUSES
    images = images_stored(files, kb.tenant_id)
    assert recover_after_restart(deps).restarted == [created.id]
    assert attempts_stored(files, created.id) == {1} and images_stored(files, kb.tenant_id) == images
    assert used(deps, kb.tenant_id) == row.storage_size  # what the row counts stays stored


def test_a_restart_read_unindexed_of_a_row_indexed_meanwhile_is_refused(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    photos: _Photos,  # noqa: F811
) -> None:
    """The restart's write decides: a row indexed after it was read keeps its counted outputs."""
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)
    row = row_of(deps, created.id)
    stale = replace(row, processed_at=None)
    assert restart(deps, stale, frozenset(IN_FLIGHT_STATUSES)) is None
    assert row_of(deps, created.id).attempt == 1 and attempts_stored(files, created.id) == {1}


def test_a_restart_whose_store_refuses_the_removal_has_queued_its_new_attempt(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    queue: MemoryTaskQueue,
    photos: _Photos,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.ports.storage import StorageUnavailable

    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps, ("docreader",))

    def store_down(*args: Any, **kw: Any) -> None:
        raise StorageUnavailable(operation="delete_object", http_status=503)

    monkeypatch.setattr(stored_size, "remove_attempt_outputs", store_down)
    assert recover_after_restart(deps).restarted == [created.id]
    assert row_of(deps, created.id).attempt == 2 and queue.waiting("docreader")
    assert attempts_stored(files, created.id) == {1}  # for a later removal or the delete


def test_an_assembly_whose_attempt_failed_keeps_the_plan(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another range failed for good while the assembly wrote: the attempt's outputs go, its plan stays,
    by which a later removal finds what a range still running writes."""
    from chalicelib.services.stored_size import remove_uncounted_outputs
    from chalicelib.stages import docreader

    knowledge_id = fanned_out(deps, kb, Reader())
    real = docreader.kept_parse_write

    def failed_meanwhile(*args: Any) -> bool:
        deps.knowledge.mark_failed(knowledge_id, 1, "another range failed", "docreader_parse_failed")
        remove_uncounted_outputs(deps, knowledge_id, 1)
        return real(*args)

    monkeypatch.setattr(docreader, "kept_parse_write", failed_meanwhile)
    drain(deps, ("docreader",))  # the ranges, then the assembly
    assert row_of(deps, knowledge_id).parse_status == ParseStatus.FAILED
    assert images(files, kb.tenant_id) == []
    assert attempt_one_objects(files, kb.tenant_id, knowledge_id) == [
        f"{kb.tenant_id}/{knowledge_id}/parsed/attempt-1.ranges/plan.json"
    ]
