"""A large PDF's page ranges are claimed before they are parsed: a duplicate of a range's message (a second
fan-out of a duplicated first message, an at-least-once copy) run while the range is being parsed leaves it
to its holder instead of OCR-ing its pages again; a claim whose holder died (older than the docreader's
timeout) is taken over; a failed parse releases its claim so the retry parses at once. Once a reparse is
indexed, what an earlier fanned-out attempt left (plan, ranges, their images) is removed."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from typing import Any

import pytest
from page_images import scanned_pdf

from chalicelib.adapters.memory.files import MemoryFileStore
from chalicelib.adapters.memory.queues import MemoryTaskQueue
from chalicelib.adapters.storage import RoutingFileStore
from chalicelib.bootstrap import Services
from chalicelib.commands import ReparseRequest
from chalicelib.domain.errors import PermanentStageError, SpanErrorCode, TransientStageError
from chalicelib.domain.types import Knowledge, KnowledgeBase
from chalicelib.services.page_range_store import claim_range, part_name, range_key
from chalicelib.stages import docreader
from chalicelib.tasks.reparse import reparse

from .conftest import deliver, drain, upload

PAGES = 6  # three ranges of two pages
CLAIM = ".claim.json"  # a range's claim: pages-000000.claim.json
STALE = 3600  # older than any docreader invocation runs (900 s)


class CountingOcr:
    name = "fake"

    def __init__(self) -> None:
        self.calls = 0
        self.lock = threading.Lock()
        self.on_first_call: list[object] = []

    def available(self) -> bool:
        return True

    def recognize(self, image: bytes) -> str:
        with self.lock:
            self.calls += 1
            first = self.calls == 1
        if first:
            for action in self.on_first_call:
                action()  # type: ignore[operator]
        return "page words"


def small_ranges(deps: Services) -> None:
    deps.settings = replace(deps.settings, parse_parallel_pages=4, parse_range_pages=2)


def fan_out(deps: Services, kb: KnowledgeBase, ocr: object) -> str:
    small_ranges(deps)
    deps.replace_ocr_asr(ocr, None)  # type: ignore[arg-type]
    created = upload(deps, kb, "scan.pdf", scanned_pdf(PAGES))
    deliver(deps, "docreader")  # the first message fans out: one message per range
    return created.id


def test_a_copy_of_a_range_run_while_it_is_parsed_leaves_it_to_its_holder(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    ocr = CountingOcr()
    knowledge_id = fan_out(deps, kb, ocr)
    ranges = queue.receive("docreader", 3)
    [first] = [json.loads(r["body"]) for r in ranges["Records"] if json.loads(r["body"])["page_start"] == 0]
    queue.send_raw("docreader", first)  # a copy of the first range, as a second fan-out sends it

    def copy_in_another_invocation() -> None:  # while the first range's first page is OCR'd
        copy = queue.receive("docreader", 1)
        worker = threading.Thread(target=lambda: queue.settle(copy, docreader.handle(deps, copy, None)))
        worker.start()
        worker.join(timeout=20)  # a copy that parses waits for the holder's PDF reader: it times out

    ocr.on_first_call.append(copy_in_another_invocation)
    queue.settle(ranges, docreader.handle(deps, ranges, None))
    drain(deps)
    assert ocr.calls == PAGES
    assert deps.knowledge.get(knowledge_id).parse_status.value != "failed"


def test_a_stale_claim_is_taken_over(deps: Services, kb: KnowledgeBase, files: MemoryFileStore) -> None:
    ocr = CountingOcr()
    knowledge_id = fan_out(deps, kb, ocr)
    knowledge = deps.knowledge.get(knowledge_id)
    died = {"token": "a-parse-that-died", "claimed_at": time.time() - STALE}
    files.save(range_key(knowledge, part_name(0, CLAIM)), json.dumps(died).encode())
    drain(deps)
    assert ocr.calls == PAGES
    assert deps.chunks.list(knowledge_id)
    assert not [key for key in files.keys(f"{kb.tenant_id}/") if ".ranges/" in key]


def test_a_failed_parse_releases_its_claim(deps: Services, kb: KnowledgeBase, files: MemoryFileStore) -> None:
    ocr = CountingOcr()

    def fail_once() -> None:
        raise TransientStageError(
            "Textract failed (ThrottlingException).", code=SpanErrorCode.DOCREADER_UNAVAILABLE
        )

    ocr.on_first_call.append(fail_once)
    knowledge_id = fan_out(deps, kb, ocr)
    deliver(deps, "docreader")  # the ranges: the first one fails and is retried
    assert not [key for key in files.keys(f"{kb.tenant_id}/") if key.endswith(CLAIM)]
    drain(deps)
    assert deps.chunks.list(knowledge_id)


class FailingOcr(CountingOcr):
    """Reads nothing (each page is kept as an image) and refuses the fifth page: the third range fails."""

    def __init__(self) -> None:
        super().__init__()
        self.fail_at = 5

    def recognize(self, image: bytes) -> str:
        super().recognize(image)
        if self.fail_at and self.calls >= self.fail_at:
            raise PermanentStageError(
                "Textract rejected the image (BadDocumentException).",
                code=SpanErrorCode.DOCREADER_PARSE_FAILED,
            )
        return "" if self.fail_at else "page words"


def test_a_failed_fanned_out_attempt_leaves_nothing_once_the_reparse_is_indexed(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore
) -> None:
    ocr = FailingOcr()
    knowledge_id = fan_out(deps, kb, ocr)
    drain(deps)
    assert deps.knowledge.get(knowledge_id).parse_status.value == "failed"
    left_by_failure = [key for key in files.keys(f"{kb.tenant_id}/") if "attempt-1" in key]
    # the failed attempt's ranges went with it; its plan stays, to find what a range still running writes
    assert left_by_failure == [f"{kb.tenant_id}/{knowledge_id}/parsed/attempt-1.ranges/plan.json"]
    ocr.fail_at = 0
    reparse(deps, kb.tenant_id, knowledge_id, ReparseRequest())
    drain(deps)
    assert deps.knowledge.get(knowledge_id).attempt == 2
    assert [key for key in files.keys(f"{kb.tenant_id}/") if "attempt-1" in key] == []


class ClaimsReadTogether:
    """The documents' store, where each of two claimants' first read of a claim waits for the other's,
    and from there they go on one after the other: the interleaving in which a claim checked, written and
    read back (no create-if-absent) lets both copies parse."""

    def __init__(self, inner: MemoryFileStore) -> None:
        self.inner = inner
        self.met = threading.Barrier(2)
        self.one_at_a_time = threading.Lock()
        self.claimant = threading.local()

    def read(self, url: str, limit: int | None = None) -> bytes:
        try:
            return self.inner.read(url, limit)
        finally:
            if url.endswith(CLAIM) and not getattr(self.claimant, "met", False):
                self.claimant.met = True
                self.met.wait(timeout=10)
                self.one_at_a_time.acquire()

    def finished(self) -> None:
        if getattr(self.claimant, "met", False):
            self.one_at_a_time.release()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def claimed_by_two_copies_at_once(
    deps: Services, knowledge: Knowledge, store: ClaimsReadTogether
) -> list[bool]:
    won: list[bool] = []

    def copy() -> None:
        try:
            won.append(claim_range(deps, knowledge, 0))
        finally:
            store.finished()

    copies = [threading.Thread(target=copy) for _ in range(2)]
    for thread in copies:
        thread.start()
    for thread in copies:
        thread.join(timeout=30)
    return sorted(won)


def fanned_out(deps: Services, kb: KnowledgeBase) -> Knowledge:
    knowledge = deps.knowledge.get(fan_out(deps, kb, CountingOcr()))
    assert knowledge is not None
    return knowledge


@pytest.mark.parametrize("earlier_claim", ["none", "stale"])
def test_of_two_copies_claiming_a_range_at_once_exactly_one_parses_it(
    deps: Services,
    kb: KnowledgeBase,
    files: MemoryFileStore,
    monkeypatch: pytest.MonkeyPatch,
    earlier_claim: str,
) -> None:
    knowledge = fanned_out(deps, kb)
    if earlier_claim == "stale":  # a parse that died: both copies take it over at once
        died = {"token": "a-parse-that-died", "claimed_at": time.time() - STALE}
        files.save(range_key(knowledge, part_name(0, CLAIM)), json.dumps(died).encode())
    store = ClaimsReadTogether(files)
    routing = deps.files
    assert isinstance(routing, RoutingFileStore)
    monkeypatch.setattr(routing, "default", store)
    assert claimed_by_two_copies_at_once(deps, knowledge, store) == [False, True]
    monkeypatch.setattr(routing, "default", files)
    assert claim_range(deps, knowledge, 0) is False  # and the winner holds it


class AnswerLost(MemoryFileStore):
    """A create-if-absent whose first answer was lost: the client's retry found its own object (412)."""

    def save_if_absent(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> bool:
        super().save_if_absent(key, data, content_type)
        return False


def test_a_claim_written_whose_answer_was_lost_is_still_this_copys(
    deps: Services, kb: KnowledgeBase, monkeypatch: pytest.MonkeyPatch
) -> None:
    knowledge = fanned_out(deps, kb)
    routing = deps.files
    assert isinstance(routing, RoutingFileStore)
    monkeypatch.setattr(routing, "default", AnswerLost())
    assert claim_range(deps, knowledge, 0) is True  # or no copy would ever parse the range
    assert claim_range(deps, knowledge, 0) is False
