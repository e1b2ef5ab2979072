"""A document whose `parsed/` prefix holds more objects than one listing answers (1,000: a large PDF read in
many page ranges, each range's Markdown and image manifest) is recounted all the same: the recount lists the
prefix page by page (services/stored_size). One listing came back full and the recount gave up
(RecountUnsure) every time, so a cancelled big parse kept its ranges counted for no one, for good. Past
MAX_RECOUNTED_KEYS it still gives up and writes nothing, and the operator's recount skips the document."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from page_images import scanned_pdf
from PIL import Image

from chalicelib.adapters.memory.files import MemoryFileStore
from chalicelib.bootstrap import Services
from chalicelib.domain.types import Knowledge, KnowledgeBase, ParseStatus
from chalicelib.ports import ParsedImage, ReadRequest, ReadResult
from chalicelib.ports.storage import MAX_LISTED_KEYS

from .conftest import drain, upload
from .test_storage_counts_derived import row_of, used

RANGES = 520  # one page each: a Markdown and a manifest per range, and the plan: 1,041 keys


def png(page: int) -> bytes:
    """A small picture of its own (64 px: smaller ones are dropped as icons)."""
    out = io.BytesIO()
    Image.new("RGB", (64, 64), (page % 256, page // 256, 7)).save(out, "PNG")
    return out.getvalue()


class Reader:
    """A PDF reader of RANGES pages, an image a page; `on_last_read` runs as the last range is parsed."""

    def __init__(self, on_last_read: Callable[[], Any]) -> None:
        self.reads = 0
        self.on_last_read = on_last_read

    def page_count(self, request: ReadRequest) -> int:
        return RANGES

    def engines(self) -> list[Any]:
        return []

    def read(self, request: ReadRequest) -> ReadResult:
        self.reads += 1
        if self.reads == RANGES:
            self.on_last_read()
        start, _end = request.options.get("page_range", (0, RANGES))
        return ReadResult(
            markdown=f"Page {start} words.\n\n![pic](ref-{start})",
            images=[ParsedImage(ref=f"ref-{start}", data=png(start), page=start)],
        )


def cancelled_big_parse(deps: Services, kb: KnowledgeBase) -> Knowledge:
    """A page-range parse cancelled as its last range is parsed: every range's outputs are kept (spec
    §1.23) and count from the cancel on."""
    from chalicelib.operations.knowledge_changes import cancel

    deps.settings = replace(deps.settings, parse_parallel_pages=4, parse_range_pages=1)
    created: list[Knowledge] = []
    deps.replace_docreader(Reader(lambda: cancel(deps, kb.tenant_id, created[0].id)))
    created.append(upload(deps, kb, "big.pdf", scanned_pdf(1)))
    drain(deps, ("docreader",), max_batches=1000)
    row = row_of(deps, created[0].id)
    assert row.parse_status == ParseStatus.CANCELLED
    return row


def parsed_keys(files: MemoryFileStore, row: Knowledge) -> list[str]:
    return files.keys(f"{row.tenant_id}/{row.id}/parsed/")


def stores(files: MemoryFileStore, row: Knowledge) -> int:
    """What the document stores, counted from the store itself: its file, every range's Markdown and the
    tenant's images (the plan and the manifests count nothing)."""
    markdown = sum(len(files._objects[key][0]) for key in parsed_keys(files, row) if key.endswith(".md"))
    images = [key for key in files.keys(f"{row.tenant_id}/") if "/exports/" in key]
    assert len(images) == RANGES  # each range's image is stored
    return row.file_size + markdown + sum(len(files._objects[key][0]) for key in images)


def recount_operator(deps: Services, tenant_id: str) -> dict[str, Any]:
    from chalicelib.operations import admin

    return admin.storage_recount(deps, tenant_id, admin.StorageRecountQuery())


@pytest.mark.parametrize("page", [MAX_LISTED_KEYS, 7], ids=["pages-of-1000", "pages-of-7"])
def test_a_cancelled_parse_of_more_objects_than_one_listing_counts_them_all(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, monkeypatch: pytest.MonkeyPatch, page: int
) -> None:
    from chalicelib.services import stored_size

    # (pages of 7 end between a range's manifest and its Markdown: both are found all the same)
    monkeypatch.setattr(stored_size, "MAX_LISTED_KEYS", page)
    row = cancelled_big_parse(deps, kb)
    assert len(parsed_keys(files, row)) == 2 * RANGES + 1 > MAX_LISTED_KEYS
    expected = stores(files, row)
    assert row.storage_size == expected == used(deps, kb.tenant_id) > row.file_size
    answer = recount_operator(deps, kb.tenant_id)  # the operator's recount: nothing left to correct
    assert (answer["documents"], answer["corrected"], answer["skipped"]) == (1, 0, 0)
    assert row_of(deps, row.id).storage_size == expected == used(deps, kb.tenant_id)


def test_past_the_most_keys_a_recount_lists_nothing_is_written_until_a_later_recount(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.services import stored_size

    bound = stored_size.MAX_RECOUNTED_KEYS
    monkeypatch.setattr(stored_size, "MAX_RECOUNTED_KEYS", MAX_LISTED_KEYS)  # 1,041 keys are stored
    row = cancelled_big_parse(deps, kb)  # the cancel's recount, and the late range write's, are left
    assert row.storage_size == row.file_size == used(deps, kb.tenant_id)
    with pytest.raises(stored_size.RecountUnsure):
        stored_size.recount_document(deps, row.id)
    answer = recount_operator(deps, kb.tenant_id)
    assert (answer["documents"], answer["corrected"], answer["skipped"]) == (1, 0, 1)
    assert row_of(deps, row.id).storage_size == row.file_size == used(deps, kb.tenant_id)
    monkeypatch.setattr(stored_size, "MAX_RECOUNTED_KEYS", bound)  # a later recount, within the bound
    answer = recount_operator(deps, kb.tenant_id)
    assert (answer["documents"], answer["corrected"], answer["skipped"]) == (1, 1, 0)
    assert row_of(deps, row.id).storage_size == stores(files, row) == used(deps, kb.tenant_id)


def test_a_recount_whose_reads_outlast_its_time_writes_nothing_and_is_left_for_later(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recount runs in API requests (a cancel, the operator's recount), which API Gateway cuts at 28 s:
    with every key listed, a parse of thousands of ranges costs a size and a manifest read each, so the
    reads stop after RECOUNT_SECONDS and the document is skipped with nothing written."""
    from chalicelib.services import stored_size

    row = cancelled_big_parse(deps, kb)
    gone = [key for key in parsed_keys(files, row) if key.endswith(".md")][-1]
    files.delete(files.url_for(gone))  # now the stored count is off by one range's Markdown
    monkeypatch.setattr(stored_size, "RECOUNT_SECONDS", 0.0)
    before = row_of(deps, row.id).storage_size
    answer = recount_operator(deps, kb.tenant_id)
    assert (answer["documents"], answer["corrected"], answer["skipped"]) == (1, 0, 1)
    assert row_of(deps, row.id).storage_size == before
    monkeypatch.setattr(stored_size, "RECOUNT_SECONDS", 15.0)
    answer = recount_operator(deps, kb.tenant_id)
    assert (answer["documents"], answer["corrected"], answer["skipped"]) == (1, 1, 0)


def test_the_tries_after_lost_races_share_the_recounts_one_budget(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A recount whose write loses a race reads again (up to RECOUNT_TRIES): each try had a budget of its
    own, so a recount in an API request could read for four times RECOUNT_SECONDS. One budget covers them."""
    from chalicelib.services import stored_size

    row = upload(deps, kb, "notes.md", b"# Notes\n\nSome words.\n")
    drain(deps)
    real_list = MemoryFileStore.list_keys

    def slow_listing(*args: Any, **kwargs: Any) -> list[str]:
        time.sleep(0.3)
        return real_list(*args, **kwargs)

    def lost_race(*args: Any, **kwargs: Any) -> bool:
        return False  # another writer moved the row first, every time

    monkeypatch.setattr(MemoryFileStore, "list_keys", slow_listing)  # (the store the document's backend is)
    monkeypatch.setattr(deps.knowledge, "update_fields", lost_race)
    monkeypatch.setattr(stored_size, "RECOUNT_SECONDS", 0.5)
    real_get = deps.knowledge.get  # the row as each try reads it: its count off, so each try writes
    monkeypatch.setattr(
        deps.knowledge, "get", lambda knowledge_id: replace(real_get(knowledge_id), storage_size=1)
    )
    started = time.monotonic()
    with pytest.raises(stored_size.RecountUnsure):
        stored_size.recount_document(deps, row.id)
    assert time.monotonic() - started < 1.0  # two listings at most, not one a try (four: 1.2 s)
