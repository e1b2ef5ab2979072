"""Service-level tests: the use cases and stages on the in-memory adapters (no moto, no network).

Messages travel through the fake queue as the SQS events Lambda hands a stage's `handle`, so the
retry, redrive and partial-batch rules are the real runner's; only the state machine is not run (its
tasks are driven by hand, as it would send them).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.adapters.memory import (
    InstantSleep,
    MemoryEmbeddingCache,
    MemoryFileStore,
    MemoryKnowledgeRepo,
    MemoryTaskQueue,
    MemoryWorkflow,
    ScriptedUrlImporter,
)
from chalicelib.adapters.storage import RoutingFileStore
from chalicelib.bootstrap import Services, memory_deps, set_deps
from chalicelib.commands import CreateKnowledgeBase
from chalicelib.domain.types import Knowledge, KnowledgeBase, Tenant
from chalicelib.operations.tenants import create_tenant_with_key
from chalicelib.ports import IndexSpace, ReadRequest, ReadResult

from .faq_support import CountingEmbedding, faq_kb_named

# Use cases and stages are imported where they are used, not here: they import the Powertools logger, and
# a logger built while pytest loads conftests (stdout not yet captured) is later taken over by Chalice's
# own logging set-up when the e2e tests import the app (same logger name), silencing it for later tests.

TEXT = (
    b"# Lighthouses\n\nThe keeper logs the weather at dawn and at dusk, and trims the wick at noon.\n\n"
    b"## Fog\n\nIn fog the horn sounds twice a minute until the lamp is visible from the harbour.\n\n"
    b"## Supplies\n\nOil, wicks and bread arrive by boat on the first Monday of every month.\n"
)
MAIN_STAGES = ("docreader", "chunking", "embedding")
Handler = Callable[[Any, dict[str, Any], Any], dict[str, Any]]


def stage_handler(queue_name: str) -> Handler:
    from chalicelib import stages

    handler: Handler = getattr(stages, queue_name).handle
    return handler


@pytest.fixture
def deps(tmp_path: Path) -> Iterator[Services]:
    services = memory_deps(index_dir=tmp_path / "index")
    yield services
    for engine in services._engines.values():
        engine.close()  # type: ignore[attr-defined]


def _fake(value: Any, kind: type[Any]) -> Any:
    assert isinstance(value, kind), f"expected {kind.__name__}, got {type(value).__name__}"
    return value


@pytest.fixture
def queue(deps: Services) -> MemoryTaskQueue:
    return _fake(deps.queue, MemoryTaskQueue)  # type: ignore[no-any-return]


@pytest.fixture
def workflow(deps: Services) -> MemoryWorkflow:
    return _fake(deps.workflow, MemoryWorkflow)  # type: ignore[no-any-return]


@pytest.fixture
def files(deps: Services) -> MemoryFileStore:
    return _fake(_fake(deps.files, RoutingFileStore).default, MemoryFileStore)  # type: ignore[no-any-return]


@pytest.fixture
def inbox(deps: Services) -> MemoryFileStore:
    return _fake(deps.inbox, MemoryFileStore)  # type: ignore[no-any-return]


@pytest.fixture
def rows(deps: Services) -> MemoryKnowledgeRepo:
    return _fake(deps.knowledge, MemoryKnowledgeRepo)  # type: ignore[no-any-return]


@pytest.fixture
def cache(deps: Services) -> MemoryEmbeddingCache:
    return _fake(deps.embedding_cache(), MemoryEmbeddingCache)  # type: ignore[no-any-return]


@pytest.fixture
def sleeps(deps: Services) -> InstantSleep:
    return _fake(deps.sleeper, InstantSleep)  # type: ignore[no-any-return]


@pytest.fixture
def urls(deps: Services) -> ScriptedUrlImporter:
    return _fake(deps.urls, ScriptedUrlImporter)  # type: ignore[no-any-return]


@pytest.fixture
def tenant(deps: Services) -> Tenant:
    created, _ = create_tenant_with_key(deps, "acme")
    return created


@pytest.fixture
def kb(deps: Services, tenant: Tenant) -> KnowledgeBase:
    from chalicelib.operations.knowledge_bases import create_kb

    return create_kb(deps, tenant.id, CreateKnowledgeBase(name="handbook"))


@pytest.fixture
def model(deps: Services) -> CountingEmbedding:
    """The embedding model, replaced by one that counts what it embeds."""
    counting = CountingEmbedding()
    deps.replace_embedding_model(counting)
    return counting


@pytest.fixture
def faq_kb(deps: Services, tenant: Tenant, model: CountingEmbedding) -> KnowledgeBase:
    return faq_kb_named(deps, tenant, "faq")


def upload(deps: Services, kb: KnowledgeBase, name: str = "notes.md", data: bytes = TEXT) -> Knowledge:
    from chalicelib.operations.create import FileUpload, create_from_file

    return create_from_file(deps, kb.tenant_id, kb.id, FileUpload(data=data, file_name=name))


def deliver(deps: Services, queue_name: str) -> dict[str, Any]:
    """One batch of a main stage queue through its handler."""
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    return queue.deliver(queue_name, stage_handler(queue_name), deps)


def drain(deps: Services, stages: Sequence[str] = MAIN_STAGES, max_batches: int = 100) -> int:
    """Delivers the stage queues until none holds a message; returns the number of batches."""
    queue = deps.queue
    assert isinstance(queue, MemoryTaskQueue)
    for batches in range(max_batches):
        busy = [name for name in stages if queue.waiting(name)]
        if not busy:
            return batches
        deliver(deps, busy[0])
    raise AssertionError(f"queues still busy after {max_batches} batches")


def failed_ids(response: dict[str, Any]) -> list[str]:
    return [item["itemIdentifier"] for item in response["batchItemFailures"]]


def span_status(deps: Services, knowledge: Knowledge) -> dict[str, str]:
    view = deps.tracker.view(knowledge)
    return {stage["span_id"]: stage["status"] for stage in view["trace"]}


def chunked(deps: Services, kb: KnowledgeBase, name: str, text: str) -> Knowledge:
    """A document through docreader and chunking, its embedding message waiting."""
    created = upload(deps, kb, name, text.encode())
    deliver(deps, "docreader")
    deliver(deps, "chunking")
    return created


def embedding_outputs(deps: Services, knowledge: Knowledge) -> dict[str, Any]:
    view = deps.tracker.view(knowledge)
    return dict(next(s for s in view["trace"] if s["span_id"] == "embedding")["outputs"])


def index_count(deps: Services, kb: KnowledgeBase, knowledge_id: str) -> int:
    return deps.engine().count(IndexSpace.of(deps.embedding_model()), kb.id, knowledge_id)


def message(knowledge: Knowledge, **extra: Any) -> dict[str, Any]:
    return {
        "tenant_id": knowledge.tenant_id,
        "knowledge_id": knowledge.id,
        "attempt": knowledge.attempt,
        **extra,
    }


class ScriptedReader:
    """A DocReader answering from a script: each call takes the next answer (a result or an exception to
    raise); the last one repeats."""

    def __init__(self, *answers: ReadResult | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[ReadRequest] = []

    def read(self, request: ReadRequest) -> ReadResult:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def page_count(self, request: ReadRequest) -> int | None:
        return None

    def engines(self) -> list[dict[str, Any]]:
        return []


def task_body(knowledge: Knowledge, token: str, **extra: Any) -> dict[str, Any]:
    return {"task_token": token, **message(knowledge), **extra}


def json_of(files: MemoryFileStore, url: str) -> Any:
    return json.loads(files.read(url))


@pytest.fixture
def client(deps: Services) -> Iterator[Client]:
    """The Chalice app's test client on the in-memory `deps` (routes through API Gateway's shape)."""
    set_deps(deps)
    import app as app_module  # imported here: the app's logger is built after pytest captures output

    with Client(app_module.app, stage_name="local") as test_client:
        yield test_client
    set_deps(None)
