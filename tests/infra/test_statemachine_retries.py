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
    assert {name for name, _ in tasks} == {
        "DescribeImage",
        "PlanPostProcess",
        "RunSubtask",
        "ReleaseSlot",
        "PromoteIfLast",
        "FailDocument",
        "AnnounceCompleted",
        "AnnounceFailed",
    }
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


def _path(states: dict[str, Any], start: str, outcome: str = "Next") -> list[str]:
    """The states entered from `start` when every task succeeds (Next, or End)."""
    entered = []
    name: str | None = start
    while name is not None:
        entered.append(name)
        name = states[name].get(outcome)
    return entered


def test_the_success_path_enters_four_states_for_a_document_with_one_subtask() -> None:
    """Standard workflows bill each state entered. The planning worker settles the row (finalizing, or
    completed when nothing is planned) and each subtask worker releases its slot and promotes the last one,
    so a document with no images and one subtask enters Multimodal, PlanPostProcess, Enrich and one
    RunSubtask; a release in the machine happens only after a failed or timed-out subtask."""
    machine = json.loads(ASL.read_text())
    states = machine["States"]
    assert _path(states, machine["StartAt"]) == ["Multimodal", "PlanPostProcess", "Enrich"]
    enrich = states["Enrich"]["ItemProcessor"]
    assert _path(enrich["States"], enrich["StartAt"]) == ["RunSubtask"]
    run = enrich["States"]["RunSubtask"]
    [catch] = run["Catch"]
    assert catch["ErrorEquals"] == ["States.ALL"] and catch["Next"] == "ReleaseSlot"
    # a promotion the machine decided is announced (the webhooks queue's handler publishes it)
    assert _path(enrich["States"], "ReleaseSlot") == ["ReleaseSlot", "PromoteIfLast", "AnnounceCompleted"]
    assert _path(states, "FailDocument") == ["FailDocument", "AnnounceFailed", "Superseded"]
    for announce in (enrich["States"]["AnnounceCompleted"], states["AnnounceFailed"]):
        [lost] = announce["Catch"]  # a lost announcement never fails the document's execution
        assert lost["ErrorEquals"] == ["States.ALL"]
    for name in ("ReleaseSlot", "PromoteIfLast"):  # a failed condition still ends the iteration well
        [conditional] = enrich["States"][name]["Catch"]
        assert conditional["ErrorEquals"] == ["DynamoDB.ConditionalCheckFailedException"]
    promote = enrich["States"]["PromoteIfLast"]["Parameters"]["ConditionExpression"]
    assert "pending_subtasks_count = :zero" in promote and "parse_status = :finalizing" in promote
    failed = states["FailDocument"]["Parameters"]["ConditionExpression"]
    assert ":finalizing" in failed  # a plan settled on the row whose answer never arrived fails too
