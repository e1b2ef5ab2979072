"""Step Functions: one execution per (knowledge, attempt), with a deterministic name."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from typing import Any

from chalicelib.adapters.aws_errors import unanswered_is_unreachable
from chalicelib.ports import WorkflowStart

# A callback for a task that is already closed is not an error for our workers: the work was done.
CLOSED_TASK_ERRORS = ("TaskTimedOut", "TaskDoesNotExist", "InvalidToken")


class StepFunctionsWorkflow:
    def __init__(self, client: Any, state_machine_arn: str):
        self.client = client
        self.state_machine_arn = state_machine_arn

    def _execution_arn(self, name: str) -> str:
        return self.state_machine_arn.replace(":stateMachine:", ":execution:") + f":{name}"

    def start(self, name: str, payload: Mapping[str, Any]) -> WorkflowStart:
        try:
            response = self.client.start_execution(
                stateMachineArn=self.state_machine_arn, name=name, input=json.dumps(dict(payload))
            )
            return WorkflowStart(response["executionArn"], True)
        except self.client.exceptions.ExecutionAlreadyExists:
            return WorkflowStart(self._execution_arn(name), False)

    def is_running(self, name: str) -> bool:
        try:
            with unanswered_is_unreachable("Step Functions"):
                status = self.client.describe_execution(executionArn=self._execution_arn(name))["status"]
        except self.client.exceptions.ExecutionDoesNotExist:
            return False
        return bool(status == "RUNNING")

    def stop(self, name: str, cause: str) -> bool:
        try:
            self.client.stop_execution(executionArn=self._execution_arn(name), cause=cause[:32768])
            return True
        except self.client.exceptions.ExecutionDoesNotExist:
            return False

    def transitions(self, name: str) -> int | None:
        """Standard workflows bill a transition per state entered: counted from the execution's history."""
        arn = self._execution_arn(name)
        try:
            if self.client.describe_execution(executionArn=arn)["status"] == "RUNNING":
                return None
            pages = self.client.get_paginator("get_execution_history").paginate(executionArn=arn)
            return sum(
                1 for page in pages for event in page["events"] if event["type"].endswith("StateEntered")
            )
        except self.client.exceptions.ExecutionDoesNotExist:
            return None

    def _callback(self, method: str, **kwargs: Any) -> bool:
        try:
            getattr(self.client, method)(**kwargs)
            return True
        except self.client.exceptions.ClientError as error:
            if error.response.get("Error", {}).get("Code") in CLOSED_TASK_ERRORS:
                return False
            raise

    def task_success(self, token: str, output: Mapping[str, Any]) -> bool:
        return self._callback("send_task_success", taskToken=token, output=json.dumps(dict(output)))

    def task_failure(self, token: str, error: str, cause: str) -> bool:
        return self._callback("send_task_failure", taskToken=token, error=error[:256], cause=cause[:32768])

    def task_heartbeat(self, token: str) -> bool:
        """SendTaskHeartbeat "resets the Heartbeat clock" of the state's HeartbeatSeconds (the Step Functions
        API reference); a closed task answers TaskTimedOut, TaskDoesNotExist or InvalidToken (False). A
        throttled or unanswered call is ServiceUnreachable: the caller decides whether work goes on."""
        with unanswered_is_unreachable("Step Functions"):
            return self._callback("send_task_heartbeat", taskToken=token)


class LazyStepFunctionsWorkflow:
    """Builds the client (and finds the state machine) on first use: off the API's cold-start path."""

    def __init__(self, client: Callable[[], Any], resolve_arn: Callable[[Any], str]):
        self._client = client
        self._resolve_arn = resolve_arn
        self._inner: StepFunctionsWorkflow | None = None
        self._lock = threading.Lock()

    def _workflow(self) -> StepFunctionsWorkflow:
        with self._lock:
            if self._inner is None:
                client = self._client()
                self._inner = StepFunctionsWorkflow(client, self._resolve_arn(client))
            return self._inner

    @property
    def state_machine_arn(self) -> str:
        return self._workflow().state_machine_arn

    def start(self, name: str, payload: Mapping[str, Any]) -> WorkflowStart:
        return self._workflow().start(name, payload)

    def is_running(self, name: str) -> bool:
        return self._workflow().is_running(name)

    def task_success(self, token: str, output: Mapping[str, Any]) -> bool:
        return self._workflow().task_success(token, output)

    def task_failure(self, token: str, error: str, cause: str) -> bool:
        return self._workflow().task_failure(token, error, cause)

    def task_heartbeat(self, token: str) -> bool:
        return self._workflow().task_heartbeat(token)

    def stop(self, name: str, cause: str) -> bool:
        return self._workflow().stop(name, cause)

    def transitions(self, name: str) -> int | None:
        return self._workflow().transitions(name)
