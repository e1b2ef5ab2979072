"""Issue 12: a sliced embedding run reads each chunk once, whatever the document's size. Every slice used
to list all the document's chunks first (quadratic: 33 listings of 66,667 chunks for a 200,000-row
spreadsheet); a slice now reads only its own pages after the cursor its message carries."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from chalicelib.adapters.memory import MemoryChunkRepo, MemoryTaskQueue
from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.types import ChunkType, EnableStatus, Knowledge, KnowledgeBase, Tenant
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.services import indexing
from chalicelib.stages import embedding

from . import conftest
from .conftest import deliver, embedding_outputs, index_count

#: ~400 small chunks: at 128 texts a slice (two windows of 64), four slices
DOC = "# Ledger\n\n" + "\n\n".join(
    f"## Entry {i}\n\nCargo {i} was weighed at dock {i % 7} and signed for by clerk {i % 13}."
    for i in range(400)
)
SLICE = 128


@pytest.fixture
def kb(deps: Services, tenant: Tenant) -> KnowledgeBase:
    config = {"chunk_size": 110, "chunk_overlap": 0}
    return create_kb(deps, tenant.id, CreateKnowledgeBase(name="ledger", chunking_config=config))


@pytest.fixture
def chunk_repo(deps: Services) -> MemoryChunkRepo:
    assert isinstance(deps.chunks, MemoryChunkRepo)
    return deps.chunks


def chunked(deps: Services, kb: KnowledgeBase) -> Knowledge:
    deps.replace_embedding_model(HashingEmbedding(64))
    assert indexing.WINDOW < SLICE
    deps.settings = replace(deps.settings, embed_slice_max_texts=SLICE, embed_batch_size=16)
    return conftest.chunked(deps, kb, "ledger.md", DOC)


def embed_all(deps: Services, queue: MemoryTaskQueue) -> int:
    """Delivers the embedding queue until it is empty; returns the number of invocations."""
    invocations = 0
    while queue.waiting("embedding"):
        assert deliver(deps, "embedding")["batchItemFailures"] == []
        invocations += 1
    return invocations


def test_a_document_sliced_k_times_reads_each_chunk_once(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, chunk_repo: MemoryChunkRepo
) -> None:
    created = chunked(deps, kb)
    texts = len(chunk_repo.list(created.id))
    assert texts > 3 * SLICE
    before = chunk_repo.chunks_read
    invocations = embed_all(deps, queue)
    assert invocations == math.ceil(texts / SLICE) >= 4
    # One read of each chunk in all; listing every chunk in each slice would read texts * invocations.
    assert chunk_repo.chunks_read - before == texts
    indexed = deps.knowledge.get(created.id)
    assert indexed is not None and indexed.enable_status == EnableStatus.ENABLED
    assert indexed.chunk_count == texts and index_count(deps, kb, created.id) == texts
    done = embedding_outputs(deps, indexed)
    assert done["texts_total"] == done["entries_indexed"] == done["texts_embedded"] == texts
    assert "slices" not in done  # a few totals carried in the messages, not a map of every slice (issue 27)


def test_each_hand_over_carries_the_cursor_and_the_texts_done(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, chunk_repo: MemoryChunkRepo
) -> None:
    created = chunked(deps, kb)
    ids = sorted(c.id for c in chunk_repo.list(created.id))
    deliver(deps, "embedding")
    [body] = queue.bodies("embedding")
    assert body["offset"] == SLICE and body["cursor"] == ids[SLICE - 1]
    assert index_count(deps, kb, created.id) == SLICE
    progress = embedding_outputs(deps, created)
    assert progress["entries_indexed"] == SLICE and progress["texts_total"] == len(ids)


def test_a_redelivered_slice_rewrites_the_same_entries_and_counts_nothing_twice(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, chunk_repo: MemoryChunkRepo
) -> None:
    created = chunked(deps, kb)
    texts = len(chunk_repo.list(created.id))
    deliver(deps, "embedding")
    event = queue.receive("embedding")  # the second slice's message
    embedding.handle(deps, event, None)
    assert index_count(deps, kb, created.id) == 2 * SLICE
    embedding.handle(deps, event, None)  # at-least-once: the same slice again
    assert index_count(deps, kb, created.id) == 2 * SLICE  # the same entries, upserted
    again = embedding_outputs(deps, created)
    assert again["entries_indexed"] == 2 * SLICE
    assert again["texts_embedded"] + again["cache_hits"] == 2 * SLICE  # the slice counted once
    embed_all(deps, queue)  # both handlings handed over: the rest of the chain runs twice
    assert index_count(deps, kb, created.id) == texts
    done = embedding_outputs(deps, created)
    assert done["entries_indexed"] == texts and done["texts_embedded"] + done["cache_hits"] == texts


def test_a_hand_over_from_before_the_cursor_starts_over_without_duplicates(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, chunk_repo: MemoryChunkRepo
) -> None:
    """A message in flight across the upgrade carries an int offset into a full listing, no cursor: it
    starts over from the first chunk (entries are upserted by chunk id, vectors come from the cache)."""
    created = chunked(deps, kb)
    texts = len(chunk_repo.list(created.id))
    [body] = queue.bodies("embedding")
    queue.receive("embedding")  # take the fresh message out: an old slice message stands in for it
    queue.send_raw("embedding", {**body, "offset": 2 * SLICE})
    embed_all(deps, queue)
    indexed = deps.knowledge.get(created.id)
    assert indexed is not None and indexed.enable_status == EnableStatus.ENABLED
    assert index_count(deps, kb, created.id) == texts
    assert embedding_outputs(deps, indexed)["entries_indexed"] == texts


def test_only_the_attempts_text_chunks_are_indexed(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, chunk_repo: MemoryChunkRepo
) -> None:
    created = chunked(deps, kb)
    chunks = chunk_repo.list(created.id)
    first = chunks[0]
    stray = [
        replace(first, id=f"{created.id}-a1-p00000", chunk_type=ChunkType.PARENT_TEXT),
        replace(first, id=f"{created.id}-a2-00000", metadata={"attempt": 2}),  # another attempt's range
        replace(first, id=f"{created.id}-a1-99999", metadata={"attempt": 2}),  # its range, not its mark
    ]
    chunk_repo.put_many(stray)
    embed_all(deps, queue)
    assert index_count(deps, kb, created.id) == len(chunks)


def test_a_hand_over_on_time_mid_page_carries_on_after_the_last_window_indexed(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    chunk_repo: MemoryChunkRepo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    created = chunked(deps, kb)
    texts = len(chunk_repo.list(created.id))
    model = deps.embedding_model()
    assert isinstance(model, HashingEmbedding)
    monkeypatch.setattr(indexing, "out_of_time", lambda: True)  # every window is the slice's last
    invocations = embed_all(deps, queue)
    assert invocations == math.ceil(texts / indexing.WINDOW)
    assert sum(model.calls) == texts  # no text embedded twice, none skipped
    assert index_count(deps, kb, created.id) == texts
    assert embedding_outputs(deps, created)["texts_embedded"] == texts
