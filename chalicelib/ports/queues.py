"""Queues and the per-document workflow."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from chalicelib.domain.types import (
    Stage,
    StageMessage,
)


class ServiceUnreachable(ConnectionError):
    """A queue or workflow service did not answer (throttled, a 5xx, the network): transient, the same call
    may succeed later. Adapters raise it only for these; a refused call (a missing permission, a wrong name)
    stays the adapter's own error, because it is a bug that a retry does not cure."""


class TaskQueue(Protocol):
    def send(self, stage: Stage, message: StageMessage, *, delay_seconds: int = 0) -> None:
        """Enqueues the stage's next message. Raises on failure (the caller marks the row failed):
        ServiceUnreachable when SQS does not answer (throttled, down, unreachable)."""
        ...

    def send_raw(self, queue: str, body: Mapping[str, Any], *, delay_seconds: int = 0) -> None:
        """Enqueues a message as it is; raises as `send` does."""
        ...

    def dead_letter(self, queue: str, body: str, reason: str) -> None:
        """Parks a message that can never succeed in the queue's DLQ, so it is kept, not lost."""
        ...

    def retry_later(self, queue: str, receipt_handle: str, delay_seconds: int) -> None:
        """A failed message comes back after `delay_seconds` instead of the queue's visibility timeout."""
        ...

    def backlog(self, queue: str) -> int:
        """Messages the queue holds (visible, in flight and delayed). Raises ServiceUnreachable when SQS
        does not answer."""
        ...

    def receive_dead_letters(self, queue: str, max_messages: int, hold_seconds: int) -> list[DeadLetter]:
        """Up to `max_messages` messages of the queue's DLQ, each once, kept out of other readers' sight
        for `hold_seconds` (until deleted or released)."""
        ...

    def delete_dead_letter(self, letter: DeadLetter) -> None: ...

    def release_dead_letter(self, letter: DeadLetter) -> None:
        """Makes a received dead letter visible again at once (it stays in the DLQ)."""
        ...


@dataclass(frozen=True)
class DeadLetter:
    """A message in a queue's dead-letter queue, as an operator sees it."""

    queue: str  # the logical queue it died on ('docreader', 'embedding', ...)
    message_id: str
    receipt_handle: str
    body: str
    #: why it was parked (a message the stage could not read), or '' when SQS moved it after maxReceiveCount
    reason: str = ""
    sent_at_ms: int = 0
    receive_count: int = 0


@dataclass(frozen=True)
class WorkflowStart:
    execution_id: str
    started: bool  # False when an execution of that name already existed


class Workflow(Protocol):
    def start(self, name: str, payload: Mapping[str, Any]) -> WorkflowStart: ...

    def is_running(self, name: str) -> bool:
        """Whether the named execution runs. Raises ServiceUnreachable when the service does not answer."""
        ...

    def task_success(self, token: str, output: Mapping[str, Any]) -> bool:
        """Returns False when the task is already closed (timed out, superseded, answered)."""
        ...

    def task_failure(self, token: str, error: str, cause: str) -> bool: ...

    def task_heartbeat(self, token: str) -> bool:
        """Restarts the task's HeartbeatSeconds clock; False when the task is already closed (timed out,
        answered, its execution ended). Raises ServiceUnreachable when the service does not answer."""
        ...

    def stop(self, name: str, cause: str) -> bool:
        """Stops a running execution; False when none of that name is running."""
        ...

    def transitions(self, name: str) -> int | None:
        """The state transitions a finished execution made (from its history); None while it runs or
        when there is none of that name."""
        ...
