"""Housekeeping audit: a row whose fan-out messages (embedding slices, PDF page ranges) still wait in a
busy queue is alive, even when the last sign of work on it (a finished slice's counters, a parsed range's
progress) was written after those messages were queued."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase, ParseStatus
from chalicelib.stages import embedding, housekeeping

from . import conftest
from .conftest import deliver

LATER = timedelta(hours=3)  # past the 2h10m threshold
DOC = "# Ledger\n\n" + "\n\n".join(
    f"## Entry {i}\n\nCargo {i} was weighed at dock {i % 7} and signed for by clerk {i % 13}."
    for i in range(200)
)


def test_a_fan_out_whose_next_slices_wait_in_a_busy_queue_is_spared(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    deps.replace_embedding_model(HashingEmbedding(64))
    deps.settings = replace(
        deps.settings, embed_fanout_texts=16, embed_fanout_parallel=2, embed_batch_size=16
    )
    created = conftest.chunked(deps, kb, "ledger.md", DOC)
    deliver(deps, "embedding")  # the plan: two chains of slices queued
    assert len(queue.bodies("embedding")) == 2
    # one slice runs: it queues the next one of its chain, then releases itself and adds its counters
    one = queue.receive("embedding", 1)
    answer = embedding.handle(deps, one, None)
    queue.settle(one, answer)
    assert answer["batchItemFailures"] == []
    assert len(queue.bodies("embedding")) == 2
    # the embedding queue is busy for hours: both chains' slices still wait in it
    report = housekeeping.sweep(deps, datetime.now(UTC) + LATER)
    assert report.recovered == []
    assert report.spared == {created.id: "its embedding message is waiting in a busy queue"}
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.PROCESSING
    queue.purge("embedding")  # the slices' messages are gone: nothing keeps the row alive any more
    assert housekeeping.sweep(deps, datetime.now(UTC) + LATER).recovered == [created.id]


def test_a_pdf_whose_other_page_ranges_wait_in_a_busy_queue_is_spared(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    from page_images import scanned_pdf

    from chalicelib.stages import docreader

    from .test_page_range_claims import CountingOcr

    deps.settings = replace(deps.settings, parse_parallel_pages=4, parse_range_pages=2)
    deps.replace_ocr_asr(CountingOcr(), None)  # type: ignore[arg-type]
    created = conftest.upload(deps, kb, "scan.pdf", scanned_pdf(6))
    deliver(deps, "docreader")  # the first message fans out: one message per range
    assert len(queue.bodies("docreader")) == 3
    # one range is parsed (its progress written after every range was queued); two still wait
    one = queue.receive("docreader", 1)
    queue.settle(one, docreader.handle(deps, one, None))
    assert len(queue.bodies("docreader")) == 2
    report = housekeeping.sweep(deps, datetime.now(UTC) + LATER)
    assert report.recovered == []
    assert report.spared == {created.id: "its docreader message is waiting in a busy queue"}
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.PROCESSING
