"""The failures the state machine decides itself, run on moto's interpreter with the real definition: a plan
that never comes back, and an enrichment Map that fails (a slot release that fails for good). Either way
the row fails at once (not hours later by housekeeping), the announcement carries the row's own code and
message, and the document's spans end with it instead of showing `running` for ever."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import boto3
import pytest
from scripted_llm import CHAT, ScriptedLLM

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api, hold_in_finalizing
from .test_events_and_webhooks import EventTap, tap  # noqa: F401  (the event-bus tap fixture)


def _execution(services: Services, knowledge_id: str) -> dict[str, Any]:
    sfn = boto3.client("stepfunctions")
    arn = services.workflow.state_machine_arn  # type: ignore[attr-defined]
    [execution] = [
        e
        for e in sfn.list_executions(stateMachineArn=arn)["executions"]
        if e["name"].startswith(knowledge_id)
    ]
    return dict(execution)


def _entered(execution_arn: str) -> list[str]:
    sfn = boto3.client("stepfunctions")
    events = sfn.get_execution_history(executionArn=execution_arn, maxResults=1000)["events"]
    return [e["stateEnteredEventDetails"]["name"] for e in events if e["type"].endswith("StateEntered")]


def _assert_failed_everywhere(api: Api, tap: EventTap, knowledge_id: str) -> dict[str, Any]:  # noqa: F811
    row = api.knowledge(knowledge_id)
    assert row["parse_status"] == "failed", row
    [announced] = [
        e for e in tap.read(knowledge_id, until="Knowledge Failed") if e["detail-type"] == "Knowledge Failed"
    ]
    assert announced["detail"]["error"] == {"code": row["error_code"], "message": row["error_message"]}
    spans = api.get(f"/knowledge/{knowledge_id}/spans").json_body["data"]
    assert spans["root"]["status"] == "failed", spans["root"]
    assert spans["root"]["error_code"] == row["error_code"]
    still_open = [s["span_id"] for s in spans["trace"] if s["status"] in ("running", "pending")]
    still_open += [
        c["span_id"] for s in spans["trace"] for c in s["children"] if c["status"] in ("running", "pending")
    ]
    assert still_open == []
    return row


def test_a_plan_that_never_comes_back_fails_the_row_announces_its_code_and_ends_its_spans(
    api: Api,
    runtime: LocalRuntime,
    services: Services,
    tap: EventTap,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from chalicelib.stages import postprocess

    def broken(*_: Any, **__: Any) -> Any:  # a bug or an outage after the stage began
        raise RuntimeError("boom")

    monkeypatch.setattr(postprocess, "plan", broken)
    services.settings = replace(services.settings, stage_max_receives=1)  # its first try is its last
    kb = api.create_kb()
    created = api.upload(kb["id"], "f.md", b"# F\n\n" + b"Ferries cross the sound. " * 20).json_body["data"]
    runtime.drain(timeout=120)

    row = _assert_failed_everywhere(api, tap, created["id"])
    assert (row["error_code"], row["error_message"]) == (
        "task_timeout",
        "post-processing could not be planned; reparse to retry",
    )
    execution = _execution(services, created["id"])
    assert execution["status"] == "SUCCEEDED"
    entered = _entered(execution["executionArn"])
    assert entered[-4:] == ["PlanNotMade", "FailDocument", "AnnounceFailed", "Superseded"]


def test_an_enrichment_map_that_fails_fails_the_row_instead_of_leaving_it_finalizing(
    api: Api,
    runtime: LocalRuntime,
    services: Services,
    llm: ScriptedLLM,
    tap: EventTap,  # noqa: F811
) -> None:
    """The subtask answers a failure, and the machine's slot release then fails with an error its Retry does
    not cure (here: the row's `done_subtasks` holds the wrong type): the iteration, so the Map, fails."""
    kb = api.create_kb(summary_model_id=CHAT)
    created = api.upload(kb["id"], "f.md", b"# F\n\n" + b"Ferries cross the sound. " * 20).json_body["data"]
    hold_in_finalizing(api, runtime, created["id"])
    sqs, dynamodb, sfn = boto3.client("sqs"), boto3.client("dynamodb"), boto3.client("stepfunctions")
    queue_url = runtime.poller("enrichment_task").queue_url
    [message] = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10, WaitTimeSeconds=2)["Messages"]
    sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])
    table = services.knowledge.model.Meta.table_name  # type: ignore[attr-defined]
    key = {"id": {"S": created["id"]}}
    dynamodb.update_item(
        TableName=table,
        Key=key,
        UpdateExpression="SET done_subtasks = :wrong",
        ExpressionAttributeValues={":wrong": {"S": "not a set"}},
    )
    sfn.send_task_failure(
        taskToken=json.loads(message["Body"])["task_token"], error="enrichment.failed", cause="x"
    )
    execution = _execution(services, created["id"])
    for _ in range(200):
        if sfn.describe_execution(executionArn=execution["executionArn"])["status"] != "RUNNING":
            break
        time.sleep(0.1)
    dynamodb.update_item(TableName=table, Key=key, UpdateExpression="REMOVE done_subtasks")
    runtime.drain(timeout=120)

    row = _assert_failed_everywhere(api, tap, created["id"])
    assert row["error_code"] == "unknown"
    assert row["error_message"] == "enrichment stopped (DynamoDB.ValidationException); reparse to retry"
    assert sfn.describe_execution(executionArn=execution["executionArn"])["status"] == "SUCCEEDED"
    entered = _entered(execution["executionArn"])
    assert entered[-4:] == ["EnrichStopped", "FailDocument", "AnnounceFailed", "Superseded"]
    assert "ReleaseSlot" in entered and "PromoteIfLast" not in entered
