"""What is stored is what is counted (services/stored_size.recount_document, one rule everywhere): a
cancelled attempt keeps its Markdown and images (spec §1.23) and they count from the cancel on (a tenant
cancelled each upload after its parse and kept up to ~300 MB per document outside its storage quota); a
parse write that lands after the cancel is counted too, once; the reparse that removes them gives them
back; and the operator's recount backfills documents that count their file alone and repairs drift."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryFileStore
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.errors import BadRequest, NotFound, SpanErrorCode
from chalicelib.domain.types import KnowledgeBase, ParseStatus

from .conftest import drain, upload
from .test_attempt_outputs_removed import attempts_stored, reparse
from .test_storage_counts_derived import (  # noqa: F401  (photos: a fixture)
    GALLERY,
    _Photos,
    images_stored,
    markdown_stored,
    photos,
    row_of,
    used,
)
from .test_storage_counts_edits import completed, edit_chunk, small  # noqa: F401  (small: a fixture)


@pytest.fixture
def server(photos: _Photos) -> _Photos:  # noqa: F811
    """The remote photos' server (each gallery links 30 of them)."""
    return photos


def cancel(deps: Services, kb: KnowledgeBase, knowledge_id: str) -> Any:
    from chalicelib.operations.knowledge_changes import cancel as cancel_knowledge

    return cancel_knowledge(deps, kb.tenant_id, knowledge_id)


def recount(deps: Services, knowledge_id: str) -> Any:
    from chalicelib.services.stored_size import recount_document

    return recount_document(deps, knowledge_id)


def stores(deps: Services, files: MemoryFileStore, kb: KnowledgeBase, knowledge_id: str) -> int:
    """What the document stores: its file, its current attempt's Markdown and the tenant's images."""
    return (
        len(GALLERY) + markdown_stored(deps, row_of(deps, knowledge_id)) + images_stored(files, kb.tenant_id)
    )


def test_a_cancel_after_the_parse_counts_what_it_keeps_and_the_reparse_gives_it_back(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, server: _Photos
) -> None:
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps, ("docreader",))
    assert used(deps, kb.tenant_id) == len(GALLERY)  # parsed, not indexed: its file alone so far
    answered = cancel(deps, kb, created.id)
    drain(deps)
    row = row_of(deps, created.id)
    assert row.parse_status == ParseStatus.CANCELLED and attempts_stored(files, created.id) == {1}
    kept = stores(deps, files, kb, created.id)
    assert images_stored(files, kb.tenant_id) > 100 * len(GALLERY)
    assert row.storage_size == kept == used(deps, kb.tenant_id) == answered.storage_size
    assert not recount(deps, created.id).corrected  # a second recount is a no-op
    assert used(deps, kb.tenant_id) == kept
    reparse(deps, kb, created.id)  # removes the cancelled attempt's outputs: their bytes come back
    assert attempts_stored(files, created.id) == set() and images_stored(files, kb.tenant_id) == 0
    assert row_of(deps, created.id).storage_size == len(GALLERY) == used(deps, kb.tenant_id)
    drain(deps)  # the new attempt is indexed within the quota, counted once
    assert (
        row_of(deps, created.id).storage_size
        == stores(deps, files, kb, created.id)
        == used(deps, kb.tenant_id)
    )


def test_a_cancel_loop_holds_one_counted_set(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, server: _Photos
) -> None:
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps, ("docreader",))
    for _ in range(3):
        cancel(deps, kb, created.id)
        drain(deps)
        assert used(deps, kb.tenant_id) == stores(deps, files, kb, created.id)
        reparse(deps, kb, created.id)
        assert used(deps, kb.tenant_id) == len(GALLERY)
        drain(deps, ("docreader",))


def test_a_parse_write_landing_after_the_cancel_is_counted_once_under_a_redelivery(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    server: _Photos,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cancel lands while the parse runs (its images stored, its Markdown not yet): the cancel's
    recount counts the images the catalog recorded; the write that lands after it is kept (spec §1.23) and
    counted; a second copy of the message writing the same attempt again counts nothing more."""
    from chalicelib.stages import docreader

    created = upload(deps, kb, "gallery.md", GALLERY)
    real = docreader._finish
    calls: list[tuple[Any, ...]] = []

    def cancel_first(*args: Any) -> Any:
        if not calls:
            calls.append(args)
            cancel(deps, kb, created.id)
            # its images are stored (and count), its Markdown not yet
            assert (
                used(deps, kb.tenant_id) == len(GALLERY) + images_stored(files, kb.tenant_id) > len(GALLERY)
            )
        return real(*args)

    monkeypatch.setattr(docreader, "_finish", cancel_first)
    drain(deps, ("docreader",))
    assert row_of(deps, created.id).parse_status == ParseStatus.CANCELLED
    assert attempts_stored(files, created.id) == {1}
    counted = stores(deps, files, kb, created.id)
    assert row_of(deps, created.id).storage_size == counted == used(deps, kb.tenant_id)
    real(*calls[0])  # a redelivered copy (which read the row processing) writes the attempt again
    assert row_of(deps, created.id).storage_size == counted == used(deps, kb.tenant_id)


def test_the_current_attempt_on_its_way_is_left_to_its_indexing(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, server: _Photos
) -> None:
    """Counted early, outside the quota, an attempt on its way would leave indexing's quota check no growth
    to refuse: the recount leaves it to its indexing, which refuses it here."""
    deps.tenants.set_quotas(
        kb.tenant_id, storage_quota=10_000, document_quota=0
    )  # the file fits, not its images
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps, ("docreader",))
    assert not recount(deps, created.id).corrected
    assert used(deps, kb.tenant_id) == len(GALLERY)
    drain(deps)
    row = row_of(deps, created.id)
    assert row.parse_status == ParseStatus.FAILED and row.error_code == SpanErrorCode.QUOTA_EXCEEDED.value
    assert used(deps, kb.tenant_id) == len(GALLERY)


def test_a_recount_backfills_a_document_counting_its_file_alone(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, server: _Photos
) -> None:
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)
    full = row_of(deps, created.id).storage_size
    assert full == stores(deps, files, kb, created.id) == used(deps, kb.tenant_id)
    # indexed before its parse outputs counted: the row and the usage count its file alone
    assert deps.knowledge.update_fields(created.id, {}, storage_size=len(GALLERY)) is not None
    assert used(deps, kb.tenant_id) == len(GALLERY)
    deps.tenants.set_quotas(kb.tenant_id, storage_quota=len(GALLERY) + 10, document_quota=0)  # now over it
    done = recount(deps, created.id)
    assert (done.before, done.after, done.corrected) == (len(GALLERY), full, True)
    assert row_of(deps, created.id).storage_size == full == used(deps, kb.tenant_id)  # stored: counted
    again = recount(deps, created.id)
    assert (again.before, again.after, again.corrected) == (full, full, False)
    assert used(deps, kb.tenant_id) == full


def test_a_recount_counts_what_a_refused_removal_left_stored(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    server: _Photos,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An attempt refused by the quota fails and its outputs go; the store refused that removal, so they
    stay stored and uncounted (drift): the recount counts them."""
    from chalicelib.ports.storage import StorageRefused
    from chalicelib.services import stored_size

    def refused(*args: Any, **kw: Any) -> None:
        raise StorageRefused(StorageRefused.ACCESS_DENIED, operation="delete_object", http_status=403)

    monkeypatch.setattr(stored_size, "remove_attempt_outputs", refused)
    deps.tenants.set_quotas(kb.tenant_id, storage_quota=10_000, document_quota=0)
    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps)
    assert row_of(deps, created.id).parse_status == ParseStatus.FAILED
    assert attempts_stored(files, created.id) == {1} and used(deps, kb.tenant_id) == len(GALLERY)
    assert recount(deps, created.id).corrected
    assert (
        row_of(deps, created.id).storage_size
        == stores(deps, files, kb, created.id)
        == used(deps, kb.tenant_id)
    )


def test_a_recount_keeps_a_chunk_edits_counted_growth(deps: Services, small: KnowledgeBase) -> None:  # noqa: F811
    """A chunk edit's growth counts on the row without a record of its own (operations/chunks): a recount
    of an indexed attempt never lowers its count."""
    knowledge = completed(deps, small)
    first = deps.chunks.list(knowledge.id)[0]
    edit_chunk(deps, knowledge, first.id, first.content + " and a much longer tail" * 20)
    grown = row_of(deps, knowledge.id).storage_size
    assert grown > knowledge.storage_size
    assert not recount(deps, knowledge.id).corrected
    assert row_of(deps, knowledge.id).storage_size == grown == used(deps, small.tenant_id)


@pytest.mark.parametrize("out_of_time", [False, True])
def test_the_operators_recount_walks_every_document_of_the_tenant_in_pages(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    server: _Photos,
    monkeypatch: pytest.MonkeyPatch,
    out_of_time: bool,
) -> None:
    """Pages of `limit` documents; a page past its time ends after one document, with a cursor (a page of
    documents with many page ranges could pass the API's 28 s)."""
    from chalicelib.operations import admin
    from chalicelib.operations.knowledge_bases import create_kb
    from chalicelib.services import storage_recount

    if out_of_time:
        monkeypatch.setattr(storage_recount, "PAGE_SECONDS", 0.0)

    other = create_kb(deps, kb.tenant_id, CreateKnowledgeBase(name="second"))
    documents = [upload(deps, kb, f"g{i}.md", GALLERY + b"\n" * i) for i in range(2)]
    documents.append(upload(deps, other, "g.md", GALLERY + b"\n\n\n"))
    drain(deps)
    full = used(deps, kb.tenant_id)
    for document in documents:  # each counts its file alone
        row = row_of(deps, document.id)
        assert deps.knowledge.update_fields(row.id, {}, storage_size=row.file_size) is not None
    files_alone = used(deps, kb.tenant_id)
    assert files_alone < full
    pages, cursor = [], ""
    while True:
        page = admin.storage_recount(deps, kb.tenant_id, admin.StorageRecountQuery(limit=2, cursor=cursor))
        pages.append(page)
        cursor = page["next_cursor"] or ""
        if not cursor:
            break
    assert sum(p["documents"] for p in pages) == 3 == sum(p["corrected"] for p in pages)
    assert [p["documents"] for p in pages] == ([1, 1, 1] if out_of_time else [2, 1])
    assert sum(p["bytes_before"] for p in pages) == files_alone and pages[0]["usage_before"] == files_alone
    assert (
        sum(p["bytes_after"] for p in pages) == full == pages[-1]["usage_after"] == used(deps, kb.tenant_id)
    )
    monkeypatch.setattr(storage_recount, "PAGE_SECONDS", 60.0)
    again = admin.storage_recount(deps, kb.tenant_id, admin.StorageRecountQuery(limit=50))
    assert (again["documents"], again["corrected"], again["next_cursor"]) == (3, 0, None)
    assert again["usage_before"] == again["usage_after"] == full
    with pytest.raises(NotFound):
        admin.storage_recount(deps, "no-such-tenant", admin.StorageRecountQuery())
    with pytest.raises(BadRequest) as bad:
        admin.storage_recount(deps, kb.tenant_id, admin.StorageRecountQuery(cursor="not-a-cursor"))
    assert bad.value.code == "invalid_cursor"


def test_a_cancelled_page_range_parse_counts_the_ranges_it_kept(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore
) -> None:
    """A large PDF parsed in page ranges, cancelled while its first range is parsed: that range's Markdown
    and images stay (spec §1.23), never assembled into the attempt's Markdown, and count."""
    from chalicelib.operations.knowledge_changes import cancel as cancel_knowledge

    from .test_late_range_writes import Reader, fanned_out

    reader = Reader()
    knowledge_id = fanned_out(deps, kb, reader)
    row = row_of(deps, knowledge_id)
    reader.while_reading = lambda: cancel_knowledge(deps, kb.tenant_id, knowledge_id)
    drain(deps, ("docreader",))
    assert row_of(deps, knowledge_id).parse_status == ParseStatus.CANCELLED
    ranges = f"{kb.tenant_id}/{knowledge_id}/parsed/attempt-1.ranges/pages-"
    kept = [key for key in files.keys(ranges) if key.endswith(".md")]
    assert kept and not attempts_stored(files, knowledge_id)  # ranges only, no assembled Markdown
    stored = (
        row.file_size + sum(len(files._objects[key][0]) for key in kept) + images_stored(files, kb.tenant_id)
    )
    assert images_stored(files, kb.tenant_id) > 0
    assert row_of(deps, knowledge_id).storage_size == stored == used(deps, kb.tenant_id)


def test_a_reparse_landing_during_the_cancels_recount_leaves_nothing_counted_that_it_removed(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    server: _Photos,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The cancel's recount measured the kept outputs; a reparse ends the attempt and removes them before
    the recount writes: its write, conditional on the attempt and status read, counts nothing, and the
    row and the usage stay at the file."""
    from chalicelib.services import stored_size

    created = upload(deps, kb, "gallery.md", GALLERY)
    drain(deps, ("docreader",))
    real = stored_size.stored_bytes
    fired: list[int] = []

    def measured_then_reparsed(*args: Any) -> int:
        size = real(*args)
        if not fired:
            fired.append(size)
            reparse(deps, kb, created.id)
        return size

    monkeypatch.setattr(stored_size, "stored_bytes", measured_then_reparsed)
    cancel(deps, kb, created.id)
    assert fired and fired[0] > len(GALLERY)  # it had measured the outputs
    row = row_of(deps, created.id)
    assert (row.attempt, row.parse_status) == (2, ParseStatus.PENDING)
    assert attempts_stored(files, created.id) == set() and images_stored(files, kb.tenant_id) == 0
    assert row.storage_size == len(GALLERY) == used(deps, kb.tenant_id)
