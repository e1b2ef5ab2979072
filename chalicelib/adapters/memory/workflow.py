"""The per-document workflow, in memory: a start is idempotent by name, as in Step Functions."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from chalicelib.ports import (
    WorkflowStart,
)

if TYPE_CHECKING:
    pass


@dataclass
class Execution:
    name: str
    arn: str
    payload: dict[str, Any]
    status: str = "RUNNING"
    #: what a finished execution reports as its state transitions (tests set it through `finish`)
    transitions: int = 0


@dataclass(frozen=True)
class TaskAnswer:
    token: str
    succeeded: bool
    output: Mapping[str, Any] = field(default_factory=dict)
    error: str = ""
    cause: str = ""


class MemoryWorkflow:
    """Executions by name (a second start of a name starts nothing, as in Step Functions; it reports
    `started=False` as the port says, where AWS answers an identical start of a running execution with the
    original response) and the answers and heartbeats given to task tokens. A token is open until answered
    or closed; answering or heartbeating a closed token returns False, as the adapter does for
    TaskTimedOut, TaskDoesNotExist and InvalidToken."""

    def __init__(self, state_machine_arn: str = "arn:aws:states:us-east-1:123456789012:stateMachine:mem"):
        self.state_machine_arn = state_machine_arn
        self.executions: dict[str, Execution] = {}
        #: every start call by name, repeated calls included
        self.start_calls: list[str] = []
        #: every answer given, in order (only answers to open tokens)
        self.answers: list[TaskAnswer] = []
        #: every heartbeat a worker sent, in order (only those to open tokens)
        self.heartbeats: list[str] = []
        self._closed: set[str] = set()
        self._lock = threading.Lock()

    def start(self, name: str, payload: Mapping[str, Any]) -> WorkflowStart:
        arn = self.state_machine_arn.replace(":stateMachine:", ":execution:") + f":{name}"
        with self._lock:
            self.start_calls.append(name)
            if name in self.executions:
                return WorkflowStart(arn, False)
            self.executions[name] = Execution(name, arn, json.loads(json.dumps(dict(payload))))
            return WorkflowStart(arn, True)

    def is_running(self, name: str) -> bool:
        with self._lock:
            execution = self.executions.get(name)
            return execution is not None and execution.status == "RUNNING"

    def finish(self, name: str, status: str = "SUCCEEDED", transitions: int = 0) -> None:
        with self._lock:
            self.executions[name].status = status
            self.executions[name].transitions = transitions

    def transitions(self, name: str) -> int | None:
        with self._lock:
            execution = self.executions.get(name)
            if execution is None or execution.status == "RUNNING":
                return None
            return execution.transitions

    def stop(self, name: str, cause: str) -> bool:
        with self._lock:
            execution = self.executions.get(name)
            if execution is None or execution.status != "RUNNING":
                return False
            execution.status = "ABORTED"
            return True

    def close_task(self, token: str) -> None:
        """The task timed out or its execution ended: later answers are refused."""
        with self._lock:
            self._closed.add(token)

    def task_success(self, token: str, output: Mapping[str, Any]) -> bool:
        return self._answer(TaskAnswer(token, True, json.loads(json.dumps(dict(output)))))

    def task_failure(self, token: str, error: str, cause: str) -> bool:
        return self._answer(TaskAnswer(token, False, error=error[:256], cause=cause[:32768]))

    def task_heartbeat(self, token: str) -> bool:
        with self._lock:
            if token in self._closed:
                return False
            self.heartbeats.append(token)
            return True

    def _answer(self, answer: TaskAnswer) -> bool:
        with self._lock:
            if answer.token in self._closed:
                return False
            self._closed.add(answer.token)
            self.answers.append(answer)
            return True

    def answers_to(self, token: str) -> list[TaskAnswer]:
        with self._lock:
            return [a for a in self.answers if a.token == token]


# ---------------------------------------------------------------- tasks, graph, wiki
