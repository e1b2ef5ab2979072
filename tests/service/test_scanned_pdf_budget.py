"""A scanned PDF read at Textract's 2-4 s a page fits the parse budget, whole (up to parse_parallel_pages)
or as page ranges (found by an audit: 200 pages in one piece and 100-page ranges against a 300 s budget had
failed such scans permanently)."""

from __future__ import annotations

import time as real_time
from types import SimpleNamespace

import pytest
from page_images import scanned_pdf

import chalicelib.parsers.base as base
from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, ParseStatus

from .conftest import deliver, upload

#: the slowest a scanned page takes (settings.py: "about 2-4 s")
SECONDS_PER_SCANNED_PAGE = 4.0


class SlowOcr:
    """An OCR engine that takes `seconds` a page on the parse budget's clock (no real sleep)."""

    name = "textract"

    def __init__(self, clock: dict[str, float], seconds: float) -> None:
        self.clock, self.seconds, self.pages = clock, seconds, 0

    def available(self) -> bool:
        return True

    def recognize(self, image: bytes) -> str:
        self.pages += 1
        self.clock["offset"] += self.seconds
        return f"scanned words of page {self.pages}"


@pytest.mark.parametrize("extra_pages", [0, 1], ids=["whole", "in ranges"])
def test_a_scan_at_four_seconds_a_page_is_read_whole_or_in_ranges(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    monkeypatch: pytest.MonkeyPatch,
    extra_pages: int,
) -> None:
    pages = deps.settings.parse_parallel_pages + extra_pages
    clock = {"offset": 0.0}
    monkeypatch.setattr(
        base, "time", SimpleNamespace(monotonic=lambda: real_time.monotonic() + clock["offset"])
    )
    ocr = SlowOcr(clock, SECONDS_PER_SCANNED_PAGE)
    deps.replace_ocr_asr(ocr, None)
    created = upload(deps, kb, "scan.pdf", scanned_pdf(pages))
    for _ in range(20):
        if not queue.waiting("docreader"):
            break
        deliver(deps, "docreader")
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status != ParseStatus.FAILED, row.error_message
    assert ocr.pages == pages and queue.waiting("chunking")
