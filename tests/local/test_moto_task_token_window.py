"""A `.waitForTaskToken` task's callbacks are taken from the moment its message is on the queue.

moto 5.2.5 sends the task's message, records TaskSubmitted and only then sets up the heartbeat clock: a
worker that took the message in that window and heartbeated it got `InvalidToken` (so the pipeline's
runner dropped the message as "no longer awaited" and the execution waited for good: an e2e drain timed
out with every queue empty and one execution at TaskSubmitted), and a success sent in that window was only
seen when the heartbeat clock ran out (the task timed out). The window is held open here, deterministically,
by stopping the execution right after TaskSubmitted."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest

from chalicelib.local.moto_server import ACCOUNT_ID, MotoServer

#: long enough that a callback seen only when the heartbeat clock runs out fails the test on its status
HEARTBEAT_SECONDS = 3


def _definition(queue_url: str) -> str:
    return json.dumps(
        {
            "StartAt": "Work",
            "States": {
                "Work": {
                    "Type": "Task",
                    "Resource": "arn:aws:states:::sqs:sendMessage.waitForTaskToken",
                    "Parameters": {"QueueUrl": queue_url, "MessageBody": {"token.$": "$$.Task.Token"}},
                    "HeartbeatSeconds": HEARTBEAT_SECONDS,
                    "TimeoutSeconds": 120,
                    "End": True,
                }
            },
        }
    )


@pytest.fixture
def window_held_open(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """Each callback task stops after its message is sent and TaskSubmitted recorded, before it sets up
    its clocks, until the event is set (the window a busy machine leaves open for a few milliseconds)."""
    from moto.stepfunctions.parser.asl.component.state.exec.state_task.service.state_task_service_callback import (
        StateTaskServiceCallback,
    )

    release = threading.Event()
    original = StateTaskServiceCallback._eval_integration_pattern

    def held(self: Any, *args: Any, **kwargs: Any) -> Any:
        release.wait(timeout=60)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(StateTaskServiceCallback, "_eval_integration_pattern", held)
    yield release
    release.set()


def _start(moto_server: MotoServer) -> tuple[Any, Any, str, str]:
    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=moto_server.url)
    sfn = boto3.client("stepfunctions", region_name="us-east-1", endpoint_url=moto_server.url)
    name = f"token-window-{uuid.uuid4().hex[:8]}"
    queue_url = sqs.create_queue(QueueName=name)["QueueUrl"]
    machine = sfn.create_state_machine(
        name=name,
        definition=_definition(queue_url),
        roleArn=f"arn:aws:iam::{ACCOUNT_ID}:role/token-window",
    )["stateMachineArn"]
    execution = sfn.start_execution(stateMachineArn=machine, name="one", input="{}")["executionArn"]
    return sqs, sfn, queue_url, execution


def _token(sqs: Any, queue_url: str) -> str:
    messages = sqs.receive_message(QueueUrl=queue_url, WaitTimeSeconds=20).get("Messages", [])
    assert messages, "the task's message never reached the queue"
    return str(json.loads(messages[0]["Body"])["token"])


def _ended(sfn: Any, execution: str) -> dict[str, Any]:
    for _ in range(600):  # bounded: a callback lost waits for the heartbeat clock (HEARTBEAT_SECONDS)
        described = sfn.describe_execution(executionArn=execution)
        if described["status"] != "RUNNING":
            return dict(described)
        time.sleep(0.05)
    raise AssertionError(f"{execution} still RUNNING")


def test_a_heartbeat_sent_as_soon_as_the_message_is_taken_is_accepted(
    moto_server: MotoServer, window_held_open: threading.Event
) -> None:
    sqs, sfn, queue_url, execution = _start(moto_server)
    token = _token(sqs, queue_url)
    sfn.send_task_heartbeat(taskToken=token)  # moto answered InvalidToken here: the worker dropped the task
    window_held_open.set()
    sfn.send_task_heartbeat(taskToken=token)
    sfn.send_task_success(taskToken=token, output=json.dumps({"done": True}))
    ended = _ended(sfn, execution)
    assert ended["status"] == "SUCCEEDED" and json.loads(ended["output"]) == {"done": True}


def test_a_success_sent_before_the_clocks_are_set_up_ends_the_task(
    moto_server: MotoServer, window_held_open: threading.Event
) -> None:
    sqs, sfn, queue_url, execution = _start(moto_server)
    token = _token(sqs, queue_url)
    sfn.send_task_success(taskToken=token, output=json.dumps({"done": True}))
    window_held_open.set()
    ended = _ended(sfn, execution)  # moto waited for a heartbeat that had come first, and timed the task out
    assert ended["status"] == "SUCCEEDED" and json.loads(ended["output"]) == {"done": True}
