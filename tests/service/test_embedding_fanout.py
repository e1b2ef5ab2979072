"""Issue 27: a big document's embedding fans out. The first delivery plans N slices of chunk sequence
numbers and queues them at once (pointers only); the slices run in parallel, each embeds and indexes its own
chunks and releases itself on the row (a conditional counter with a per-slice marker), and the slice that
brings the count to 0 hands over to the state machine, once, however often a message is delivered."""

from __future__ import annotations

import json
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryChunkRepo, MemoryTaskQueue, MemoryWorkflow
from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.ids import execution_name
from chalicelib.domain.types import ChunkType, EnableStatus, Knowledge, KnowledgeBase, Tenant
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.stages import embedding

from . import conftest
from .conftest import deliver, embedding_outputs, failed_ids, index_count

#: ~400 small chunks
DOC = "# Ledger\n\n" + "\n\n".join(
    f"## Entry {i}\n\nCargo {i} was weighed at dock {i % 7} and signed for by clerk {i % 13}."
    for i in range(400)
)
SLICE = 64
#: what a slice message may carry: pointers and a few counts, never a text
MESSAGE_KEYS = {
    "tenant_id",
    "knowledge_id",
    "attempt",
    "offset",
    "plan",
    "slices",
    "slice_index",
    "slice_size",
    "slice_stride",
    "counts",
}


class MeetingModel(HashingEmbedding):
    """An embedding model whose first `parties` calls wait for each other: they return only when that many
    slices are embedding at the same time (a broken barrier fails the test instead of hanging it)."""

    def __init__(self, parties: int) -> None:
        super().__init__(64)
        self.barrier = threading.Barrier(parties, timeout=20)
        self.meetings = 0
        self.lock = threading.Lock()

    def embed(self, texts: list[str]) -> Any:
        with self.lock:
            self.meetings += 1
            wait = self.meetings <= self.barrier.parties
        if wait:
            self.barrier.wait()
        return super().embed(texts)


@pytest.fixture
def kb(deps: Services, tenant: Tenant) -> KnowledgeBase:
    config = {"chunk_size": 110, "chunk_overlap": 0}
    return create_kb(deps, tenant.id, CreateKnowledgeBase(name="ledger", chunking_config=config))


@pytest.fixture
def chunk_repo(deps: Services) -> MemoryChunkRepo:
    assert isinstance(deps.chunks, MemoryChunkRepo)
    return deps.chunks


def chunked(deps: Services, kb: KnowledgeBase, *, slice_texts: int = SLICE, parallel: int = 100) -> Knowledge:
    if not isinstance(deps.embedding_model(), HashingEmbedding):
        deps.replace_embedding_model(HashingEmbedding(64))
    deps.settings = replace(
        deps.settings,
        embed_fanout_texts=slice_texts,
        embed_fanout_parallel=parallel,
        embed_batch_size=16,
    )
    return conftest.chunked(deps, kb, "ledger.md", DOC)


def texts_of(chunk_repo: MemoryChunkRepo, knowledge: Knowledge) -> int:
    return sum(1 for c in chunk_repo.list(knowledge.id) if c.chunk_type == ChunkType.TEXT)


def run_all(deps: Services, queue: MemoryTaskQueue) -> None:
    while queue.waiting("embedding"):
        assert deliver(deps, "embedding")["batchItemFailures"] == []


def test_a_big_documents_slices_are_queued_at_once_run_concurrently_and_settle_once(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    chunk_repo: MemoryChunkRepo,
) -> None:
    model = MeetingModel(parties=4)
    deps.replace_embedding_model(model)
    created = chunked(deps, kb)
    texts = texts_of(chunk_repo, created)
    [planning] = queue.bodies("embedding")
    deliver(deps, "embedding")  # the plan: every slice queued at once
    bodies = queue.bodies("embedding")
    slices = math.ceil(texts / SLICE)
    assert slices >= 6 and len(bodies) == slices
    assert sorted(b["slice_index"] for b in bodies) == list(range(slices))
    assert all(set(b) <= MESSAGE_KEYS and b["slices"] == slices for b in bodies)
    events = [queue.receive("embedding", 1) for _ in range(slices)]
    *first, last = events

    # every slice but the last from several threads at once (four of them meet inside the model), a
    # duplicate of one of them among them
    with ThreadPoolExecutor(max_workers=len(first) + 1) as pool:
        answers = [pool.submit(embedding.handle, deps, e, None) for e in [*first, first[0]]]
        assert all(a.result()["batchItemFailures"] == [] for a in answers)
    assert workflow.start_calls == []  # one slice is still out: nothing handed over
    row = deps.knowledge.get(created.id)
    assert row is not None and row.embed_slices_pending == 1 and row.enable_status == EnableStatus.DISABLED
    progress = embedding_outputs(deps, created)
    assert progress["slices_done"] == slices - 1 and progress["slices_total"] == slices
    assert 0 < progress["entries_indexed"] < texts == progress["texts_total"]

    embedding.handle(deps, last, None)  # the last slice hands over
    embedding.handle(deps, last, None)  # a redelivery of it
    embedding.handle(deps, events[2], None)  # and of another
    queue.send_raw("embedding", planning)  # a second delivery of the planning message
    run_all(deps, queue)
    assert queue.waiting("embedding") == []  # every slice was released: the plan queued nothing again

    assert workflow.start_calls == [execution_name(created.id, created.attempt)]
    indexed = deps.knowledge.get(created.id)
    assert indexed is not None and indexed.enable_status == EnableStatus.ENABLED
    assert indexed.chunk_count == texts and index_count(deps, kb, created.id) == texts
    done = embedding_outputs(deps, indexed)
    assert done["entries_indexed"] == done["texts_total"] == texts
    # each slice counted once (by whichever copy released it: a concurrent copy may have found the texts
    # in the cache its twin had just filled)
    assert done["texts_embedded"] + done["cache_hits"] == texts
    assert done["slices_done"] == done["slices_total"] == slices


def test_the_embedding_span_does_not_grow_with_the_number_of_slices(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, chunk_repo: MemoryChunkRepo
) -> None:
    sizes: dict[int, int] = {}
    keys: dict[int, set[str]] = {}
    for slice_texts in (200, 16):
        created = chunked(deps, kb, slice_texts=slice_texts)
        run_all(deps, queue)
        span = deps.spans.get(created.id, created.attempt, "embedding")
        assert span is not None
        slices = span.outputs["slices_total"]
        assert span.outputs["entries_indexed"] == texts_of(chunk_repo, created)
        sizes[slices] = len(json.dumps(span.outputs))
        keys[slices] = set(span.outputs)
        deps.knowledge.delete(created.id)
        deps.chunks.delete_all(created.id)
    few, many = sorted(sizes)
    assert many >= 10 * few
    assert keys[few] == keys[many]
    assert sizes[many] - sizes[few] <= 8  # a digit or two, never a slice's worth


def test_a_big_document_never_has_more_than_its_parallel_slices_queued(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    """Fairness: a big document's slices queue `embed_fanout_parallel` at a time, each finished one
    queueing the next, so other documents' messages get in between; and the document holds one pipeline
    lease, however many slices run."""
    created = chunked(deps, kb, parallel=2)

    def leased() -> set[str]:
        return {place.knowledge_id for place in deps.tenants.pipeline_door(created.tenant_id).live(0)}

    assert leased() == {created.id}  # one lease, from the docreader's door
    deliver(deps, "embedding")
    assert [b["slice_index"] for b in queue.bodies("embedding")] == [0, 1]
    seen = []
    while queue.waiting("embedding"):
        waiting = queue.bodies("embedding")
        assert len(waiting) <= 2
        seen.append(waiting[0]["slice_index"])
        assert embedding.handle(deps, queue.receive("embedding", 1), None)["batchItemFailures"] == []
        assert leased() <= {created.id}  # the slices hold the document's one lease, no more
    assert seen == list(range(len(seen))) and len(seen) >= 6
    assert workflow.start_calls == [execution_name(created.id, created.attempt)]
    assert leased() == set()  # given back when the document was indexed


@pytest.mark.parametrize(("before", "after"), [(2, 5), (5, 2)])
def test_a_change_of_the_parallel_setting_mid_fan_out_neither_skips_nor_strands_a_slice(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    chunk_repo: MemoryChunkRepo,
    before: int,
    after: int,
) -> None:
    """A stack update (the `EmbedFanoutParallel` parameter) lands while a document is fanned out: each slice
    queues the next by the stride its planner used, so every slice runs and the document settles once."""
    created = chunked(deps, kb, parallel=before)
    deliver(deps, "embedding")  # planned with `before` slices in flight
    assert [b["slice_stride"] for b in queue.bodies("embedding")] == [before] * before
    deps.settings = replace(deps.settings, embed_fanout_parallel=after)
    ran = []
    while queue.waiting("embedding"):
        ran.append(queue.bodies("embedding")[0]["slice_index"])
        assert embedding.handle(deps, queue.receive("embedding", 1), None)["batchItemFailures"] == []
    slices = math.ceil(texts_of(chunk_repo, created) / SLICE)
    assert sorted(ran) == list(range(slices))
    assert index_count(deps, kb, created.id) == texts_of(chunk_repo, created)
    assert workflow.start_calls == [execution_name(created.id, created.attempt)]


def test_a_slice_that_hands_over_on_time_counts_its_texts_once(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, chunk_repo: MemoryChunkRepo
) -> None:
    created = chunked(deps, kb, slice_texts=128)
    deps.settings = replace(deps.settings, embed_slice_max_texts=64)  # each slice in two invocations
    deliver(deps, "embedding")
    slices = len(queue.bodies("embedding"))
    deliver(deps, "embedding")
    continued = [b for b in queue.bodies("embedding") if b.get("offset")]
    assert continued and all(b["counts"]["entries_indexed"] <= 64 for b in continued)
    event = queue.receive("embedding", 1)
    embedding.handle(deps, event, None)
    embedding.handle(deps, event, None)  # a redelivered hand-over
    run_all(deps, queue)
    texts = texts_of(chunk_repo, created)
    assert index_count(deps, kb, created.id) == texts
    done = embedding_outputs(deps, created)
    assert done["entries_indexed"] == texts and done["slices_done"] == slices
    assert done["texts_embedded"] + done["cache_hits"] == texts


def test_a_small_document_keeps_the_single_chain(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    created = chunked(deps, kb, slice_texts=10_000)
    deliver(deps, "embedding")
    assert queue.waiting("embedding") == []
    row = deps.knowledge.get(created.id)
    assert row is not None and row.embed_plan == 0 and row.enable_status == EnableStatus.ENABLED
    assert "slices_total" not in embedding_outputs(deps, created)
    assert len(workflow.start_calls) == 1


def test_slices_of_a_superseded_attempt_never_settle_the_new_one(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    chunk_repo: MemoryChunkRepo,
) -> None:
    created = chunked(deps, kb)
    deliver(deps, "embedding")
    old = [queue.receive("embedding", 1) for _ in range(len(queue.bodies("embedding")))]
    embedding.handle(deps, old[0], None)
    deps.knowledge.reset_for_reparse(created.id, None)  # a reparse: attempt 2
    for event in old[1:]:
        assert embedding.handle(deps, event, None)["batchItemFailures"] == []
    assert workflow.start_calls == []
    row = deps.knowledge.get(created.id)
    assert row is not None and row.attempt == 2 and row.enable_status == EnableStatus.DISABLED
    assert row.embed_plan == 0 or row.embed_plan < 2000  # the old plan is no plan of attempt 2


def test_a_slice_that_dies_mid_hand_over_is_handed_over_by_its_redelivery(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    chunk_repo: MemoryChunkRepo,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The last slice released the count and died before the state machine started (a Lambda timeout):
    its redelivery finds the count at 0, not handed over, and hands over itself; later duplicates find the
    hand-over recorded and do nothing."""
    created = chunked(deps, kb)
    deliver(deps, "embedding")
    events = [queue.receive("embedding", 1) for _ in range(len(queue.bodies("embedding")))]
    for event in events[:-1]:
        embedding.handle(deps, event, None)
    start = workflow.start
    died: list[str] = []

    def dies_once(name: str, payload: Any) -> Any:
        if not died:
            died.append(name)
            raise TimeoutError("the Lambda ran out of time")
        return start(name, payload)

    monkeypatch.setattr(workflow, "start", dies_once)
    # the whole batch failed: SQS delivers it again
    assert len(failed_ids(embedding.handle(deps, events[-1], None))) == len(events[-1]["Records"])
    row = deps.knowledge.get(created.id)
    assert row is not None and row.embed_slices_pending == 0 and not workflow.executions
    embedding.handle(deps, events[-1], None)  # the redelivery hands over
    embedding.handle(deps, events[0], None)  # a late duplicate of another slice: nothing
    assert list(workflow.executions) == [execution_name(created.id, created.attempt)]
    assert workflow.start_calls == list(workflow.executions)
    row = deps.knowledge.get(created.id)
    assert row is not None and row.embed_slices_pending == -1 and row.enable_status == EnableStatus.ENABLED
    assert index_count(deps, kb, created.id) == texts_of(chunk_repo, created)
    done = embedding_outputs(deps, created)
    assert done["entries_indexed"] == done["texts_total"] == texts_of(chunk_repo, created)


def test_the_last_slice_again_after_a_hand_over_that_died_does_not_enable_a_disabled_document(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The last slice marked the row indexed and died before the state machine started; a person disabled
    the document meanwhile: the slice delivered again starts the machine and leaves the switch alone."""
    from chalicelib.domain.types import EnableStatus as Switch

    created = chunked(deps, kb)
    deliver(deps, "embedding")  # the plan
    *first, last = [queue.receive("embedding", 1) for _ in range(len(queue.waiting("embedding")))]
    for event in first:
        queue.settle(event, embedding.handle(deps, event, None))
    started = workflow.start

    def dies(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("the Lambda died here")

    monkeypatch.setattr(workflow, "start", dies)
    assert len(failed_ids(embedding.handle(deps, last, None))) == len(last["Records"])
    deps.knowledge.update_fields(created.id, {"enable_status": Switch.DISABLED})
    monkeypatch.setattr(workflow, "start", started)
    assert embedding.handle(deps, last, None)["batchItemFailures"] == []
    row = deps.knowledge.get(created.id)
    assert row is not None and row.enable_status == Switch.DISABLED
    assert workflow.start_calls == [execution_name(created.id, created.attempt)]
