"""The clocks of the state machine's callback tasks (`.waitForTaskToken` on SQS).

AWS counts a Task state's TimeoutSeconds and HeartbeatSeconds from the task's start, which for a callback
task is when its message was sent: the time the message waits in a shared queue counts. Workers send
SendTaskHeartbeat when they take a message and before they defer one (stages/runner.py `run_task`), so:
- HeartbeatSeconds is the longest silence a live task shows: a worker that died mid-run (its Lambda timeout)
  leaves its message invisible for the queue's visibility timeout before the next pickup heartbeats, and a
  deferral waits up to SQS's 900 s; what is left is the queue wait the machine tolerates;
- TimeoutSeconds bounds one task (so the whole execution) and outlasts everything a live worker may do: every
  throttle deferral the runner allows, every try of the queue, each a full Lambda run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chalicelib.adapters.memory import memory_settings
from chalicelib.stages.runner import retry_delay

ROOT = Path(__file__).resolve().parents[2]
#: callback state -> (its queue, the function that serves it)
CALLBACK_TASKS = {
    "DescribeImage": ("MultimodalQueue", "multimodal_task"),
    "PlanPostProcess": ("PostprocessQueue", "postprocess_task"),
    "RunSubtask": ("EnrichmentQueue", "enrichment_task"),
}


def _states() -> dict[str, dict[str, Any]]:
    machine = json.loads((ROOT / "infra" / "statemachine" / "knowledge.asl.json").read_text(encoding="utf-8"))
    found: dict[str, dict[str, Any]] = {}

    def walk(states: dict[str, Any]) -> None:
        for name, state in states.items():
            found[name] = state
            if state["Type"] == "Map":
                walk(state["ItemProcessor"]["States"])

    walk(machine["States"])
    return found


def _lambda_timeout(function: str) -> int:
    config = json.loads((ROOT / ".chalice" / "config.json").read_text(encoding="utf-8"))
    return int(config["lambda_functions"].get(function, {}).get("lambda_timeout", config["lambda_timeout"]))


def _visibility(queue: str) -> int:
    template = json.loads((ROOT / "infra" / "template.json").read_text(encoding="utf-8"))
    return int(template["Resources"][queue]["Properties"]["VisibilityTimeout"])


def test_every_callback_task_is_heartbeated_and_its_silence_outlasts_a_crashed_worker() -> None:
    states = _states()
    settings = memory_settings()
    callbacks = {n for n, s in states.items() if s.get("Resource", "").endswith(".waitForTaskToken")}
    assert callbacks == set(CALLBACK_TASKS)
    for name, (queue, function) in CALLBACK_TASKS.items():
        state = states[name]
        heartbeat, timeout = state.get("HeartbeatSeconds"), state["TimeoutSeconds"]
        assert isinstance(heartbeat, int), f"{name}: no HeartbeatSeconds"
        assert heartbeat < timeout, name  # AWS refuses a definition otherwise
        run = _lambda_timeout(function)
        assert heartbeat >= run + _visibility(queue), f"{name}: a crashed worker's retry comes too late"
        assert heartbeat >= run + settings.max_defer_seconds, f"{name}: a deferral outlasts the heartbeat"


def test_a_subtask_or_image_waits_out_every_deferral_and_try_a_worker_may_take() -> None:
    """The throttle budget (runner.run_task: `max_throttle_deferrals` deferrals, 5 s tripling to 900 s) plus a
    full run per delivery, inside TimeoutSeconds: a live, throttled task is not cut off by the machine."""
    states = _states()
    settings = memory_settings()
    deferrals = settings.max_throttle_deferrals
    longest_delays = sum(
        min(settings.max_defer_seconds, retry_delay(n, rng=lambda: 1.0)) for n in range(1, deferrals + 1)
    )
    for name in ("DescribeImage", "RunSubtask"):
        _, function = CALLBACK_TASKS[name]
        deliveries = deferrals + settings.stage_max_receives
        needed = longest_delays + deliveries * _lambda_timeout(function)
        assert states[name]["TimeoutSeconds"] >= needed, f"{name}: {needed} s of live work is cut off"
