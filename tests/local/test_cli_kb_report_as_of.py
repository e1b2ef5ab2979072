"""`kb stats` and `cost --kb` on a big knowledge base: the API answers its last stored report (`fresh: false`,
`as_of`) or, before the first one, 202 `report_pending` with the refresh task. The CLI waits for that task and
reads the report again, and says when a report is not fresh."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_cli_terminal_escapes import KB, HostileApi, run

AS_OF = "2026-12-07T10:00:00.000Z"
PENDING = {
    "kb_id": "kb-1",
    "report": "stats",
    "code": "report_pending",
    "as_of": None,
    "fresh": False,
    "refreshing": True,
    "task_id": "t-1",
}
STALE_STATS = {
    "kb_id": "kb-1",
    "documents": 12000,
    "parse_status": {"completed": 12000},
    "enable_status": {"enabled": 12000},
    "summary_status": {"completed": 12000},
    "chunks": 90000,
    "bytes": 123456,
    "cost": {"currency": "USD", "aws_dollars": 1.5, "model_dollars": 0.0, "workflow_pending": 0},
    "oldest_waiting": None,
    "as_of": AS_OF,
    "fresh": False,
    "refreshing": True,
    "task_id": "t-2",
}


class Answers(dict[tuple[str, str], Any]):
    """A path answered with a list in `sequence` answers its items in turn (the last one again after)."""

    def __init__(self) -> None:
        super().__init__()
        self.sequence: dict[tuple[str, str], list[Any]] = {}

    def __contains__(self, key: object) -> bool:
        return key in self.sequence or super().__contains__(key)

    def __getitem__(self, key: tuple[str, str]) -> Any:
        if key in self.sequence:
            answers = self.sequence[key]
            return answers.pop(0) if len(answers) > 1 else answers[0]
        return super().__getitem__(key)


@pytest.fixture
def api() -> Iterator[HostileApi]:
    server = HostileApi()
    server.answers = Answers()
    server.answers.update({("GET", "/knowledge-bases"): [KB], ("GET", "/knowledge-bases/kb-1"): KB})
    yield server
    server.server.shutdown()
    server.server.server_close()


def test_kb_stats_waits_for_the_first_report_and_shows_its_as_of(api: HostileApi) -> None:
    answers: Any = api.answers
    answers.sequence[("GET", "/knowledge-bases/kb-1/stats")] = [PENDING, STALE_STATS]
    answers[("GET", "/tasks/t-1")] = {"id": "t-1", "kind": "kb_report", "status": "completed"}
    code, out = run(api, ["kb", "stats", "kb-1"])
    assert code == 0, out
    assert "being computed (task t-1)" in out
    assert f"as of {AS_OF} (refreshing)" in out and "12000" in out


def test_kb_cost_shows_the_as_of_of_a_stored_report(api: HostileApi) -> None:
    api.answers[("GET", "/knowledge-bases/kb-1/cost")] = {
        "kb_id": "kb-1",
        "aws_dollars": 1.5,
        "model_dollars": 0.0,
        "prices_as_of": "2026-11-01",
        "lines": [{"unit": "lambda_requests", "quantity": 3, "dollars": 1.5}],
        "as_of": AS_OF,
        "fresh": False,
        "refreshing": False,
    }
    code, out = run(api, ["cost", "--kb", "kb-1"])
    assert code == 0, out
    assert f"as of {AS_OF}" in out and "refreshing" not in out
