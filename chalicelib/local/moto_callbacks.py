"""A `.waitForTaskToken` task takes its callbacks from the moment its message is on the queue, as on AWS:
private internals of moto, applied only through `moto_patches.speed_up_moto` on the moto version it pins.

moto 5.2.5 registers the task's token, sends the message, records TaskSubmitted and only then sets up the
task's heartbeat clock (`StateTaskServiceCallback._eval_integration_pattern`). A worker that takes the
message inside that window (a busy machine leaves it open for milliseconds) and heartbeats it is answered
`InvalidToken`, which the pipeline's runner reads as "no longer awaited" and drops the message: the
execution then waits at TaskSubmitted for good. A success sent in the window is seen only when the
heartbeat clock runs out, and the task times out. Here a heartbeat with no clock yet is accepted (there is
nothing to reset), and a clock set up after the answer came ends its wait at once. One lock orders the
answer against the clock's setup.
"""

from __future__ import annotations

import threading
from typing import Any

#: orders an answer (or heartbeat) against the setup of the task's heartbeat clock
_lock = threading.Lock()


def setup_heartbeat_endpoint(self: Any, heartbeat_seconds: int) -> Any:
    from moto.stepfunctions.parser.asl.eval.callback.callback import HeartbeatEndpoint

    with _lock:
        endpoint = HeartbeatEndpoint(heartbeat_seconds=heartbeat_seconds)
        self._heartbeat_endpoint = endpoint
        if self._outcome is not None:  # answered before the clock started: its wait ends at once
            endpoint.notify()
    return endpoint


def notify(self: Any, outcome: Any) -> None:
    with _lock:
        self._outcome = outcome
        self._notify_event.set()
        if self._heartbeat_endpoint is not None:
            self._heartbeat_endpoint.notify()


def notify_heartbeat(self: Any) -> bool:
    with _lock:
        if self._heartbeat_endpoint is not None:
            self._heartbeat_endpoint.notify()
    return True  # the task is open (its token is in the pool): before its clock starts nothing is reset


_installed = False


def install() -> None:
    """Once per process (the caller has checked the moto version)."""
    global _installed
    if _installed:
        return
    from moto.stepfunctions.parser.asl.eval.callback.callback import CallbackEndpoint

    CallbackEndpoint.setup_heartbeat_endpoint = setup_heartbeat_endpoint  # type: ignore[method-assign]
    CallbackEndpoint.notify = notify  # type: ignore[method-assign]
    CallbackEndpoint.notify_heartbeat = notify_heartbeat  # type: ignore[method-assign]
    _installed = True
