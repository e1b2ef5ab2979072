"""The fakes' own behaviour where the service tests rely on it: the queue speaks the Lambda SQS event and
SQS's redrive rule, the workflow is idempotent by name, the file store keeps to its own URLs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_lambda_powertools.utilities.data_classes import SQSEvent

from chalicelib.adapters.memory import (
    MemoryFileStore,
    MemoryTaskQueue,
    MemoryWorkflow,
    QueueUnavailable,
    ScriptedUrlImporter,
)
from chalicelib.bootstrap import Services, memory_deps
from chalicelib.domain.errors import BadRequest
from chalicelib.domain.types import Stage, StageMessage
from chalicelib.ports import FetchedDocument, FetchFailed


def test_received_messages_are_lambda_sqs_records_with_receive_counts(queue: MemoryTaskQueue) -> None:
    queue.send(Stage.CHUNKING, StageMessage("t", "k", 2))
    first = queue.receive("chunking")
    record = next(iter(SQSEvent(first).records))
    assert json.loads(record.body) == {"tenant_id": "t", "knowledge_id": "k", "attempt": 2}
    assert record.attributes.approximate_receive_count == "1"
    assert record.event_source_arn == "arn:aws:sqs:us-east-1:123456789012:chunking"
    assert len(record.message_id) == 36 and record.md5_of_body
    assert queue.receive("chunking")["Records"] == []  # in flight: not visible
    queue.settle(first, {"batchItemFailures": [{"itemIdentifier": record.message_id}]})
    again = next(iter(SQSEvent(queue.receive("chunking")).records))
    assert again.message_id == record.message_id and again.attributes.approximate_receive_count == "2"


def test_a_message_failing_its_last_receive_moves_to_the_dlq(queue: MemoryTaskQueue) -> None:
    queue.send_raw("docreader", {"n": 1})
    for _ in range(queue.max_receives):
        event = queue.receive("docreader")
        queue.settle(event, {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["messageId"]}]})
    assert queue.waiting("docreader") == []
    (parked,) = queue.dead_letters("docreader")
    assert (
        parked.json() == {"n": 1}
        and parked.receive_count == 4
        and "maxReceiveCount" in parked.attributes["reason"]
    )


def test_succeeded_records_are_deleted_and_a_raising_batch_fails_whole(
    deps: Services, queue: MemoryTaskQueue
) -> None:
    queue.send_raw("chunking", {"n": 1})
    queue.deliver("chunking", lambda deps, event, context: {"batchItemFailures": []}, deps)
    assert queue.waiting("chunking") == [] and queue.backlog("chunking") == 0

    from aws_lambda_powertools.utilities.batch.exceptions import BatchProcessingError

    def every_record_failed(deps: object, event: dict[str, object], context: object) -> dict[str, object]:
        raise BatchProcessingError("All records failed processing.", [])

    queue.send_raw("chunking", {"n": 2})
    queue.deliver("chunking", every_record_failed, deps)
    assert [m.json() for m in queue.waiting("chunking")] == [{"n": 2}]
    assert queue.backlog("chunking") == 1


def test_sends_validate_delays_and_unavailable_queues_raise(queue: MemoryTaskQueue) -> None:
    with pytest.raises(ValueError):
        queue.send_raw("embedding", {}, delay_seconds=901)
    with pytest.raises(KeyError):
        queue.send_raw("no-such-queue", {})
    queue.make_unavailable("embedding")
    with pytest.raises(QueueUnavailable):
        queue.send(Stage.EMBEDDING, StageMessage("t", "k", 1))
    assert queue.sent == []


def test_a_workflow_name_starts_one_execution_and_tokens_close_once() -> None:
    workflow = MemoryWorkflow()
    first = workflow.start("k-1", {"a": 1})
    again = workflow.start("k-1", {"a": 1})
    assert first.started and not again.started and first.execution_id == again.execution_id
    assert first.execution_id.endswith(":execution:mem:k-1") and workflow.is_running("k-1")
    workflow.finish("k-1")
    assert not workflow.is_running("k-1") and not workflow.is_running("k-2")
    assert workflow.task_success("tok", {"ok": True}) is True
    assert workflow.task_failure("tok", "late", "cause") is False
    workflow.close_task("timed-out")
    assert workflow.task_success("timed-out", {}) is False
    assert [(a.token, a.succeeded) for a in workflow.answers] == [("tok", True)]


def test_a_file_store_keeps_to_its_own_urls_and_keys() -> None:
    files, inbox = MemoryFileStore("files"), MemoryFileStore("inbox")
    url = files.save("t/k/a.md", b"abc", "text/markdown")
    assert url == "mem://files/t/k/a.md" and files.read(url) == b"abc" and files.size(url) == 3
    assert files.content_type(url) == "text/markdown"
    with pytest.raises(ValueError):
        inbox.read(url)  # another store's URL, as another bucket's is for S3
    with pytest.raises(ValueError):
        files.save("../escape", b"x")
    with pytest.raises(FileNotFoundError):
        files.read(files.url_for("missing"))
    files.delete(files.url_for("missing"))  # not an error
    with pytest.raises(PermissionError):
        inbox.put_presigned("https://inbox.mem.invalid/x", b"x")
    granted = inbox.presign_put("uploads/a.md", 60)
    assert inbox.read(inbox.put_presigned(granted, b"data")) == b"data"


def test_the_url_importer_plays_its_script_in_order() -> None:
    page = FetchedDocument("a.md", "md", b"# A")
    urls = ScriptedUrlImporter(
        {"https://a": [FetchFailed("busy", permanent=False), page]}, blocked=["http://10.0.0.1/"]
    )
    with pytest.raises(FetchFailed):
        urls.fetch("https://a")
    assert urls.fetch("https://a") == page and urls.fetch("https://a") == page
    with pytest.raises(FetchFailed) as missing:
        urls.fetch("https://unscripted")
    assert missing.value.permanent
    with pytest.raises(BadRequest) as blocked:
        urls.check("http://10.0.0.1/")
    assert blocked.value.code == "ssrf_blocked"


def test_the_memory_set_has_only_the_embedded_engine(tmp_path: Path) -> None:
    deps = memory_deps(index_dir=tmp_path)
    assert deps.engine().engine_name == "embedded" and deps.engine("embedded") is deps.engine()
    with pytest.raises(ValueError):
        deps.engine("opensearch")
    assert deps.health.probe() == {"table": True, "queues": True, "bucket": True}
    assert deps.embedding_model().model_id == "hashing/64" and deps.ocr() is None
