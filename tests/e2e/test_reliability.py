"""At-least-once delivery, poison messages, housekeeping and tenant isolation, through the real path."""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from project_paths import corpus_bytes

from chalicelib.adapters.storage import LocalFileStore, RoutingFileStore
from chalicelib.bootstrap import Services
from chalicelib.domain.clock import to_iso
from chalicelib.domain.types import Span, SpanKind, SpanStatus
from chalicelib.local.runtime import LocalRuntime
from chalicelib.ports import IndexSpace, ReadRequest, ReadResult

from .conftest import Api
from .stored import stored_keys

TEXT = corpus_bytes("debian-faq-getting-debian.md")


def chunk_types(services: Services, knowledge_id: str) -> Counter[str]:
    return Counter(str(chunk.chunk_type) for chunk in services.chunks.list(knowledge_id))


def index_count(services: Services, kb_id: str, knowledge_id: str) -> int:
    model = services.embedding_model("")
    return services.engine().count(IndexSpace.of(model), kb_id, knowledge_id)


def test_redelivered_stage_messages_do_not_duplicate_chunks_or_vectors(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """Every record of every queue is delivered twice (at-least-once), yet the result is identical."""
    kb = api.create_kb()
    reference = api.upload(kb["id"], "once.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)
    expected = api.knowledge(reference["id"])["chunk_count"]

    runtime.inject_duplicates(True)
    twice = api.upload(kb["id"], "twice.txt", TEXT).json_body["data"]  # .txt: same bytes, another type
    runtime.drain(timeout=180)
    runtime.inject_duplicates(None)

    knowledge = api.knowledge(twice["id"])
    assert knowledge["parse_status"] == "completed"
    assert knowledge["chunk_count"] == expected
    # the text chunks once each, and the enrichment's one summary chunk
    assert chunk_types(services, twice["id"]) == {"text": expected, "summary": 1}
    assert index_count(services, kb["id"], twice["id"]) == expected + 1
    # the duplicated embedding message tried to start the workflow twice: one execution
    sfn = boto3.client("stepfunctions")
    executions = sfn.list_executions(stateMachineArn=services.workflow.state_machine_arn)["executions"]
    assert [e["name"] for e in executions].count(f"{twice['id']}-1") == 1


class ExplodingReader:
    """Fault injection: a parser that crashes on every try (stands in for a poison document)."""

    def __init__(self) -> None:
        self.calls = 0

    def read(self, request: ReadRequest) -> ReadResult:
        self.calls += 1
        raise RuntimeError("parser crashed on this document")

    def engines(self) -> list[dict[str, object]]:
        return []


def dlq_bodies(queue: str) -> list[str]:
    sqs = boto3.client("sqs")
    url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get(
        "Messages", []
    )
    return [m["Body"] for m in messages]


def test_poison_message_ends_in_the_dlq_and_the_knowledge_fails_with_its_reason(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    reader = ExplodingReader()
    services.replace_docreader(reader)
    kb = api.create_kb()
    created = api.upload(kb["id"], "poison.md", b"# boom\n\ncontent").json_body["data"]
    runtime.drain(timeout=120)

    assert reader.calls == 4  # the specification's 1 try + 3 retries
    knowledge = api.knowledge(created["id"])
    assert knowledge["parse_status"] == "failed"
    assert "(RuntimeError)" in knowledge["error_message"]  # the class, never an unclassified error's text
    assert "after 4 tries" in knowledge["error_message"]
    parked = [json.loads(body) for body in dlq_bodies("weknora-docreader-dlq")]
    assert [m["knowledge_id"] for m in parked] == [created["id"]]
    spans = api.get(f"/knowledge/{created['id']}/spans").json_body["data"]
    stages = {s["span_id"]: s["status"] for s in spans["trace"]}
    assert stages["docreader"] == "failed" and stages["chunking"] == "cancelled"


def test_a_malformed_stage_message_is_parked_in_the_dlq_at_once(runtime: LocalRuntime) -> None:
    sqs = boto3.client("sqs")
    url = sqs.get_queue_url(QueueName="weknora-chunking")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="{not json")
    runtime.drain(timeout=60)
    assert dlq_bodies("weknora-chunking-dlq") == ["{not json"]


def test_unsupported_content_fails_at_once_without_retries(api: Api, runtime: LocalRuntime) -> None:
    """A permanent error (here: a file with no extractable text) is not retried."""
    kb = api.create_kb()
    created = api.upload(kb["id"], "blank.md", b"   \n\n  \n").json_body["data"]
    runtime.drain(timeout=60)
    knowledge = api.knowledge(created["id"])
    assert knowledge["parse_status"] == "failed"
    assert knowledge["error_code"] == "docreader_parse_failed"
    assert "text" in knowledge["error_message"] and "extract" in knowledge["error_message"]
    assert dlq_bodies("weknora-docreader-dlq") == []


def age_row(services: Services, knowledge_id: str, status: str, hours: float) -> None:
    """Simulates a worker that died: the row is left in flight with an old heartbeat."""
    m = services.knowledge.model
    old = to_iso(datetime.now(UTC) - timedelta(hours=hours))
    m(knowledge_id).update(actions=[m.parse_status.set(status), m.updated_at.set(old), m.inflight.set("1")])


def test_housekeeping_recovers_a_stuck_row_but_spares_a_live_one(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = api.create_kb()
    live = api.upload(kb["id"], "live.md", b"# b\n\nslow but alive").json_body["data"]
    runtime.drain(timeout=120)
    stuck = api.upload(kb["id"], "stuck.md", b"# a\n\nstuck document").json_body["data"]
    sqs = boto3.client("sqs")
    sqs.purge_queue(
        QueueUrl=sqs.get_queue_url(QueueName="weknora-docreader")["QueueUrl"]
    )  # the message is lost
    age_row(services, stuck["id"], "pending", hours=3)
    age_row(services, live["id"], "processing", hours=3)
    # The live one is still heartbeating through a span (a long stage reporting progress).
    services.spans.put(Span(live["id"], 1, "embedding", "embedding", SpanKind.STAGE, SpanStatus.RUNNING))

    fired = runtime.tick(datetime.now(UTC) + timedelta(minutes=6))  # the 5-minute schedule
    assert [f.name for f in fired] == ["housekeeping"] and fired[0].error is None

    recovered = api.knowledge(stuck["id"])
    assert recovered["parse_status"] == "failed"
    assert "recovered by housekeeping" in recovered["error_message"]
    assert recovered["error_code"] == "task_timeout" and recovered["pending_subtasks_count"] == 0
    assert api.knowledge(live["id"])["parse_status"] == "processing"


def test_housekeeping_switched_off_leaves_a_stuck_row_alone(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """The specification's housekeeping switch (issue 24): off, the schedule fires and sweeps nothing."""
    kb = api.create_kb()
    stuck = api.upload(kb["id"], "stuck.md", b"# a\n\nstuck while switched off").json_body["data"]
    sqs = boto3.client("sqs")
    sqs.purge_queue(QueueUrl=sqs.get_queue_url(QueueName="weknora-docreader")["QueueUrl"])
    age_row(services, stuck["id"], "pending", hours=3)
    services.settings = replace(services.settings, housekeeping_enabled=False)
    fired = runtime.tick(datetime.now(UTC) + timedelta(minutes=6))
    assert [f.name for f in fired] == ["housekeeping"] and fired[0].error is None
    assert api.knowledge(stuck["id"])["parse_status"] == "pending"
    services.settings = replace(services.settings, housekeeping_enabled=True)
    runtime.tick(datetime.now(UTC) + timedelta(minutes=12))
    assert api.knowledge(stuck["id"])["parse_status"] == "failed"


def test_housekeeping_leaves_fresh_rows_alone(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "fresh.md", b"# c\n\nfresh").json_body["data"]
    runtime.tick(datetime.now(UTC) + timedelta(minutes=6))
    assert api.knowledge(created["id"])["parse_status"] == "pending"


def test_another_tenants_key_cannot_read_or_write(api: Api, other_api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "private.md", b"# secret\n\nthe launch code is 0000").json_body["data"]
    runtime.drain(timeout=120)

    assert other_api.get(f"/knowledge/{created['id']}").status_code == 404
    assert other_api.get(f"/knowledge/{created['id']}/spans").status_code == 404
    assert other_api.get(f"/knowledge-bases/{kb['id']}").status_code == 404
    assert other_api.get(f"/knowledge-bases/{kb['id']}/knowledge").status_code == 404
    assert other_api.upload(kb["id"], "x.md", b"# intruder").status_code == 404
    assert other_api.post(f"/knowledge/{created['id']}/reparse").status_code == 404
    search = other_api.post(f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "launch code"})
    assert search.status_code == 404
    assert other_api.get("/knowledge-bases").json_body["data"] == []
    # and the owner still sees it
    assert api.knowledge(created["id"])["parse_status"] == "completed"


@pytest.mark.parametrize("key", [None, "wrong-key"])
def test_requests_without_a_valid_key_are_401(api: Api, key: str | None, runtime: LocalRuntime) -> None:
    headers = {"X-API-Key": key} if key else {}
    response = api.client.http.get("/api/v1/knowledge-bases", headers=headers)
    assert response.status_code == 401
    assert json.loads(response.body)["error"]["code"] in ("missing_api_key", "invalid_api_key")


def test_reparse_is_a_new_attempt_without_duplicates(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "doc.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)
    first = api.knowledge(created["id"])
    response = api.post(
        f"/knowledge/{created['id']}/reparse", {"process_config": {"chunking": {"chunk_size": 256}}}
    )
    assert response.status_code == 200
    assert (
        response.json_body["data"]["attempt"] == 2 and response.json_body["data"]["parse_status"] == "pending"
    )
    runtime.drain(timeout=180)
    second = api.knowledge(created["id"])
    assert second["parse_status"] == "completed" and second["attempt"] == 2
    assert second["chunk_count"] > first["chunk_count"]  # smaller chunks, from the persisted override
    assert chunk_types(services, created["id"]) == {"text": second["chunk_count"], "summary": 1}
    assert index_count(services, kb["id"], created["id"]) == second["chunk_count"] + 1
    spans = api.get(f"/knowledge/{created['id']}/spans?attempt=1").json_body["data"]
    assert spans["attempt"] == 1 and spans["latest_attempt"] == 2


def test_housekeeping_fails_a_summary_stuck_in_processing(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "doc.md", b"# d\n\nsummary will hang").json_body["data"]
    runtime.drain(timeout=120)
    m = services.knowledge.model
    old = to_iso(datetime.now(UTC) - timedelta(hours=2))
    m(created["id"]).update(
        actions=[m.summary_status.set("processing"), m.summary_inflight.set("1"), m.updated_at.set(old)]
    )
    runtime.tick(datetime.now(UTC) + timedelta(minutes=6))
    knowledge = api.knowledge(created["id"])
    assert knowledge["summary_status"] == "failed"
    assert knowledge["parse_status"] == "completed"  # Sweep B touches only the summary


def test_the_s3_file_store_carries_a_document_end_to_end(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """The suite stores documents on S3 (WEKNORA_STORAGE=s3, as deployed; tests/e2e/conftest.py)."""
    assert services.files.default is services.inbox  # type: ignore[attr-defined]
    kb = api.create_kb()
    created = api.upload(kb["id"], "doc.md", TEXT).json_body["data"]
    assert "file_path" not in created  # the internal storage path is never shown to a tenant
    stored = services.knowledge.get(created["id"])
    assert stored is not None and stored.file_path.startswith("s3://weknora-files-")
    runtime.drain(timeout=180)
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    s3 = boto3.client("s3")
    bucket, key = stored.file_path[5:].split("/", 1)
    assert s3.head_object(Bucket=bucket, Key=key)["ContentLength"] == len(TEXT)
    parsed = f"{created['tenant_id']}/{created['id']}/parsed/attempt-1.md"
    assert s3.head_object(Bucket=bucket, Key=parsed)["ContentLength"] > 0


def test_a_source_gone_from_the_bucket_fails_its_reparse_at_once(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """Regression: S3 answered the missing source with NoSuchKey, not FileNotFoundError, so the docreader
    retried a permanent failure until its last try and recorded it as an unknown error."""
    kb = api.create_kb()
    created = api.upload(kb["id"], "doc.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)
    stored = services.knowledge.get(created["id"])
    assert stored is not None and stored.file_path.startswith("s3://")
    services.files.delete(stored.file_path)
    assert api.post(f"/knowledge/{created['id']}/reparse").status_code == 200
    runtime.drain(timeout=180)
    knowledge = api.knowledge(created["id"])
    assert knowledge["parse_status"] == "failed"
    assert knowledge["error_code"] == "docreader_parse_failed"
    assert "source file is missing" in knowledge["error_message"]


def test_the_local_file_store_carries_a_document_end_to_end(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """The same pipeline with `local://` storage (the local stage's, which `make run` keeps) instead."""
    services.files = RoutingFileStore(LocalFileStore(runtime.state_dir / "files"))
    kb = api.create_kb()
    created = api.upload(kb["id"], "doc.md", TEXT).json_body["data"]
    stored = services.knowledge.get(created["id"])
    assert stored is not None and stored.file_path.startswith("local://")
    runtime.drain(timeout=180)
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    assert services.files.read(stored.file_path) == TEXT
    parsed = f"{created['tenant_id']}/{created['id']}/parsed/attempt-1.md"
    assert (runtime.state_dir / "files" / parsed).stat().st_size > 0
    assert stored_keys(services.inbox, f"{created['tenant_id']}/") == []  # nothing went to the bucket


def test_housekeeping_recovers_a_dead_row_while_other_documents_keep_the_queues_busy(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """Regression (issue 9): any backlog on any stage queue spared every stuck row, so under constant load a
    row whose worker died on its last try was never recovered. Now only a row whose own message was queued
    after its last activity (nobody has taken it yet) is spared, and only while its queue holds messages."""
    kb = api.create_kb()
    dead = api.upload(kb["id"], "dead.md", b"# dead\n\nits worker died").json_body["data"]
    runtime.drain(timeout=120)
    waiting = api.upload(kb["id"], "waiting.md", b"# waiting\n\nbehind a long backlog").json_body["data"]

    # `dead`: its embedding message was taken (a span shows work after it was queued), then nothing.
    m = services.knowledge.model
    three_hours_ago = to_iso(datetime.now(UTC) - timedelta(hours=3))
    queued = to_iso(datetime.now(UTC) - timedelta(hours=3, minutes=5))
    m(dead["id"]).update(
        actions=[
            m.parse_status.set("processing"),
            m.updated_at.set(three_hours_ago),
            m.inflight.set("1"),
            m.queued_stage.set("embedding"),
            m.queued_at.set(queued),
        ]
    )
    span = Span(dead["id"], 1, "embedding", "embedding", SpanKind.STAGE, SpanStatus.RUNNING)
    span.updated_at = datetime.now(UTC) - timedelta(hours=3)
    for existing in services.spans.list(dead["id"], 1):
        existing.updated_at = span.updated_at
        services.spans.put(existing)
    services.spans.put(span)
    # `waiting`: queued, never taken, its queue busy with other documents' work.
    age_row(services, waiting["id"], "pending", hours=3)
    sqs = boto3.client("sqs")
    for queue in ("weknora-docreader", "weknora-embedding"):
        url = sqs.get_queue_url(QueueName=queue)["QueueUrl"]
        for n in range(3):
            body = json.dumps({"tenant_id": "t", "knowledge_id": f"other-{n}", "attempt": 1})
            sqs.send_message(QueueUrl=url, MessageBody=body)

    fired = runtime.tick(datetime.now(UTC) + timedelta(minutes=6))
    assert fired[0].error is None
    assert api.knowledge(dead["id"])["parse_status"] == "failed"
    assert api.knowledge(dead["id"])["error_code"] == "task_timeout"
    assert api.knowledge(waiting["id"])["parse_status"] == "pending"  # still waiting its turn


def test_housekeeping_gives_a_failed_row_s_place_back_and_the_waiter_goes_in(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    """A document holding its tenant's only place loses its chunking message: housekeeping fails it, the place
    goes back at once (not when the lease ends) and wakes the waiter, through the roles as packaged."""
    services.settings = replace(
        services.settings, tenant_pipeline_cap=1, turn_backstop_seconds=900, stale_after_seconds=1
    )
    kb = api.create_kb()
    first = api.upload(kb["id"], "first.md", b"# First\n\nThe harbour.\n").json_body["data"]
    second = api.upload(kb["id"], "second.md", b"# Second\n\nThe lighthouse.\n").json_body["data"]
    docreader = runtime.poller("DocreaderStage")
    for _ in range(2):
        docreader.poll_once(wait_time_seconds=0)  # the first goes in, the second waits
    sqs = boto3.client("sqs")
    sqs.purge_queue(QueueUrl=sqs.get_queue_url(QueueName="weknora-chunking")["QueueUrl"])
    time.sleep(2)  # past the (shortened) threshold
    fired = runtime.tick(datetime.now(UTC) + timedelta(minutes=6))
    assert [f.name for f in fired] == ["housekeeping"] and fired[0].error is None
    assert api.knowledge(first["id"])["parse_status"] == "failed"
    for _ in range(200):
        if api.knowledge(second["id"])["parse_status"] == "completed":
            break
        runtime.poll_once()
    assert api.knowledge(second["id"])["parse_status"] == "completed"
