"""The dead-letter listing says, per queue, what it listed and whether that was all the queue holds: a
queue the limit cut, or one it never reached, is not `complete` (the operators' page then lists it alone)."""

from __future__ import annotations

import json

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.operations import dlq
from chalicelib.settings import QUEUES


def _park(queue: MemoryTaskQueue, name: str, n: int) -> None:
    for i in range(n):
        body = {"knowledge_id": f"00000000-0000-4000-8000-{i:012d}", "attempt": 1}
        queue.dead_letter(name, json.dumps(body), "test")


def test_each_queue_says_what_was_listed_and_whether_it_was_all(
    deps: Services, queue: MemoryTaskQueue
) -> None:
    _park(queue, "docreader", 7)
    _park(queue, "embedding", 2)
    letters, queues = dlq.dead_letter_listing(deps, None, 5)
    assert len(letters) == 5 and {v["queue"] for v in letters} == {"docreader"}
    seen = {q["queue"]: q for q in queues}
    assert [q["queue"] for q in queues] == list(QUEUES)
    assert seen["uploads"] == {"queue": "uploads", "listed": 0, "complete": True}
    assert seen["docreader"] == {"queue": "docreader", "listed": 5, "complete": False}  # cut by the limit
    assert seen["embedding"] == {"queue": "embedding", "listed": 0, "complete": False}  # never reached

    letters, queues = dlq.dead_letter_listing(deps, "docreader", 100)
    assert len(letters) == 7 and queues == [{"queue": "docreader", "listed": 7, "complete": True}]
    assert dlq.list_dead_letters(deps, None, 100) == dlq.dead_letter_listing(deps, None, 100)[0]
    assert {q["queue"]: q["listed"] for q in dlq.dead_letter_listing(deps, None, 100)[1] if q["listed"]} == {
        "docreader": 7,
        "embedding": 2,
    }
