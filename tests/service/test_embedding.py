"""The embedding stage on the fakes: checkpoints, throttling, hand-over, rollback and one execution per
attempt (issue 5's rules, without moto)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import pytest

from chalicelib.adapters.memory import (
    InstantSleep,
    MemoryEmbeddingCache,
    MemoryFileStore,
    MemoryKnowledgeRepo,
    MemoryTaskQueue,
    MemoryWorkflow,
)
from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.commands import CreateKnowledgeBase, ReparseRequest, SearchRequest
from chalicelib.domain.errors import SpanErrorCode, TransientStageError
from chalicelib.domain.ids import execution_name
from chalicelib.domain.plan import planned_subtask
from chalicelib.domain.storage_keys import images_manifest_key
from chalicelib.domain.types import (
    ChunkType,
    EnableStatus,
    Knowledge,
    KnowledgeBase,
    ParseStatus,
    Stage,
    Tenant,
)
from chalicelib.operations.knowledge_bases import create_kb
from chalicelib.operations.search import hybrid_search
from chalicelib.ports import (
    IndexSpace,
    IndexUnavailable,
    IndexWriteError,
    ModelRequestError,
    ModelThrottled,
    ServiceUnreachable,
)
from chalicelib.stages import embedding
from chalicelib.tasks.reparse import reparse

from . import conftest
from .conftest import deliver, drain, embedding_outputs, failed_ids, index_count, message, span_status, upload

DOC = "# Harbour log\n\n" + "\n\n".join(
    f"## Day {i}\n\nThe pilot boat {i} left at {i} bells with lamp oil, rope and a crate of bread."
    for i in range(12)
)


@pytest.fixture
def kb(deps: Services, tenant: Tenant) -> KnowledgeBase:
    """Small chunks: the document makes a dozen, so three batches of four."""
    config = {"chunk_size": 110, "chunk_overlap": 0}
    return create_kb(deps, tenant.id, CreateKnowledgeBase(name="log", chunking_config=config))


class ThrottlingEmbedding:
    """A remote provider that answers 429 on the listed calls (a remote API cannot run here)."""

    def __init__(
        self, throttle_calls: Sequence[int] = (), retry_after: float | None = None, always: bool = False
    ):
        self.inner = HashingEmbedding(64)
        self.model_id = "fake-remote/embedding"
        self.dimensions = 64
        self.max_input_chars = 20_000
        self.throttle_calls = set(throttle_calls)
        self.retry_after = retry_after
        self.always = always
        self.calls = 0
        self.embedded: Counter[str] = Counter()

    def embed(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        if self.always or self.calls in self.throttle_calls:
            raise ModelThrottled("429 Too Many Requests", retry_after=self.retry_after)
        self.embedded.update(texts)
        return self.inner.embed(texts)


def chunked(deps: Services, kb: KnowledgeBase, text: str = DOC) -> Knowledge:
    return conftest.chunked(deps, kb, "log.md", text)


def test_the_attempt_is_indexed_enabled_and_every_batch_checkpointed(
    deps: Services,
    kb: KnowledgeBase,
    cache: MemoryEmbeddingCache,
    rows: MemoryKnowledgeRepo,
    workflow: MemoryWorkflow,
) -> None:
    created = chunked(deps, kb)
    texts = len(deps.chunks.list(created.id))
    assert texts > 8
    deliver(deps, "embedding")
    indexed = rows.get(created.id)
    assert indexed is not None and indexed.enable_status == EnableStatus.ENABLED
    assert indexed.parse_status == ParseStatus.PROCESSING  # the state machine completes it
    assert indexed.chunk_count == texts and index_count(deps, kb, created.id) == texts
    assert [len(batch) for batch in cache.writes] == [4] * (texts // 4) + ([texts % 4] if texts % 4 else [])
    assert embedding_outputs(deps, indexed)["texts_embedded"] == texts
    execution = workflow.executions[execution_name(created.id, 1)]
    assert execution.payload == {
        "knowledge_id": created.id,
        "tenant_id": kb.tenant_id,
        "attempt": 1,
        "attempt_n": "1",
        "images": [],
    }
    assert span_status(deps, indexed)["multimodal"] == "skipped"


def test_stored_images_are_handed_to_the_workflow(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, workflow: MemoryWorkflow
) -> None:
    created = chunked(deps, kb)
    deps.kbs.put(replace(kb, enrichment=replace(kb.enrichment, enable_multimodel=True)))
    manifest = [
        {"url": "mem://files/t/exports/a.png"},
        {"url": "mem://files/t/exports/b.png", "ocr_in_markdown": True},
    ]
    files.save(images_manifest_key(kb.tenant_id, created.id, 1), json.dumps(manifest).encode())
    deliver(deps, "embedding")
    # shown by no text chunk: each is bound to the first one (parent_seq, services.image_parents; looked
    # for only when the images will be described: multimodal on here)
    first = min(c.seq for c in deps.chunks.list(created.id) if c.chunk_type == ChunkType.TEXT)
    assert workflow.executions[execution_name(created.id, 1)].payload["images"] == [
        {
            "index": 0,
            "url": "mem://files/t/exports/a.png",
            "ocr_done": False,
            "original": False,
            "parent_seq": first,
        },
        {
            "index": 1,
            "url": "mem://files/t/exports/b.png",
            "ocr_done": True,
            "original": False,
            "parent_seq": first,
        },
    ]


def test_the_images_an_execution_describes_are_bounded_and_the_rest_are_named_on_the_span(
    deps: Services, kb: KnowledgeBase, files: MemoryFileStore, workflow: MemoryWorkflow
) -> None:
    """Each image rides in the execution's data (256 KB, with the plan) and costs its Map history events:
    a document's first MAX_DESCRIBED_IMAGES are described, and the span says how many were not."""
    created = chunked(deps, kb)
    count = embedding.MAX_DESCRIBED_IMAGES + 7
    manifest = [
        {"url": f"s3://weknora-files-123456789012-eu-central-1/{kb.tenant_id}/exports/{i:032x}.jpeg"}
        for i in range(count)
    ]
    files.save(images_manifest_key(kb.tenant_id, created.id, 1), json.dumps(manifest).encode())
    deliver(deps, "embedding")
    payload = workflow.executions[execution_name(created.id, 1)].payload
    assert [image["index"] for image in payload["images"]] == list(range(embedding.MAX_DESCRIBED_IMAGES))
    plan = {"subtasks": [planned_subtask(f"questions.{w}x375") for w in range(400)] * 2}  # the largest plan
    assert len(json.dumps({**payload, "plan": plan})) < 240 * 1024  # Step Functions: 256 KB of state data
    skipped = deps.spans.get(created.id, 1, "multimodal.not_described")
    assert skipped is not None and skipped.outputs["images"] == count
    assert skipped.outputs["described"] == embedding.MAX_DESCRIBED_IMAGES


def test_the_workflow_is_started_once_per_attempt_even_when_the_message_is_redelivered(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, workflow: MemoryWorkflow
) -> None:
    created = chunked(deps, kb)
    event = queue.receive("embedding")
    embedding.handle(deps, event, None)
    embedding.handle(deps, event, None)  # at-least-once: the same message again
    name = execution_name(created.id, 1)
    assert workflow.start_calls == [name] and list(workflow.executions) == [name]  # it runs: not again
    assert index_count(deps, kb, created.id) == len(deps.chunks.list(created.id))  # no duplicate vectors

    reparse(deps, kb.tenant_id, created.id, ReparseRequest())
    drain(deps)
    assert list(workflow.executions) == [name, execution_name(created.id, 2)]  # one per attempt


def test_a_short_throttle_is_backed_off_inside_the_stage(
    deps: Services, kb: KnowledgeBase, sleeps: InstantSleep, rows: MemoryKnowledgeRepo
) -> None:
    model = ThrottlingEmbedding(throttle_calls=(2, 3))
    deps.replace_embedding_model(model)
    created = chunked(deps, kb)
    response = deliver(deps, "embedding")
    assert response["batchItemFailures"] == []
    assert len(sleeps.waits) == 2  # one backoff per 429
    assert max(model.embedded.values()) == 1  # no text was embedded twice
    indexed = rows.get(created.id)
    assert indexed is not None and indexed.enable_status == EnableStatus.ENABLED


def test_a_long_throttle_defers_the_stage_without_spending_a_try_and_resumes_from_the_checkpoint(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, rows: MemoryKnowledgeRepo
) -> None:
    model = ThrottlingEmbedding(throttle_calls=(3,), retry_after=120.0)
    deps.replace_embedding_model(model)
    created = chunked(deps, kb)
    texts = len(deps.chunks.list(created.id))

    response = deliver(deps, "embedding")
    assert response["batchItemFailures"] == []  # not a failed try
    deferred = queue.waiting("embedding")
    assert len(deferred) == 1 and deferred[0].delay_seconds == 120 and deferred[0].receive_count == 0
    assert deferred[0].json()["deferrals"] == 1
    current = rows.get(created.id)
    assert (
        current is not None and current.parse_status == ParseStatus.PROCESSING and current.error_message == ""
    )

    deliver(deps, "embedding")
    assert max(model.embedded.values()) == 1 and sum(model.embedded.values()) == texts
    outputs = embedding_outputs(deps, created)
    assert outputs["cache_hits"] == 8 and outputs["texts_embedded"] == texts - 8  # two batches were kept


def test_a_provider_throttling_past_the_deferral_budget_fails_on_the_last_try(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, rows: MemoryKnowledgeRepo
) -> None:
    deps.settings = replace(deps.settings, max_throttle_deferrals=1, max_defer_seconds=5)
    deps.replace_embedding_model(ThrottlingEmbedding(always=True, retry_after=120.0))
    created = chunked(deps, kb)
    deliver(deps, "embedding")
    assert [m.delay_seconds for m in queue.waiting("embedding")] == [5]  # capped by max_defer_seconds
    for receive in range(1, 4):
        assert len(failed_ids(deliver(deps, "embedding"))) == 1, receive
        current = rows.get(created.id)
        assert current is not None and current.parse_status == ParseStatus.PROCESSING
    deliver(deps, "embedding")
    failed = rows.get(created.id)
    assert failed is not None and failed.parse_status == ParseStatus.FAILED
    assert failed.error_code == SpanErrorCode.EMBEDDING_RATE_LIMIT
    assert "still throttled after 1 deferrals" in failed.error_message
    assert len(queue.dead_letters("embedding")) == 1


class BrokenIndex:
    """An index that accepts deletes but fails every write with `error` (by default: it is unavailable)."""

    engine_name = "broken"

    def __init__(self, inner: Any, error: Exception | None = None):
        self.inner = inner
        self.writes = 0
        self.error = error or IndexUnavailable("index busy (HTTP 503)")

    def batch_index(self, space: Any, entries: Any) -> None:
        self.writes += 1
        raise self.error

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def chunked_over(deps: Services, kb: KnowledgeBase, broken: BrokenIndex) -> tuple[BrokenIndex, Knowledge]:
    """A document chunked on the real index, then `broken` put in its place for the embedding stage."""
    created = chunked(deps, kb)
    deps.replace_engine(broken)  # type: ignore[arg-type]
    return broken, created


def test_an_index_that_fails_for_good_leaves_no_orphan_chunks_or_vectors(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo, sleeps: InstantSleep
) -> None:
    broken, created = chunked_over(deps, kb, BrokenIndex(deps.engine()))
    real = broken.inner
    for _ in range(4):
        deliver(deps, "embedding")
    failed = rows.get(created.id)
    assert failed is not None and failed.parse_status == ParseStatus.FAILED
    assert failed.error_code == SpanErrorCode.VECTORSTORE_WRITE_FAILED
    attempts = deps.settings.index_write_attempts
    assert broken.writes == 4 * attempts  # four tries, each with quick retries
    assert sleeps.waits == [0.2 * 2**i for i in range(attempts - 1)] * 4
    assert deps.chunks.list(created.id) == []
    assert real.count(IndexSpace.of(deps.embedding_model()), kb.id, created.id) == 0
    assert span_status(deps, failed)["embedding"] == "failed"


def test_an_index_that_refuses_the_entries_fails_the_document_at_once(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo, sleeps: InstantSleep
) -> None:
    refused = IndexWriteError("bulk: 1 of 2 actions failed; first index c1: 400 ...")
    broken, created = chunked_over(deps, kb, BrokenIndex(deps.engine(), refused))
    real = broken.inner
    assert failed_ids(deliver(deps, "embedding")) == []  # permanent: nothing comes back to retry
    failed = rows.get(created.id)
    assert failed is not None and failed.parse_status == ParseStatus.FAILED
    assert failed.error_code == SpanErrorCode.VECTORSTORE_WRITE_FAILED
    assert failed.error_message.startswith("the index refused") and "400" not in failed.error_message
    assert broken.writes == 1 and sleeps.waits == []
    assert deps.chunks.list(created.id) == []
    assert real.count(IndexSpace.of(deps.embedding_model()), kb.id, created.id) == 0


def test_a_bug_in_the_engine_is_not_retried_as_an_outage(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo, sleeps: InstantSleep
) -> None:
    broken, created = chunked_over(deps, kb, BrokenIndex(deps.engine(), TypeError("a bug, not an outage")))
    for _ in range(4):
        deliver(deps, "embedding")
    failed = rows.get(created.id)
    assert failed is not None and failed.parse_status == ParseStatus.FAILED
    assert failed.error_code == SpanErrorCode.UNKNOWN and "TypeError" in failed.error_message
    assert broken.writes == 4 and sleeps.waits == []  # one write a delivery: no quick retries
    assert deps.chunks.list(created.id) == []


def test_a_rejected_request_fails_at_once(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo
) -> None:
    class Rejecting(ThrottlingEmbedding):
        def embed(self, texts: Sequence[str]) -> Any:
            raise ModelRequestError("input too long", status=400)

    deps.replace_embedding_model(Rejecting())
    created = chunked(deps, kb)
    assert failed_ids(deliver(deps, "embedding")) == []
    failed = rows.get(created.id)
    assert failed is not None and failed.error_code == SpanErrorCode.EMBEDDING_PROVIDER_FAIL
    assert deps.chunks.list(created.id) == []  # rolled back


@dataclass
class LambdaContext:
    remaining_ms: int

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


def test_a_stage_near_its_lambda_deadline_hands_over_without_spending_a_try(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, rows: MemoryKnowledgeRepo
) -> None:
    model = HashingEmbedding(64)
    deps.replace_embedding_model(model)
    created = chunked(deps, kb)
    batches = -(-len(deps.chunks.list(created.id)) // 4)
    almost_out = LambdaContext(remaining_ms=1000)  # inside the hand-over margin from the start
    for _ in range(batches):
        response = queue.deliver("embedding", embedding.handle, deps, almost_out)
        assert response["batchItemFailures"] == []
    assert queue.waiting("embedding") == []
    assert model.calls == [4] * (batches - 1) + [model.calls[-1]]  # one batch per invocation, none twice
    indexed = rows.get(created.id)
    assert (
        indexed is not None and indexed.enable_status == EnableStatus.ENABLED and indexed.error_message == ""
    )


def test_a_reparse_of_unchanged_text_makes_no_embedding_calls(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo
) -> None:
    model = HashingEmbedding(64)
    deps.replace_embedding_model(model)
    created = chunked(deps, kb)
    deliver(deps, "embedding")
    calls = len(model.calls)
    reparse(deps, kb.tenant_id, created.id, ReparseRequest())
    drain(deps)
    assert len(model.calls) == calls
    again = rows.get(created.id)
    assert again is not None and again.attempt == 2
    outputs = embedding_outputs(deps, again)
    assert outputs["texts_embedded"] == 0 and outputs["cache_hits"] == again.chunk_count


@pytest.mark.parametrize("query", ["pilot boat lamp oil", "crate of bread"])
def test_an_indexed_document_is_found_by_hybrid_search(deps: Services, kb: KnowledgeBase, query: str) -> None:
    created = upload(deps, kb, "log.md", DOC.encode())
    drain(deps)
    hits = hybrid_search(deps, kb.tenant_id, kb.id, SearchRequest(query_text=query, match_count=3))
    assert hits and hits[0]["knowledge_id"] == created.id and hits[0]["knowledge_title"] == "log.md"


def test_embedding_progress_is_not_one_span_write_per_batch(deps: Services, kb: KnowledgeBase) -> None:
    """The heartbeat is time-based (at most every 10 s): a quick run of three batches writes the embedding
    span twice, when it begins and when it ends."""
    created = chunked(deps, kb)
    writes: list[str] = []
    real_put = deps.spans.put
    deps.spans.put = lambda span: (writes.append(span.span_id), real_put(span))[1]  # type: ignore[method-assign]
    deliver(deps, "embedding")
    assert len(deps.chunks.list(created.id)) > 8  # three batches of four
    assert writes.count("embedding") == 2


def test_search_reads_hits_and_parents_in_two_batched_reads_not_two_per_hit(
    deps: Services, tenant: Tenant
) -> None:
    config = {"chunk_size": 110, "chunk_overlap": 0, "enable_parent_child": True, "parent_chunk_size": 400}
    kb = create_kb(
        deps, tenant.id, CreateKnowledgeBase(name="pc", chunking_config={**config, "child_chunk_size": 100})
    )
    upload(deps, kb, "log.md", DOC.encode())
    drain(deps)
    reads: list[int] = []
    real_get_many = deps.chunks.get_many
    deps.chunks.get_many = lambda keys: (reads.append(len(keys)), real_get_many(keys))[1]  # type: ignore[method-assign]
    hits = hybrid_search(
        deps, kb.tenant_id, kb.id, SearchRequest(query_text="pilot boat bread", match_count=5)
    )
    # 5 hits asked, 10 read (spares for collapsed duplicates); children of one parent are one hit (its text),
    # so the 10 folded into fewer than 5 and the engine was asked deeper once (12 hits): a round is at most
    # two batched reads, hits and parents, of rows no round read before (the 2 new hits, their parents read)
    assert reads == [10, 3, 2]
    assert 2 <= len(hits) <= 5 and len({hit["content"] for hit in hits}) == len(hits)
    assert all(len(hit["content"]) > 110 for hit in hits)  # each child hit came back as its parent


def test_the_chunk_totals_are_read_once_per_invocation(deps: Services, kb: KnowledgeBase) -> None:
    """Issue 27 (the e2e bench's request count): the fan-out planner and the indexing both need the attempt's
    chunk totals from the spans; the planner's read serves both."""
    created = upload(deps, kb, "log.md", DOC.encode())
    deliver(deps, "docreader")
    deliver(deps, "chunking")
    reads: list[tuple[str, ...]] = []
    original = deps.spans.get_many

    def counted(knowledge_id: str, attempt: int, span_ids: Sequence[str]) -> Any:
        reads.append(tuple(span_ids))
        return original(knowledge_id, attempt, span_ids)

    deps.spans.get_many = counted  # type: ignore[method-assign]
    assert failed_ids(deliver(deps, "embedding")) == []
    assert deps.knowledge.get(created.id).enable_status == EnableStatus.ENABLED  # type: ignore[union-attr]
    assert reads.count(("embedding", "chunking")) == 1


def test_a_stray_copy_failing_for_good_after_the_hand_over_fails_nothing_and_takes_nothing_back(
    deps: Services, kb: KnowledgeBase, rows: MemoryKnowledgeRepo, queue: MemoryTaskQueue
) -> None:
    from chalicelib.stages.runner import run_stage

    created = chunked(deps, kb)
    deliver(deps, "embedding")  # indexed and handed over: the state machine runs on
    indexed = rows.get(created.id)
    assert indexed is not None and indexed.processed_at is not None
    chunks = deps.chunks.list(created.id)
    assert chunks

    def stray(deps: Services, _message: object) -> None:  # another copy, whose index writes kept failing
        raise TransientStageError("index write failed")

    last = queue.event("embedding", [json.dumps(message(created))], receive_count=queue.max_receives)
    run_stage(deps, Stage.EMBEDDING, last, None, stray, rollback=embedding.rollback)
    assert deps.chunks.list(created.id) == chunks
    after = rows.get(created.id)
    assert after is not None and after.parse_status == indexed.parse_status and after.error_code == ""


def test_a_hand_over_that_never_started_its_state_machine_still_fails_its_document(
    deps: Services,
    kb: KnowledgeBase,
    rows: MemoryKnowledgeRepo,
    queue: MemoryTaskQueue,
    workflow: MemoryWorkflow,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The row was marked indexed by this very message, whose hand-over then failed on every try."""
    created = chunked(deps, kb)

    def refuse(name: str, payload: Any) -> Any:
        raise ServiceUnreachable("states: 503")

    monkeypatch.setattr(workflow, "start", refuse)
    for _ in range(queue.max_receives):
        deliver(deps, "embedding")
    row = rows.get(created.id)
    assert row is not None and row.processed_at is not None and not workflow.executions
    assert row.parse_status == ParseStatus.FAILED
