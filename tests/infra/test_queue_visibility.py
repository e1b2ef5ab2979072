"""Every SQS-triggered function's queue hides a received message for at least six times the function's timeout
(AWS's advice for Lambda event sources): a shorter visibility hands a batch to a second worker while the first
still runs it, and every extra receive counts toward the queue's maxReceiveCount."""

from __future__ import annotations

import ast
import json

from .iam_policy import ROOT


def _triggers() -> dict[str, str]:
    """function name → the stage queue its `@app.on_sqs_message(queue=settings.queue("…"))` names."""
    tree = ast.parse((ROOT / "app.py").read_text(encoding="utf-8"))
    found: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            if isinstance(decorator, ast.Call) and getattr(decorator.func, "attr", "") == "on_sqs_message":
                queue = next(k.value for k in decorator.keywords if k.arg == "queue")
                assert isinstance(queue, ast.Call) and isinstance(queue.args[0], ast.Constant)
                found[node.name] = str(queue.args[0].value)
    return found


def test_each_triggered_queue_hides_a_message_six_times_as_long_as_its_function_may_run() -> None:
    config = json.loads((ROOT / ".chalice" / "config.json").read_text(encoding="utf-8"))
    template = json.loads((ROOT / "infra" / "template.json").read_text(encoding="utf-8"))
    visibility = {  # SQS's default is 30 s
        resource["Properties"]["QueueName"]["Fn::Sub"].removeprefix("${Prefix}-"): resource["Properties"].get(
            "VisibilityTimeout", 30
        )
        for resource in template["Resources"].values()
        if resource.get("Type") == "AWS::SQS::Queue"
    }
    triggers = _triggers()
    assert len(triggers) >= 10
    short = {}
    for function, queue in triggers.items():
        timeout = config["lambda_functions"].get(function, {}).get("lambda_timeout", config["lambda_timeout"])
        if visibility[queue] < 6 * timeout:
            short[f"{function} ({timeout} s) on {queue}"] = visibility[queue]
    assert short == {}


def test_the_plan_waits_for_every_try_its_queue_gives_and_ends_before_housekeeping_steps_in() -> None:
    """A planning worker that dies (a Lambda timeout, out of memory) gets its message back after the queue's
    visibility; the state machine must still be waiting then, or the document fails on one crash."""
    from chalicelib.adapters.memory import memory_settings

    template = json.loads((ROOT / "infra" / "template.json").read_text(encoding="utf-8"))
    machine = json.loads((ROOT / "infra" / "statemachine" / "knowledge.asl.json").read_text(encoding="utf-8"))
    timeout = machine["States"]["PlanPostProcess"]["TimeoutSeconds"]
    queue = template["Resources"]["PostprocessQueue"]["Properties"]["VisibilityTimeout"]
    tries = template["Parameters"]["StageMaxReceives"]["Default"]
    assert timeout >= tries * queue
    assert timeout < memory_settings().stale_after_seconds
