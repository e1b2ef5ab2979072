"""Workers treat a callback on a closed task as done. moto accepts duplicate callbacks (measured), so the
AWS errors are pinned here with botocore's Stubber instead."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from chalicelib.adapters.workflow import StepFunctionsWorkflow

ARN = "arn:aws:states:us-east-1:123456789012:stateMachine:weknora-knowledge"


@pytest.mark.parametrize("code", ["TaskTimedOut", "TaskDoesNotExist", "InvalidToken"])
def test_callbacks_on_closed_tasks_are_not_errors(code: str) -> None:
    client = boto3.client(
        "stepfunctions", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    with Stubber(client) as stub:
        stub.add_client_error("send_task_success", service_error_code=code, http_status_code=400)
        stub.add_client_error("send_task_failure", service_error_code=code, http_status_code=400)
        workflow = StepFunctionsWorkflow(client, ARN)
        assert workflow.task_success("token", {"ok": True}) is False
        assert workflow.task_failure("token", "x.failed", "cause") is False


def test_other_callback_errors_propagate() -> None:
    client = boto3.client(
        "stepfunctions", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    with Stubber(client) as stub:
        stub.add_client_error(
            "send_task_success", service_error_code="ThrottlingException", http_status_code=400
        )
        with pytest.raises(client.exceptions.ClientError):
            StepFunctionsWorkflow(client, ARN).task_success("token", {})


def test_a_second_start_with_the_same_name_is_not_a_second_execution() -> None:
    client = boto3.client(
        "stepfunctions", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x"
    )
    with Stubber(client) as stub:
        stub.add_response(
            "start_execution",
            {
                "executionArn": f"{ARN}:k1-1".replace("stateMachine", "execution"),
                "startDate": "2026-11-30T00:00:00Z",
            },
        )
        stub.add_client_error(
            "start_execution", service_error_code="ExecutionAlreadyExists", http_status_code=400
        )
        workflow = StepFunctionsWorkflow(client, ARN)
        assert workflow.start("k1-1", {}).started is True
        again = workflow.start("k1-1", {})
        assert again.started is False and again.execution_id.endswith(":execution:weknora-knowledge:k1-1")
