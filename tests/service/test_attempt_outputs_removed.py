"""An attempt's parse outputs (its Markdown, manifest and images) count on the storage quota once it is
indexed. One that never is (refused by the quota, failed at a stage, cancelled, superseded by a reparse while
on its way) had its outputs stay stored and uncounted until a later attempt was indexed: a Markdown file
linking 30 large images, reparsed over and over near its tenant's quota, stored a fresh uncounted set each
time. Such an attempt's outputs now go when it ends; an indexed attempt's (what the row counts) stay."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.bootstrap import Services
from chalicelib.commands import ReparseRequest
from chalicelib.domain.errors import PermanentStageError, SpanErrorCode
from chalicelib.domain.types import KnowledgeBase, ParseStatus, Stage, StageMessage
from chalicelib.services import stored_size

from .conftest import drain, upload
from .test_storage_counts_derived import (  # noqa: F401  (photos: a fixture)
    GALLERY,
    _Photos,
    images_stored,
    markdown_stored,
    photos,
    row_of,
    used,
)
from .test_storage_counts_edits import draft, edit_text


@pytest.fixture
def server(photos: _Photos) -> _Photos:  # noqa: F811
    """The remote photos' server (each test's Markdown links 30 of them)."""
    return photos


def attempts_stored(files: MemoryFileStore, knowledge_id: str) -> set[int]:
    """The attempts whose parsed Markdown is stored."""
    found = set()
    for key in files._objects:
        head, _, tail = key.partition(f"/{knowledge_id}/parsed/attempt-")
        if head and tail.endswith(".md") and tail[:-3].isdigit():
            found.add(int(tail[:-3]))
    return found


def reparse(deps: Services, kb: KnowledgeBase, knowledge_id: str) -> None:
    from chalicelib.tasks.reparse import reparse as start

    start(deps, kb.tenant_id, knowledge_id, ReparseRequest())


def test_quota_refused_reparses_leave_no_uncounted_images(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, server: _Photos
) -> None:
    deps.tenants.set_quotas(
        kb.tenant_id, storage_quota=10_000, document_quota=0
    )  # the file fits, not its images
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)
    for _ in range(3):
        row = row_of(deps, created.id)
        assert row.parse_status == ParseStatus.FAILED and row.error_code == SpanErrorCode.QUOTA_EXCEEDED.value
        assert images_stored(files, kb.tenant_id) == 0 and attempts_stored(files, created.id) == set()
        assert row.storage_size == len(GALLERY) == used(deps, kb.tenant_id)  # its file stays counted
        reparse(deps, kb, created.id)
        drain(deps)
    assert server.served == 4 * 30


def test_a_refused_reparse_of_an_indexed_document_keeps_the_indexed_attempts_outputs(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, server: _Photos
) -> None:
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)
    indexed = row_of(deps, created.id)
    images = images_stored(files, kb.tenant_id)
    assert indexed.processed_at is not None and used(deps, kb.tenant_id) == indexed.storage_size
    deps.tenants.set_quotas(kb.tenant_id, storage_quota=indexed.storage_size + 1000, document_quota=0)
    server.side = 240  # larger photos now: the reparse's images do not fit
    for attempt in (2, 3):
        reparse(deps, kb, created.id)
        drain(deps)
        row = row_of(deps, created.id)
        assert (row.attempt, row.parse_status) == (attempt, ParseStatus.FAILED)
        assert row.error_code == SpanErrorCode.QUOTA_EXCEEDED.value
        # the new attempt's outputs went; the indexed one's (counted) stay
        assert attempts_stored(files, created.id) == {1}
        assert images_stored(files, kb.tenant_id) == images
        assert row.storage_size == indexed.storage_size == used(deps, kb.tenant_id)


def test_a_reparse_failing_at_a_stage_removes_its_outputs_not_the_indexed_ones(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    server: _Photos,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.stages import embedding, runner

    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)
    indexed = row_of(deps, created.id)
    images = images_stored(files, kb.tenant_id)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise PermanentStageError("the index refused the entries", code=SpanErrorCode.UNKNOWN)

    monkeypatch.setattr(embedding, "index_knowledge", refuse)
    reparse(deps, kb, created.id)
    drain(deps, ("docreader", "chunking"))
    assert attempts_stored(files, created.id) == {1, 2} and images_stored(files, kb.tenant_id) > images
    drain(deps)
    row = row_of(deps, created.id)
    assert (row.attempt, row.parse_status) == (2, ParseStatus.FAILED)
    assert attempts_stored(files, created.id) == {1} and images_stored(files, kb.tenant_id) == images
    assert row.storage_size == indexed.storage_size == used(deps, kb.tenant_id)
    # a redelivered failure of attempt 2 removes nothing twice; a late one of attempt 1 removes nothing
    for attempt in (2, 1):
        message = StageMessage(tenant_id=kb.tenant_id, knowledge_id=created.id, attempt=attempt)
        runner.fail_knowledge(deps, message, Stage.EMBEDDING, "unknown", "failed again")
        assert attempts_stored(files, created.id) == {1} and images_stored(files, kb.tenant_id) == images


def test_a_cancelled_attempt_keeps_its_outputs_until_its_reparse_removes_them(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, server: _Photos
) -> None:
    """A cancel keeps what was written (spec §1.23: its chunks link to its images); the reparse that follows
    removes the cancelled attempt's outputs, so cancel-and-reparse loops never hold more than one set."""
    from chalicelib.operations.knowledge_changes import cancel

    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps, ("docreader",))
    one_set = images_stored(files, kb.tenant_id)
    for attempt in (1, 2, 3):
        cancel(deps, kb.tenant_id, created.id)
        drain(deps)
        assert row_of(deps, created.id).parse_status == ParseStatus.CANCELLED
        assert attempts_stored(files, created.id) == {attempt}  # kept, and counted
        kept = len(GALLERY) + markdown_stored(deps, row_of(deps, created.id)) + one_set
        assert images_stored(files, kb.tenant_id) == one_set and used(deps, kb.tenant_id) == kept
        reparse(deps, kb, created.id)
        assert attempts_stored(files, created.id) == set()  # the cancelled attempt's went with its reparse
        assert used(deps, kb.tenant_id) == len(GALLERY)  # and its bytes came back
        drain(deps, ("docreader",))


def test_a_cancel_after_indexing_keeps_the_counted_outputs(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, server: _Photos
) -> None:
    from chalicelib.operations.knowledge_changes import cancel

    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)  # indexed: its state machine (the images' descriptions) is on its way
    row = row_of(deps, created.id)
    assert row.processed_at is not None and row.parse_status in (
        ParseStatus.PROCESSING,
        ParseStatus.FINALIZING,
    )
    images = images_stored(files, kb.tenant_id)
    cancel(deps, kb.tenant_id, created.id)
    assert row_of(deps, created.id).parse_status == ParseStatus.CANCELLED
    assert attempts_stored(files, created.id) == {1} and images_stored(files, kb.tenant_id) == images
    assert used(deps, kb.tenant_id) == row.storage_size


def test_reparses_while_on_its_way_leave_no_uncounted_outputs(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, server: _Photos
) -> None:
    """Each reparse ends an attempt that stored its images and was never indexed (its reset makes sure it
    cannot be any more): those go, so a reparse loop that never lets an attempt be indexed holds one set."""
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps, ("docreader",))
    one_set = images_stored(files, kb.tenant_id)
    for attempt in (2, 3, 4):
        reparse(deps, kb, created.id)
        drain(deps, ("docreader",))
        assert (
            attempts_stored(files, created.id) == {attempt} and images_stored(files, kb.tenant_id) == one_set
        )
    drain(deps)
    row = row_of(deps, created.id)
    assert (row.attempt, row.processed_at is not None) == (4, True)
    assert row.storage_size == len(GALLERY) + markdown_stored(deps, row) + one_set == used(deps, kb.tenant_id)


def test_a_reparse_racing_the_index_keeps_the_indexed_attempts_outputs(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    server: _Photos,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reparse reads attempt 1 on its way; its mark_indexed lands before the reset: the reset refuses
    (400 invalid_state, try again) and the outputs the row now counts (and search links serve) stay; the
    retry reads it indexed and keeps them until attempt 2 is indexed."""
    from chalicelib.domain.errors import BadRequest

    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps, ("docreader", "chunking"))
    repo = deps.knowledge
    real_reset = repo.reset_for_reparse

    def indexed_first(*args: Any, **kw: Any) -> Any:
        drain(deps)
        assert row_of(deps, created.id).processed_at is not None
        return real_reset(*args, **kw)

    monkeypatch.setattr(repo, "reset_for_reparse", indexed_first)
    with pytest.raises(BadRequest) as refused:
        reparse(deps, kb, created.id)
    monkeypatch.undo()
    assert refused.value.code == "invalid_state" and attempts_stored(files, created.id) == {1}
    reparse(deps, kb, created.id)
    assert attempts_stored(files, created.id) == {1}
    drain(deps)
    assert attempts_stored(files, created.id) == {2}


def test_a_superseded_attempts_late_parse_is_undone(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    server: _Photos,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A reparse lands while attempt 1's parse runs (its images already stored): what attempt 1 writes after
    goes, as nothing would count it."""
    from chalicelib.stages import docreader

    created = upload(deps, kb, "gallery.md", GALLERY)
    real = docreader._finish
    fired: list[int] = []

    def reparse_first(*args: Any) -> Any:
        if not fired:
            fired.append(1)
            reparse(deps, kb, created.id)
        return real(*args)

    monkeypatch.setattr(docreader, "_finish", reparse_first)
    drain(deps, ("docreader",))
    assert row_of(deps, created.id).attempt == 2
    assert attempts_stored(files, created.id) == {2}


def test_a_reparse_whose_removal_fails_has_queued_its_new_attempt(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    server: _Photos,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.adapters.memory import MemoryTaskQueue
    from chalicelib.operations.knowledge_changes import cancel
    from chalicelib.ports.storage import StorageUnavailable

    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps, ("docreader",))
    cancel(deps, kb.tenant_id, created.id)
    drain(deps)

    def store_down(*args: Any, **kw: Any) -> None:
        raise StorageUnavailable(operation="delete_object", http_status=503)

    monkeypatch.setattr(stored_size, "remove_attempt_outputs", store_down)
    reparse(deps, kb, created.id)  # answered: the reparse happened, its outputs stay for a later removal
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    assert row_of(deps, created.id).attempt == 2 and queue.waiting("docreader")


def test_indexing_counts_the_file_size_the_write_finds(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An edit of a published text lands between the hand-over's read of the row and its mark_indexed (and
    the edit's reparse does not start): the row counts the edited file, not the size read before."""
    import chalicelib.operations.knowledge_changes as changes
    from chalicelib.stages import embedding

    created = draft(deps, kb, "short text " * 10, status="publish")
    drain(deps, ("docreader", "chunking"))
    stale = row_of(deps, created.id)
    kb_row = deps.kbs.get(kb.id)
    assert kb_row is not None

    def hand_over_then_refuse(*args: Any) -> Any:
        embedding.hand_over(deps, stale, kb_row, {"chunks": 1})  # the old attempt's, with the row read before
        raise RuntimeError("the reparse did not start")

    monkeypatch.setattr(changes, "reparse", hand_over_then_refuse)
    with pytest.raises(RuntimeError):
        edit_text(deps, stale, "a much longer text " * 500)
    row = row_of(deps, created.id)
    assert row.file_size > stale.file_size
    assert row.storage_size == row.file_size + markdown_stored(deps, row) == used(deps, kb.tenant_id)


def test_an_attempt_housekeeping_fails_leaves_no_uncounted_images(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, server: _Photos
) -> None:
    from dataclasses import replace

    from chalicelib.adapters.memory import MemoryTaskQueue
    from chalicelib.stages import housekeeping

    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps, ("docreader",))
    assert images_stored(files, kb.tenant_id) > 0
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    queue.purge("chunking")  # its chunking message lost: the row is stuck
    deps.settings = replace(deps.settings, stale_after_seconds=-60, queue_wait_limit_seconds=-60)
    assert housekeeping.handle(deps, {})["recovered"] == [created.id]
    row = row_of(deps, created.id)
    assert row.parse_status == ParseStatus.FAILED
    assert images_stored(files, kb.tenant_id) == 0 and attempts_stored(files, created.id) == set()


def test_indexing_after_many_reparses_removes_each_earlier_image_once(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    server: _Photos,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What an earlier attempt's removal deleted is marked in the catalog: a later indexing does not delete
    every earlier attempt's images again (the work grew with each reparse), and reads the catalog once."""
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)
    deleted: list[str] = []
    reads: list[str] = []
    real_delete, real_owned = files.delete, deps.resources.owned_by

    def counted_delete(url: str) -> None:
        deleted.append(url)
        real_delete(url)

    def counted_owned(owner_id: str) -> Any:
        reads.append(owner_id)
        return real_owned(owner_id)

    monkeypatch.setattr(files, "delete", counted_delete)
    monkeypatch.setattr(deps.resources, "owned_by", counted_owned)
    per_indexing = []
    for attempt in range(2, 6):
        deleted.clear()
        reads.clear()
        reparse(deps, kb, created.id)
        drain(deps)
        assert row_of(deps, created.id).attempt == attempt
        per_indexing.append((len(deleted), len(reads)))
    # each earlier attempt costs its Markdown's and manifest's deletes (gone already: 2 calls), its images
    # are not deleted again
    growth = [later[0] - earlier[0] for earlier, later in pairwise(per_indexing)]
    assert all(g <= 2 for g in growth) and len({reads for _, reads in per_indexing}) == 1, per_indexing
    assert attempts_stored(files, created.id) == {5}


def test_a_reparse_whose_store_refuses_the_removal_answers_and_starts_one_attempt(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    server: _Photos,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.ports.storage import StorageRefused

    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps, ("docreader",))

    def refused(*args: Any, **kw: Any) -> None:
        raise StorageRefused(StorageRefused.ACCESS_DENIED, operation="delete_object", http_status=403)

    monkeypatch.setattr(stored_size, "remove_attempt_outputs", refused)
    reparse(deps, kb, created.id)
    assert row_of(deps, created.id).attempt == 2
