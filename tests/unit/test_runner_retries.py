"""Retry classes in the stage runner: permanent errors fail at once, transient ones come back after a short
backoff (the message's visibility is shortened), never after the queue's long visibility timeout.

Regression (issue 9): with the docreader queue's 5,400 s visibility timeout, a transient failure came back
after 90 minutes per try."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from chalicelib.adapters.memory import MemoryUsageRepo
from chalicelib.adapters.memory.tenants import MemoryTenantRepo
from chalicelib.domain.errors import PermanentStageError, TransientStageError
from chalicelib.domain.types import Stage, StageMessage
from chalicelib.settings import load_settings
from chalicelib.stages import runner


class Queue:
    def __init__(self) -> None:
        self.retried: list[tuple[str, str, int]] = []
        self.sent: list[StageMessage] = []

    def retry_later(self, queue: str, receipt_handle: str, delay_seconds: int) -> None:
        self.retried.append((queue, receipt_handle, delay_seconds))

    def send(self, stage: Stage, message: StageMessage, *, delay_seconds: int = 0) -> None:
        self.sent.append(message)


class Rows:
    def __init__(self) -> None:
        self.failed: list[tuple[str, str]] = []

    def mark_failed(self, knowledge_id: str, attempt: int | None, message: str, code: str) -> bool:
        self.failed.append((knowledge_id, code))
        return True

    def get(self, knowledge_id: str) -> None:
        return None  # the failure's event needs the row; none here, so none is announced


def _deps() -> Any:
    tracker = SimpleNamespace(fail_stage=lambda *a, **k: None)
    return SimpleNamespace(
        settings=load_settings({}),
        queue=Queue(),
        knowledge=Rows(),
        tracker=tracker,
        usage=MemoryUsageRepo(),
        tenants=MemoryTenantRepo(),
    )


def _event(receive_count: int) -> dict[str, Any]:
    body = json.dumps({"tenant_id": "t", "knowledge_id": "k1", "attempt": 1})
    return {
        "Records": [
            {
                "messageId": "m-1",
                "receiptHandle": "rh-1",
                "body": body,
                "attributes": {"ApproximateReceiveCount": str(receive_count)},
                "messageAttributes": {},
                "md5OfBody": "",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:weknora-docreader",
                "awsRegion": "us-east-1",
            }
        ]
    }


@pytest.mark.parametrize("error", [TransientStageError("busy"), RuntimeError("a bug")])
def test_a_transient_failure_comes_back_after_a_short_backoff(error: Exception) -> None:
    deps = _deps()

    def work(_deps: Any, _message: StageMessage) -> None:
        raise error

    response = runner.run_stage(deps, Stage.DOCREADER, _event(1), None, work)
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}  # every record back to SQS
    [(queue, handle, delay)] = deps.queue.retried
    assert (queue, handle) == ("docreader", "rh-1") and 2 <= delay <= 5
    assert deps.knowledge.failed == []  # only the last try fails the row


def test_the_last_try_fails_the_row_and_leaves_the_message_for_the_dlq() -> None:
    deps = _deps()

    def work(_deps: Any, _message: StageMessage) -> None:
        raise TransientStageError("still busy")

    response = runner.run_stage(deps, Stage.DOCREADER, _event(deps.settings.stage_max_receives), None, work)
    assert response == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}
    assert deps.queue.retried == []
    assert deps.knowledge.failed == [("k1", "unknown")]


def test_a_permanent_failure_fails_at_once_and_is_acknowledged() -> None:
    deps = _deps()

    def work(_deps: Any, _message: StageMessage) -> None:
        raise PermanentStageError("not a document")

    assert runner.run_stage(deps, Stage.DOCREADER, _event(1), None, work) == {"batchItemFailures": []}
    assert deps.knowledge.failed == [("k1", "unknown")] and deps.queue.retried == []


def test_the_backoff_grows_by_try_and_is_capped() -> None:
    assert [runner.retry_delay(n, rng=lambda: 1.0) for n in (1, 2, 3, 4, 9)] == [5, 15, 45, 135, 900]
    assert runner.retry_delay(1, rng=lambda: 0.0) == 2
