"""A large PDF's page range whose parse ends after its attempt was superseded (a reparse) or failed (another
range failed meanwhile) leaves nothing behind, as a whole-document parse's late write does: nothing counts
it, and only a later attempt's indexing would otherwise find it. A cancelled attempt keeps what it wrote."""

from __future__ import annotations

import io
import random
from collections.abc import Callable
from typing import Any

from page_images import scanned_pdf
from PIL import Image

from chalicelib.adapters.memory.files import MemoryFileStore
from chalicelib.bootstrap import Services
from chalicelib.commands import ReparseRequest
from chalicelib.domain.types import KnowledgeBase, ParseStatus
from chalicelib.ports import ParsedImage, ReadRequest, ReadResult
from chalicelib.services.stored_size import remove_uncounted_outputs
from chalicelib.tasks.reparse import reparse

from .conftest import deliver, upload
from .test_page_range_claims import small_ranges

PAGES = 6  # three ranges of two pages


def png(seed: int) -> bytes:
    out = io.BytesIO()
    Image.frombytes("RGB", (150, 150), random.Random(seed).randbytes(150 * 150 * 3)).save(out, "PNG")
    return out.getvalue()


class Reader:
    """A PDF reader with an image per page; `while_reading` runs as the first range is being parsed."""

    def __init__(self) -> None:
        self.while_reading: Callable[[], Any] = lambda: None

    def page_count(self, request: ReadRequest) -> int:
        return PAGES

    def engines(self) -> list[Any]:
        return []

    def read(self, request: ReadRequest) -> ReadResult:
        start, end = request.options.get("page_range", (0, PAGES))
        if start == 0:
            self.while_reading()
        pages = range(start, end)
        return ReadResult(
            markdown="\n\n".join(f"Page {p} words.\n\n![pic](ref-{p})" for p in pages),
            images=[ParsedImage(ref=f"ref-{p}", data=png(p), page=p) for p in pages],
        )


def fanned_out(deps: Services, kb: KnowledgeBase, reader: Reader) -> str:
    small_ranges(deps)
    deps.replace_docreader(reader)
    created = upload(deps, kb, "pics.pdf", scanned_pdf(PAGES))
    deliver(deps, "docreader")  # the fan-out: the plan and a message per range
    return created.id


def attempt_one_objects(files: MemoryFileStore, tenant_id: str, knowledge_id: str) -> list[str]:
    prefix = f"{tenant_id}/{knowledge_id}/parsed/attempt-1"
    return sorted(key for key in files.keys(f"{tenant_id}/") if key.startswith(prefix))


def images(files: MemoryFileStore, tenant_id: str) -> list[str]:
    return [key for key in files.keys(f"{tenant_id}/") if "/exports/" in key]


def test_a_range_parsed_while_a_reparse_superseded_its_attempt_leaves_nothing(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore
) -> None:
    reader = Reader()
    knowledge_id = fanned_out(deps, kb, reader)
    reader.while_reading = lambda: reparse(deps, kb.tenant_id, knowledge_id, ReparseRequest())
    deliver(deps, "docreader")  # the ranges: the first one is parsed while the reparse ends its attempt
    assert deps.knowledge.get(knowledge_id).attempt == 2
    assert images(files, kb.tenant_id) == []
    # the plan stays, by which a later removal finds what a range still running writes
    assert attempt_one_objects(files, kb.tenant_id, knowledge_id) == [
        f"{kb.tenant_id}/{knowledge_id}/parsed/attempt-1.ranges/plan.json"
    ]


def fail_attempt(deps: Services, knowledge_id: str) -> None:
    """Another range failed for good meanwhile: the row fails and its outputs so far go (stages/runner)."""
    deps.knowledge.mark_failed(knowledge_id, 1, "another range failed", "docreader_parse_failed")
    remove_uncounted_outputs(deps, knowledge_id, 1)


def test_a_range_parsed_while_its_attempt_failed_leaves_nothing(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore
) -> None:
    reader = Reader()
    knowledge_id = fanned_out(deps, kb, reader)
    reader.while_reading = lambda: fail_attempt(deps, knowledge_id)
    deliver(deps, "docreader")
    assert deps.knowledge.get(knowledge_id).parse_status == ParseStatus.FAILED
    assert images(files, kb.tenant_id) == []
    assert attempt_one_objects(files, kb.tenant_id, knowledge_id) == [
        f"{kb.tenant_id}/{knowledge_id}/parsed/attempt-1.ranges/plan.json"
    ]


def test_a_range_parsed_while_its_attempt_was_cancelled_keeps_what_it_wrote(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore
) -> None:
    from chalicelib.operations.knowledge_changes import cancel

    reader = Reader()
    knowledge_id = fanned_out(deps, kb, reader)
    reader.while_reading = lambda: cancel(deps, kb.tenant_id, knowledge_id)
    deliver(deps, "docreader")
    assert deps.knowledge.get(knowledge_id).parse_status == ParseStatus.CANCELLED
    assert len(images(files, kb.tenant_id)) == 2  # the first range's two pages
    assert any(
        key.endswith("pages-000000.md") for key in attempt_one_objects(files, kb.tenant_id, knowledge_id)
    )
