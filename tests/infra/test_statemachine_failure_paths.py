"""Every way the state machine itself can fail a document ends in one guarded write and one announcement
that say the same thing: a Map that fails (an exhausted retry of a slot release or a promotion inside it)
or a plan that never comes back fails the row if it is still in flight at this attempt, and the webhooks
queue is told with the very code and message the row got, as stored codes are (lower case).

Read from the real definition, whose paths are followed state by state (Pass states evaluated)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from chalicelib.domain.errors import SpanErrorCode

ASL = Path(__file__).resolve().parents[2] / "infra" / "statemachine" / "knowledge.asl.json"
#: the error a failed state hands its Catch (ResultPath $.error)
CAUGHT = {"Error": "DynamoDB.AmazonDynamoDBException", "Cause": "exhausted retries"}


def _machine() -> dict[str, Any]:
    return dict(json.loads(ASL.read_text(encoding="utf-8")))


def _get(data: Any, path: str) -> Any:
    if path.startswith("$$."):  # the context object (a state's entered time): not the failure's data
        return path
    assert path.startswith("$."), path
    for key in path[2:].split("."):
        data = data[key]
    return data


def _evaluate(template: Any, data: dict[str, Any]) -> Any:
    """A Parameters/MessageBody template against the state's input: `key.$` paths and States.Format."""
    if not isinstance(template, dict):
        return template
    out: dict[str, Any] = {}
    for key, value in template.items():
        if not key.endswith(".$"):
            out[key] = _evaluate(value, data)
            continue
        formatted = re.fullmatch(r"States\.Format\('(.*)', (\$[\w.]+)\)", value)
        if formatted:
            out[key[:-2]] = formatted.group(1).replace("{}", str(_get(data, formatted.group(2))), 1)
        else:
            out[key[:-2]] = _get(data, value)
    return out


def _set(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    keys = path[2:].split(".")
    target = data
    for key in keys[:-1]:
        target = target.setdefault(key, {})
    target[keys[-1]] = value
    return data


def _follow_failure(states: dict[str, Any], catch: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The states a caught failure enters up to the row's write, and the data the write gets."""
    data: dict[str, Any] = {"knowledge_id": "k", "attempt": 3, "attempt_n": "3"}
    _set(data, catch["ResultPath"], dict(CAUGHT))
    entered = []
    name = catch["Next"]
    while states[name]["Type"] == "Pass":
        entered.append(name)
        state = states[name]
        result = state["Result"] if "Result" in state else _evaluate(state["Parameters"], data)
        _set(data, state["ResultPath"], result)
        name = state["Next"]
    entered.append(name)
    return entered, data


def _catch_all(state: dict[str, Any]) -> dict[str, Any]:
    [catch] = [c for c in state.get("Catch", []) if c["ErrorEquals"] == ["States.ALL"]]
    return dict(catch)


def test_each_failure_of_the_machine_fails_the_row_and_announces_what_the_row_says() -> None:
    states = _machine()["States"]
    writes = {}
    for source in ("Multimodal", "PlanPostProcess", "Enrich"):
        entered, data = _follow_failure(states, _catch_all(states[source]))
        write = states[entered[-1]]
        assert write["Resource"] == "arn:${Partition}:states:::dynamodb:updateItem", (source, entered)
        parameters = write["Parameters"]
        # only a row still in flight at this attempt is failed
        assert (
            parameters["ConditionExpression"] == "parse_status IN (:processing, :finalizing) AND attempt = :a"
        )
        assert "parse_status = :failed" in parameters["UpdateExpression"]
        values = {k: _evaluate(v, data) for k, v in parameters["ExpressionAttributeValues"].items()}
        row_code, row_message = values[":code"]["S"], values[":message"]["S"]
        assert row_code == SpanErrorCode(row_code).value, "a stored code is lower case"
        [guarded] = [
            c for c in write["Catch"] if c["ErrorEquals"] == ["DynamoDB.ConditionalCheckFailedException"]
        ]
        assert states[guarded["Next"]]["Type"] == "Succeed"  # a row that moved on is left be
        announce = states[write["Next"]]
        body = _evaluate(announce["Parameters"]["MessageBody"], data)
        assert body["announce"] == "Knowledge Failed"
        assert (body["error_code"], body["error_message"]) == (row_code, row_message), source
        assert body["knowledge_id"] == "k" and body["attempt"] == 3
        writes[source] = (entered[-1], row_code, row_message)
    assert len({name for name, _, _ in writes.values()}) == 1, "one failure write, reused"
    assert writes["PlanPostProcess"][1:] == (
        SpanErrorCode.TASK_TIMEOUT.value,
        "post-processing could not be planned; reparse to retry",
    )
    assert writes["Enrich"][1] == SpanErrorCode.UNKNOWN.value
    assert CAUGHT["Error"] in writes["Enrich"][2] and CAUGHT["Error"] in writes["Multimodal"][2]


def test_a_slot_release_or_promotion_that_fails_past_its_retries_reaches_the_maps_catch() -> None:
    """Inside an iteration only the conditional failure (the row moved on) is caught; anything else fails the
    iteration, hence the Map, whose Catch fails the row rather than leave it finalizing for housekeeping."""
    states = _machine()["States"]
    iteration = states["Enrich"]["ItemProcessor"]["States"]
    for name in ("ReleaseSlot", "PromoteIfLast"):
        caught = {e for c in iteration[name]["Catch"] for e in c["ErrorEquals"]}
        assert caught == {"DynamoDB.ConditionalCheckFailedException"}, name
    assert _catch_all(states["Enrich"])["Next"] in states


def test_a_promotion_whose_condition_fails_still_asks_for_the_completion_to_be_announced() -> None:
    """A retried promotion whose first answer was lost fails its condition on the row it completed: the
    machine sends the announcement either way, and the webhooks handler tells only a row completed at this
    attempt (tests/service/test_webhooks.py)."""
    iteration = _machine()["States"]["Enrich"]["ItemProcessor"]["States"]
    promote = iteration["PromoteIfLast"]
    [guarded] = [
        c for c in promote["Catch"] if c["ErrorEquals"] == ["DynamoDB.ConditionalCheckFailedException"]
    ]
    assert guarded["Next"] == promote["Next"] == "AnnounceCompleted" and guarded["ResultPath"] is None
    body = _evaluate(
        iteration["AnnounceCompleted"]["Parameters"]["MessageBody"], {"knowledge_id": "k", "attempt": 3}
    )
    assert body == {"announce": "Knowledge Completed", "knowledge_id": "k", "attempt": 3}
