"""Issue 5: throttling never fails a document nor re-embeds finished batches; a failed index write rolls
back; a reparse of unchanged text costs no embedding calls.

The throttling provider below is a fake: a remote embedding API cannot run here, so a deterministic
hashing model is wrapped to answer 429s the way Bedrock or an OpenAI-compatible endpoint would.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from project_paths import corpus_bytes

from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime
from chalicelib.ports import IndexSpace, IndexUnavailable, ModelThrottled

from .conftest import Api

TEXT = corpus_bytes("debian-faq-getting-debian.md")
# Enrichment embeds one more text after the embedding stage: the document's summary chunk.
SUMMARY_TEXTS = 1


class ThrottlingEmbedding:
    """Fake remote provider: answers 429 on the calls listed in `throttle_calls`."""

    def __init__(self, throttle_calls: set[int], retry_after: float = 0.0):
        self.inner = HashingEmbedding(64)
        self.model_id = "fake-remote/embedding"
        self.dimensions = 64
        self.max_input_chars = 20_000
        self.throttle_calls = throttle_calls
        self.retry_after = retry_after
        self.calls = 0
        self.embedded: Counter[str] = Counter()

    def embed(self, texts: Sequence[str]) -> Any:
        self.calls += 1
        if self.calls in self.throttle_calls:
            raise ModelThrottled("429 Too Many Requests", retry_after=self.retry_after)
        self.embedded.update(texts)
        return self.inner.embed(texts)


def use(services: Services, model: Any, **settings: Any) -> list[float]:
    slept: list[float] = []
    services.replace_embedding_model(model)
    services.settings = replace(services.settings, embed_batch_size=4, **settings)
    services.sleeper = slept.append  # backoff waits are recorded, not slept
    return slept


def test_a_provider_that_throttles_for_a_while_does_not_fail_the_document(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    model = ThrottlingEmbedding(throttle_calls={2, 3, 4, 7})
    slept = use(services, model)
    kb = api.create_kb()
    created = api.upload(kb["id"], "faq.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)

    knowledge = api.knowledge(created["id"])
    assert knowledge["parse_status"] == "completed"
    assert len(slept) == 4  # one backoff per 429, inside the stage
    assert max(model.embedded.values()) == 1  # no text (so no batch) was embedded twice
    embedding = stage(api, created["id"], "embedding")
    assert embedding["outputs"]["texts_embedded"] == knowledge["chunk_count"]
    assert sum(model.embedded.values()) == knowledge["chunk_count"] + SUMMARY_TEXTS


def test_a_long_throttle_defers_the_stage_and_resumes_from_the_checkpoint(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """A Retry-After longer than the backoff ceiling puts the message back with a delay (not a failed
    try); the retried stage finds the finished batches in the cache and embeds only the rest."""
    model = ThrottlingEmbedding(throttle_calls={3}, retry_after=120.0)
    use(services, model, max_defer_seconds=1)
    kb = api.create_kb()
    created = api.upload(kb["id"], "faq.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)

    knowledge = api.knowledge(created["id"])
    assert knowledge["parse_status"] == "completed"
    assert max(model.embedded.values()) == 1
    assert sum(model.embedded.values()) == knowledge["chunk_count"] + SUMMARY_TEXTS
    outputs = stage(api, created["id"], "embedding")["outputs"]
    assert outputs["cache_hits"] == 8  # the two batches finished before the throttle were checkpointed
    assert outputs["texts_embedded"] == knowledge["chunk_count"] - 8


def test_reparse_of_an_unchanged_document_makes_no_embedding_calls(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    model = HashingEmbedding(64)  # records every call in `calls`
    use(services, model)
    kb = api.create_kb()
    created = api.upload(kb["id"], "faq.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)
    first_calls = len(model.calls)
    assert first_calls > 0

    assert api.post(f"/knowledge/{created['id']}/reparse").status_code == 200
    runtime.drain(timeout=180)
    knowledge = api.knowledge(created["id"])
    assert knowledge["parse_status"] == "completed" and knowledge["attempt"] == 2
    assert len(model.calls) == first_calls  # zero new calls
    outputs = stage(api, created["id"], "embedding")["outputs"]
    assert outputs["texts_embedded"] == 0 and outputs["cache_hits"] == knowledge["chunk_count"]


class BrokenIndex:
    """Fault injection: an index that accepts deletes but refuses every write."""

    engine_name = "broken"

    def __init__(self, inner: Any):
        self.inner = inner
        self.writes = 0

    def batch_index(self, space: Any, entries: Any) -> None:
        self.writes += 1
        raise IndexUnavailable("index busy (HTTP 503)")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_an_index_that_fails_for_good_rolls_back_and_fails_with_the_code(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    broken = BrokenIndex(services.engine())
    services.replace_engine(broken)
    use(services, HashingEmbedding(64))
    kb = api.create_kb()
    created = api.upload(kb["id"], "faq.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)

    knowledge = api.knowledge(created["id"])
    assert knowledge["parse_status"] == "failed"
    assert knowledge["error_code"] == "vectorstore_write_failed"
    assert broken.writes == 4 * services.settings.index_write_attempts  # 4 tries, each with quick retries
    assert services.chunks.list(created["id"]) == []  # no orphan chunks
    space = IndexSpace.of(services.embedding_model(""))
    assert broken.inner.count(space, kb["id"], created["id"]) == 0  # no orphan vectors
    assert stage(api, created["id"], "embedding")["error_code"] == "vectorstore_write_failed"


def stage(api: Api, knowledge_id: str, name: str) -> dict[str, Any]:
    trace = api.get(f"/knowledge/{knowledge_id}/spans").json_body["data"]["trace"]
    return next(s for s in trace if s["span_id"] == name)


def test_a_stage_near_its_lambda_timeout_hands_over_to_a_fresh_invocation(
    api: Api, runtime: LocalRuntime, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A document too big for one invocation: every invocation embeds one window and then finds itself out
    of time; it checkpoints, re-enqueues itself and the next one carries on — no try is spent."""
    from chalicelib.services import indexing

    model = HashingEmbedding(64)
    use(services, model)
    monkeypatch.setattr(indexing, "out_of_time", lambda: True)
    kb = api.create_kb()
    created = api.upload(kb["id"], "faq.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)

    knowledge = api.knowledge(created["id"])
    assert knowledge["parse_status"] == "completed"
    batches = -(-knowledge["chunk_count"] // 4)
    # one window per invocation, no text embedded twice; then the summary chunk
    assert len(model.calls) == batches + SUMMARY_TEXTS
    assert knowledge["error_message"] == ""


def test_the_local_embedding_queue_runs_two_invocations_per_model_worker(runtime: LocalRuntime) -> None:
    """Between model calls an invocation waits on the tables; a second one keeps the worker busy."""
    from chalicelib.local.runtime import EMBEDDING_HANDLER

    assert runtime.poller(EMBEDDING_HANDLER).concurrency == 2 * runtime.embed_workers
