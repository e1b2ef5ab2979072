"""Operators' DLQ recovery (chalicelib/operations/dlq.py) on the in-memory queue: a redriven failed row starts over
at a new attempt and completes; a second redrive of the same dead attempt changes nothing; letters of
deleted rows are dropped; rows still in flight and unreadable letters stay in the DLQ."""

from __future__ import annotations

import json

import pytest

from chalicelib.adapters.memory import MemoryKnowledgeRepo, MemoryTaskQueue, MemoryWorkflow
from chalicelib.bootstrap import Services
from chalicelib.domain.errors import TransientStageError
from chalicelib.domain.ids import chunk_id, execution_name
from chalicelib.domain.types import EnableStatus, Knowledge, KnowledgeBase, ParseStatus
from chalicelib.ports import ReadResult

from .conftest import TEXT, ScriptedReader, deliver, drain, failed_ids, message, upload


def dead_in_docreader(deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue) -> Knowledge:
    """A document whose docreader failed on every one of its tries: the row is failed, the message in
    the docreader DLQ. The reader works again afterwards."""
    deps.replace_docreader(
        ScriptedReader(*[TransientStageError("reader down")] * 4, ReadResult(markdown=TEXT.decode()))
    )
    created = upload(deps, kb)
    for _ in range(4):
        assert len(failed_ids(deliver(deps, "docreader"))) == 1
    assert [m.json() for m in queue.dead_letters("docreader")] == [message(created)]
    row = deps.knowledge.get(created.id)
    assert row is not None and row.parse_status == ParseStatus.FAILED
    return row


def test_listing_shows_each_dead_letter_with_its_row_and_changes_nothing(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    from chalicelib.operations import dlq

    row = dead_in_docreader(deps, kb, queue)
    for _ in range(2):  # a listing hides nothing from the next one
        (letter,) = dlq.list_dead_letters(deps, None, 100)
        assert (letter["queue"], letter["knowledge_id"], letter["attempt"]) == ("docreader", row.id, 1)
        assert letter["row"]["parse_status"] == "failed" and letter["row"]["attempt"] == 1
        assert letter["reason"] == "maxReceiveCount exceeded"
    assert dlq.list_dead_letters(deps, "chunking", 100) == []
    assert len(queue.dead_letters("docreader")) == 1


def test_a_redriven_failed_row_starts_a_new_attempt_and_is_indexed(
    deps: Services,
    kb: KnowledgeBase,
    queue: MemoryTaskQueue,
    rows: MemoryKnowledgeRepo,
    workflow: MemoryWorkflow,
) -> None:
    from chalicelib.operations import dlq

    row = dead_in_docreader(deps, kb, queue)
    report = dlq.redrive(deps, "docreader", 100).as_dict()
    assert report["counts"] == {"redriven": 1}
    assert report["messages"][0]["attempt"] == 2
    fresh = rows.get(row.id)
    assert fresh is not None and (fresh.attempt, fresh.parse_status) == (2, ParseStatus.PENDING)
    assert fresh.error_message == "" and fresh.error_code == ""
    assert queue.dead_letters("docreader") == []
    assert queue.bodies("docreader") == [{**message(row), "attempt": 2}]
    drain(deps)
    done = rows.get(row.id)
    assert done is not None and done.attempt == 2 and done.enable_status == EnableStatus.ENABLED
    assert list(workflow.executions) == [execution_name(row.id, 2)]  # enrichment of the new attempt
    chunks = deps.chunks.list(row.id)
    assert chunks and chunks[0].id == chunk_id(row.id, 2, 0)
    assert dlq.redrive(deps, None, 100).as_dict()["counts"] == {}  # nothing left to redrive


def test_a_redrive_whose_send_fails_keeps_its_letter_for_the_next_one(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, rows: MemoryKnowledgeRepo
) -> None:
    """The restart could not queue its first message (the row fails again, `enqueue_failed`): the letter is
    still the document's way back, so it stays, and the next redrive restarts the row."""
    from chalicelib.operations import dlq

    row = dead_in_docreader(deps, kb, queue)
    queue.make_unavailable("docreader")
    assert dlq.redrive(deps, "docreader", 100).as_dict()["counts"] == {"enqueue_failed": 1}
    queue.make_unavailable("docreader", False)
    failed = rows.get(row.id)
    assert failed is not None and (failed.attempt, failed.parse_status) == (2, ParseStatus.FAILED)
    assert len(queue.dead_letters("docreader")) == 1
    assert dlq.redrive(deps, "docreader", 100).as_dict()["counts"] == {"redriven": 1}
    fresh = rows.get(row.id)
    assert fresh is not None and (fresh.attempt, fresh.parse_status) == (3, ParseStatus.PENDING)
    assert queue.dead_letters("docreader") == []
    drain(deps)
    done = rows.get(row.id)
    assert done is not None and done.attempt == 3 and done.enable_status == EnableStatus.ENABLED


def test_a_double_redrive_of_the_same_dead_attempt_starts_one_new_attempt(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, rows: MemoryKnowledgeRepo
) -> None:
    from chalicelib.operations import dlq

    row = dead_in_docreader(deps, kb, queue)
    # The same dead message twice (an at-least-once duplicate, or a redrive that crashed before deleting).
    queue.dead_letter("docreader", json.dumps(message(row)), "duplicate")
    report = dlq.redrive(deps, "docreader", 100).as_dict()
    assert report["counts"] == {"redriven": 1, "superseded": 1}
    fresh = rows.get(row.id)
    assert fresh is not None and fresh.attempt == 2
    assert queue.bodies("docreader") == [{**message(row), "attempt": 2}]
    assert queue.dead_letters("docreader") == []


def test_letters_of_deleted_rows_are_dropped_and_in_flight_or_unreadable_ones_kept(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, rows: MemoryKnowledgeRepo
) -> None:
    from chalicelib.operations import dlq

    gone = dead_in_docreader(deps, kb, queue)
    assert rows.delete(gone.id)
    deps.replace_docreader(ScriptedReader(ReadResult(markdown=TEXT.decode())))
    busy = upload(deps, kb, "busy.md", TEXT + b"\nAnother line.\n")
    queue.dead_letter("chunking", json.dumps(message(busy)), "a stray duplicate")  # busy is pending
    queue.dead_letter("chunking", "{not json", "not a chunking message")
    report = dlq.redrive(deps, None, 100).as_dict()
    assert report["counts"] == {"dropped_deleted": 1, "in_flight": 1, "unreadable": 1}
    assert queue.dead_letters("docreader") == []
    assert sorted(m.body for m in queue.dead_letters("chunking")) == sorted(
        [json.dumps(message(busy)), "{not json"]
    )
    still = rows.get(busy.id)
    assert still is not None and still.attempt == 1  # an in-flight row is never restarted by a redrive


@pytest.mark.parametrize(
    ("queue_name", "body"),
    [
        ("uploads", {"Records": [{"s3": {"object": {"key": "uploads%2Fx.md"}}}]}),
        ("wiki", {"kb_id": "kb-1", "action": "ingest"}),
        ("faq-import", {"task_id": "t-1"}),
    ],
    ids=["upload-notification", "wiki", "faq-import"],
)
def test_messages_without_an_attempt_are_sent_back_unchanged(
    deps: Services, queue: MemoryTaskQueue, queue_name: str, body: dict[str, object]
) -> None:
    """Their handlers are idempotent (redeliveries happen anyway): a redrive is an SQS redrive. The wiki
    and FAQ import letters were kept as `unreadable`, having no knowledge id."""
    from chalicelib.operations import dlq

    queue.send_raw(queue_name, body)
    for _ in range(queue.max_receives):  # the handler never ran: SQS moved it after maxReceiveCount
        event = queue.receive(queue_name)
        queue.settle(event, {"batchItemFailures": [{"itemIdentifier": event["Records"][0]["messageId"]}]})
    assert dlq.redrive(deps, queue_name, 100).as_dict()["counts"] == {"resent": 1}
    assert queue.bodies(queue_name) == [body] and queue.dead_letters(queue_name) == []


def test_a_listing_ends_before_its_byte_budget_and_leaves_every_letter_in_its_queue(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.operations import dlq

    row = dead_in_docreader(deps, kb, queue)
    for _ in range(2):  # two more copies of its letter
        queue.dead_letter("docreader", json.dumps(message(row)), "maxReceiveCount exceeded")
    one = max(len(json.dumps(view, default=str)) for view in dlq.list_dead_letters(deps, None, 100))
    monkeypatch.setattr(dlq, "LIST_MAX_BYTES", 2 * one + 3)  # two letters, a comma, the brackets
    assert len(dlq.list_dead_letters(deps, None, 100)) == 2
    assert len(queue.dead_letters("docreader")) == 3  # listed or not, every letter stays
