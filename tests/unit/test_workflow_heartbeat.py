"""SendTaskHeartbeat through the Step Functions adapter, its AWS errors pinned with botocore's Stubber (moto
answers a heartbeat on a task without HeartbeatSeconds with InvalidToken, and accepts one on an answered
task while its execution runs: neither is what AWS does)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from chalicelib.adapters.workflow import StepFunctionsWorkflow
from chalicelib.ports import ServiceUnreachable

ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:weknora-knowledge"


def _client() -> Any:
    return boto3.client(
        "stepfunctions", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )


def test_a_heartbeat_on_an_open_task_is_sent_with_its_token() -> None:
    client = _client()
    with Stubber(client) as stub:
        stub.add_response("send_task_heartbeat", {}, {"taskToken": "token"})
        assert StepFunctionsWorkflow(client, ARN).task_heartbeat("token") is True
        stub.assert_no_pending_responses()


@pytest.mark.parametrize("code", ["TaskTimedOut", "TaskDoesNotExist", "InvalidToken"])
def test_a_heartbeat_on_a_closed_task_says_so(code: str) -> None:
    client = _client()
    with Stubber(client) as stub:
        stub.add_client_error("send_task_heartbeat", service_error_code=code, http_status_code=400)
        assert StepFunctionsWorkflow(client, ARN).task_heartbeat("token") is False


def test_an_unanswered_heartbeat_is_service_unreachable_and_a_refused_one_propagates() -> None:
    client = _client()
    with Stubber(client) as stub:
        stub.add_client_error(
            "send_task_heartbeat", service_error_code="ThrottlingException", http_status_code=400
        )
        stub.add_client_error(
            "send_task_heartbeat", service_error_code="AccessDeniedException", http_status_code=400
        )
        workflow = StepFunctionsWorkflow(client, ARN)
        with pytest.raises(ServiceUnreachable):
            workflow.task_heartbeat("token")
        with pytest.raises(client.exceptions.ClientError):
            workflow.task_heartbeat("token")
