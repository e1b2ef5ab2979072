"""`kb stats` / `cost --kb` wait for a big knowledge base's first report by reading the report's URL again,
never the refresh task: a reader of a shared knowledge base cannot read the owner's task (GET /tasks/{id}
answers it 404), and the API starts no second refresh for repeated reads. A refresh that failed answers
503 `report_unavailable` saying why: the CLI stops there and shows it."""

from __future__ import annotations

from typing import Any

from test_cli_kb_report_as_of import PENDING, STALE_STATS, api  # noqa: F401  (the fixture)
from test_cli_terminal_escapes import HostileApi, run

STATS = ("GET", "/knowledge-bases/kb-1/stats")
WHY = "its refresh (task t-1) ended failed (the report store is down); another starts 300 s after it ended"


class Requests(dict[tuple[str, str], tuple[int, str, str]]):
    """The server's errors, and every request it was asked (it looks each up here first); `after` answers
    an error only from the nth request of its key on."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[str, str]] = []
        self.after: dict[tuple[str, str], int] = {}

    def __contains__(self, key: object) -> bool:
        assert isinstance(key, tuple)
        self.asked.append(key)
        return super().__contains__(key) and self.asked.count(key) >= self.after.get(key, 1)


def test_a_share_reader_gets_the_report_once_computed(api: HostileApi) -> None:  # noqa: F811
    requests = api.errors = Requests()
    answers: Any = api.answers
    answers.sequence[STATS] = [PENDING, PENDING, STALE_STATS]
    requests[("GET", "/tasks/t-1")] = (404, "task_not_found", "task t-1 not found")  # the owner's task
    code, out = run(api, ["kb", "stats", "kb-1"])
    assert code == 0, out
    assert "12000" in out and "being computed (task t-1)" in out, out
    assert requests.asked.count(STATS) == 3
    assert not [key for key in requests.asked if key[1].startswith("/tasks")]


def test_a_failed_refresh_ends_the_wait_and_says_why(api: HostileApi) -> None:  # noqa: F811
    requests = api.errors = Requests()
    answers: Any = api.answers
    answers.sequence[STATS] = [PENDING]
    answers[("GET", "/tasks/t-1")] = {"id": "t-1", "kind": "kb_report", "status": "failed"}
    message = f"the knowledge base's stats report could not be computed: {WHY}"
    requests[STATS] = (503, "report_unavailable", message)
    requests.after[STATS] = 3  # pending twice, then the refresh failed
    code, out = run(api, ["kb", "stats", "kb-1"])
    assert code != 0, out
    assert "the report store is down" in " ".join(out.split()), out
    assert requests.asked.count(STATS) == 3  # read until it said why, never again
    assert not [key for key in requests.asked if key[1].startswith("/tasks")]
