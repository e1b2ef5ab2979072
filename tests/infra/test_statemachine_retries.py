"""Every DynamoDB and SQS integration of the state machine retries throttling and service errors, so a
throttle never ends an execution and leaves its row for housekeeping; conditional-check failures are never
retried (they mean the row moved on, and each has its Catch)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ASL = Path(__file__).resolve().parents[2] / "infra" / "statemachine" / "knowledge.asl.json"


def _tasks(states: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, state in states.items():
        if state["Type"] == "Task":
            yield name, state
        if state["Type"] == "Map":
            yield from _tasks(state["ItemProcessor"]["States"])


def test_every_integration_task_retries_throttling_with_jittered_backoff() -> None:
    tasks = list(_tasks(json.loads(ASL.read_text())["States"]))
    assert len(tasks) >= 7
    for name, state in tasks:
        service = "DynamoDB" if ":dynamodb:" in state["Resource"] else "SQS"
        retry = state.get("Retry")
        assert retry, f"{name} has no Retry"
        errors = {e for r in retry for e in r["ErrorEquals"]}
        throttles = (
            {"DynamoDB.ProvisionedThroughputExceededException", "DynamoDB.ThrottlingException"}
            if service == "DynamoDB"
            else {"SQS.RequestThrottledException"}
        )
        assert throttles <= errors, name
        assert "DynamoDB.ConditionalCheckFailedException" not in errors, name
        assert "States.ALL" not in errors and "States.TaskFailed" not in errors, name
        for rule in retry:
            assert rule["MaxAttempts"] >= 3 and rule["BackoffRate"] > 1 and rule["JitterStrategy"] == "FULL"
