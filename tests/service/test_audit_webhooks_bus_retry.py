"""EventBridge answers PutEvents with per-entry failures (FailedEntryCount, an ErrorCode on each failed
entry) that botocore does not retry: AWS's guide says to "detect unsuccessful entries and include them in a
subsequent call", and names InternalFailure and ThrottlingException as retryable. An event whose entry was
throttled was logged and lost from the bus, though the change it announces happened (and its retry carries
the same event_id, so a consumer that sees it twice drops one)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from chalicelib.adapters.events import EventBridgePublisher
from chalicelib.domain.events import EventType, knowledge_event


class ScriptedBus:
    """put_events answered from a script: each answer lists the ErrorCode per entry ('' = accepted)."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.calls: list[list[dict[str, Any]]] = []

    def put_events(self, Entries: list[dict[str, Any]]) -> dict[str, Any]:
        self.calls.append(Entries)
        codes = self.answers.pop(0) if self.answers else [""] * len(Entries)
        assert len(codes) == len(Entries)
        entries = [{"ErrorCode": c, "ErrorMessage": "x"} if c else {"EventId": "id"} for c in codes]
        return {"FailedEntryCount": sum(1 for c in codes if c), "Entries": entries}


def _events(n: int) -> list[Any]:
    return [
        knowledge_event(
            EventType.KNOWLEDGE_CREATED,
            tenant_id="t",
            kb_id="kb",
            knowledge_id=f"k{i}",
            status="pending",
            attempt=1,
        )
        for i in range(n)
    ]


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "sleep", lambda _seconds: None)


def ids(entries: list[dict[str, Any]]) -> list[str]:
    return [json.loads(e["Detail"])["knowledge_id"] for e in entries]


def test_a_throttled_entry_is_put_again_alone() -> None:
    bus = ScriptedBus(["", "ThrottlingException", ""], [""])
    EventBridgePublisher(bus, "bus").publish(_events(3))
    assert [ids(c) for c in bus.calls] == [["k0", "k1", "k2"], ["k1"]]


def test_an_internal_failure_is_put_again_until_it_is_taken() -> None:
    bus = ScriptedBus(["InternalFailure"], ["InternalFailure"], [""])
    EventBridgePublisher(bus, "bus").publish(_events(1))
    assert [ids(c) for c in bus.calls] == [["k0"], ["k0"], ["k0"]]


def test_a_refused_entry_is_not_put_again_and_retries_are_bounded() -> None:
    refused = ScriptedBus(["MalformedDetail", ""])
    EventBridgePublisher(refused, "bus").publish(_events(2))
    assert len(refused.calls) == 1

    throttled = ScriptedBus(*[["ThrottlingException"]] * 20)
    EventBridgePublisher(throttled, "bus").publish(_events(1))
    assert 1 < len(throttled.calls) <= 5
