"""Fault injection through the moto stack (issue 9): hundreds of small documents while every stage's
Lambda crashes now and then (before its work, or after it but before SQS hears of it), SQS delivers
messages twice, task-token callbacks are lost on their way to Step Functions, and every StartExecution is
sent twice. Afterwards, and after a housekeeping sweep: no document lost, none stuck, none failed, no
chunk or index entry duplicated, every enrichment subtask counted exactly once, and every DLQ empty.

`WEKNORA_RELIABILITY_DOCS` sets the number of documents (default 500: about 26 minutes on the shared
2-core machine under load, hence `slow`; 20 documents take about a minute).
"""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from e2e.conftest import Api

from chalicelib.adapters.models.hashing import HashingEmbedding
from chalicelib.bootstrap import Services
from chalicelib.domain.ids import execution_name
from chalicelib.domain.types import ParseStatus
from chalicelib.local.runtime import LocalRuntime
from chalicelib.ports import IndexSpace, WorkflowStart

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

DOCS = int(os.environ.get("WEKNORA_RELIABILITY_DOCS", "500"))
#: concurrent invocations per queue (Lambda scales out; several at once also makes the races real)
CONCURRENCY = 3
WORDS = ("harbour", "lamp", "keeper", "fog", "horn", "wick", "oil", "bread", "boat", "tide", "rope", "gull")


def chance(key: str, salt: str) -> int:
    """A stable number in 0..99 for a message or token: the same faults on every run."""
    return int(hashlib.sha256(f"{salt}:{key}".encode()).hexdigest()[:8], 16) % 100


def document(i: int) -> bytes:
    words = [WORDS[(i * 7 + k) % len(WORDS)] for k in range(12)]
    return (f"# Note {i}\n\nToken doc{i:04d} is unique. " + " ".join(words) + ".\n").encode()


class Faults:
    """What was injected, for the report in an assertion message."""

    def __init__(self) -> None:
        self.crashed_before: Counter[str] = Counter()
        self.crashed_after: Counter[str] = Counter()
        self.callbacks_lost = 0
        self.starts_repeated = 0


def crashing(handler: Callable[..., Any], stage: str, faults: Faults) -> Callable[..., Any]:
    """A Lambda that dies on the first delivery of some messages: before its work (8%) or after it, before
    the poller could delete the messages (8%). Nothing is acknowledged either way; SQS delivers again."""

    def invoke(event: dict[str, Any], context: Any) -> Any:
        first = [r for r in event["Records"] if r["attributes"].get("ApproximateReceiveCount") == "1"]
        rolls = [chance(r["messageId"], stage) for r in first]
        if any(roll < 8 for roll in rolls):
            faults.crashed_before[stage] += 1
            raise RuntimeError(f"injected crash before {stage}")
        response = handler(event, context)
        if any(8 <= roll < 16 for roll in rolls):
            faults.crashed_after[stage] += 1
            raise RuntimeError(f"injected crash after {stage}")
        return response

    return invoke


class FlakyWorkflow:
    """The Step Functions adapter, with 10% of task callbacks lost on their first try (the call raises, as a
    network failure would; the worker's message is redelivered) and every StartExecution sent twice."""

    def __init__(self, inner: Any, faults: Faults) -> None:
        self.inner = inner
        self.faults = faults
        self.state_machine_arn = inner.state_machine_arn
        self._lost: set[str] = set()

    def start(self, name: str, payload: Mapping[str, Any]) -> WorkflowStart:
        first = self.inner.start(name, payload)
        self.inner.start(name, payload)  # same name: Step Functions keeps one execution (checked at the end)
        self.faults.starts_repeated += 1
        return first

    def _maybe_lose(self, token: str) -> None:
        if chance(token, "callback") < 10 and token not in self._lost:
            self._lost.add(token)
            self.faults.callbacks_lost += 1
            raise ConnectionError("injected: the task callback never reached Step Functions")

    def task_success(self, token: str, output: Mapping[str, Any]) -> bool:
        self._maybe_lose(token)
        return bool(self.inner.task_success(token, output))

    def task_failure(self, token: str, error: str, cause: str) -> bool:
        self._maybe_lose(token)
        return bool(self.inner.task_failure(token, error, cause))

    def task_heartbeat(self, token: str) -> bool:
        return bool(self.inner.task_heartbeat(token))

    def is_running(self, name: str) -> bool:
        return bool(self.inner.is_running(name))

    def stop(self, name: str, cause: str) -> bool:
        return bool(self.inner.stop(name, cause))


def dlq_depths() -> dict[str, int]:
    sqs = boto3.client("sqs")
    depths = {}
    for url in sqs.list_queues().get("QueueUrls", []):
        if url.endswith("-dlq"):
            attrs = sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
            depths[url.rsplit("/", 1)[-1]] = sum(int(v) for v in attrs.values())
    return depths


def test_no_document_is_lost_stuck_or_duplicated_under_injected_faults(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    from chalicelib.stages.housekeeping import sweep

    faults = Faults()
    services.replace_embedding_model(HashingEmbedding())
    services.workflow = FlakyWorkflow(services.workflow, faults)
    handlers = {poller: (poller.handler, poller.concurrency) for poller in runtime.pollers}
    for poller, (handler, _) in handlers.items():
        poller.handler = crashing(handler, poller.function_name.rsplit("-", 1)[-1], faults)
        poller.concurrency = CONCURRENCY
    runtime.inject_duplicates(lambda record: chance(record["messageId"], "duplicate") < 10)
    runtime.start_workers()  # every queue's poller in its own thread, as Lambda would run them
    try:
        kb = api.create_kb(summary_model_id="local/extractive")
        ids = []
        for i in range(DOCS):
            response = api.upload(kb["id"], f"note-{i:04d}.md", document(i))
            assert response.status_code == 200, response.json_body
            ids.append(response.json_body["data"]["id"])
        runtime.drain(timeout=max(600, DOCS * 6))
    finally:
        runtime.stop_workers()
        runtime.inject_duplicates(None)
        for poller, (handler, concurrency) in handlers.items():  # the session's other tests share them
            poller.handler, poller.concurrency = handler, concurrency
    report = sweep(services, now=datetime.now(UTC) + timedelta(hours=3))

    injected = (
        f"crashed before {dict(faults.crashed_before)}, after {dict(faults.crashed_after)}, "
        f"{faults.callbacks_lost} callbacks lost, {faults.starts_repeated} starts repeated"
    )
    assert sum(faults.crashed_before.values()) and sum(faults.crashed_after.values()), injected
    assert faults.callbacks_lost and faults.starts_repeated >= DOCS, injected
    assert report.recovered == [], f"housekeeping had to fail stuck rows: {report.recovered} ({injected})"
    rows = {kid: services.knowledge.get(kid) for kid in ids}
    lost = [kid for kid, row in rows.items() if row is None]
    assert lost == [], f"lost: {lost} ({injected})"
    statuses = Counter(row.parse_status.value for row in rows.values() if row is not None)
    assert statuses == {ParseStatus.COMPLETED.value: DOCS}, f"{statuses} ({injected})"
    space = IndexSpace.of(services.embedding_model(""))
    engine = services.engine()
    sfn = boto3.client("stepfunctions")
    for kid, row in rows.items():
        assert row is not None
        chunks = services.chunks.list(kid)
        text = [c for c in chunks if c.chunk_type.value == "text"]
        assert len({c.id for c in chunks}) == len(chunks) and len(text) == row.chunk_count >= 1, kid
        assert all(c.id.startswith(f"{kid}-a{row.attempt}-") for c in chunks), kid
        # Index entries: one per text chunk, plus the summary's own entry; never a duplicate.
        assert engine.count(space, kb["id"], kid) == len(chunks), kid
        assert row.pending_subtasks_count == 0, kid
        planned = list(row.enrichment.get("planned", []))
        assert Counter(p.split(".")[0] for p in planned) == {"summary": 1}, (kid, planned)
        done = set(services.knowledge.model.get(kid).done_subtasks or ())  # type: ignore[attr-defined]
        assert done == set(planned), (kid, done, planned)  # each subtask released its slot exactly once
        arn = services.workflow.state_machine_arn.replace(":stateMachine:", ":execution:")
        execution = sfn.describe_execution(executionArn=f"{arn}:{execution_name(kid, row.attempt)}")
        assert execution["status"] == "SUCCEEDED", kid
    names = Counter(
        e["name"]
        for page in sfn.get_paginator("list_executions").paginate(
            stateMachineArn=services.workflow.state_machine_arn
        )
        for e in page["executions"]
    )
    assert len(names) == DOCS and set(names.values()) == {1}, names.most_common(3)
    assert set(dlq_depths().values()) <= {0}, dlq_depths()
