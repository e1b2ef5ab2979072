"""The rebuild's copy as a task (`opensearch_rebuild`), where osmem cannot show it (it copies before it answers
and has no `_tasks`): a fake client scripts the task's polls and the running tasks; a scripted HTTP server
shows that a `_reindex` answered 504 is sent once, and how a `_delete_by_query` refused by a write block
reads (osmem deletes through the block)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any, cast

import pytest
from index_contract import DIM
from opensearchpy import OpenSearch
from opensearchpy.exceptions import (
    AuthorizationException,
    ConnectionTimeout,
    NotFoundError,
    RequestError,
    TransportError,
)
from test_index_unavailable import _Handler

from chalicelib.adapters.index.opensearch import (
    OpenSearchEngine,
    build_opensearch_client,
    index_body,
    versioned_name,
)
from chalicelib.adapters.index.opensearch_rebuild import RebuildRefused, rebuild_index
from chalicelib.ports import IndexSpace, IndexUnavailable, IndexWriteError

SPACE = IndexSpace(model_id="rebuild-tasks", dimensions=DIM)
NAME, TARGET = SPACE.name, versioned_name(SPACE.name)
MAPPING = index_body(SPACE)["mappings"]
SETTINGS = {"index": {"number_of_shards": "1", "number_of_replicas": "0"}}
TASK = "node-1:7"
NO_HANDLER = RequestError(400, "no handler found for uri [/_tasks] and method [GET]", {})


class FakeClient:
    """The calls `rebuild_index` makes, on a legacy index `NAME` of 4 documents; `calls` records the changes."""

    def __init__(self, polls: list[dict[str, Any]], *, leftover: bool = False, running: Any = None) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.polls = polls  # what each `GET _tasks/<id>` answers, in turn (the last one repeats)
        self.running = (
            running if running is not None else {"nodes": {}}
        )  # `GET _tasks` (an exception: raised)
        self.target_exists = leftover
        self.transport = SimpleNamespace(max_retries=3)
        self.indices = SimpleNamespace(
            get_alias=self._get_alias,
            get_mapping=lambda index: {index: {"mappings": MAPPING}},
            get_settings=lambda index: {index: {"settings": SETTINGS}},
            create=self._create,
            delete=self._delete,
            put_settings=lambda index, body: self.calls.append(
                ("block", index, body["index"]["blocks"]["write"])
            ),
            refresh=lambda index: None,
            update_aliases=lambda body: self.calls.append(("swap",)),
        )
        self.tasks = SimpleNamespace(get=self._task, list=self._tasks)

    def _get_alias(self, index: str) -> dict[str, Any]:
        if index == NAME or (index == TARGET and self.target_exists):
            return {index: {"aliases": {}}}
        raise NotFoundError(404, "index_not_found_exception", {})

    def _create(self, index: str, body: Any) -> None:
        self.calls.append(("create", index))
        self.target_exists = True

    def _delete(self, index: str) -> None:
        self.calls.append(("delete", index))
        self.target_exists = False

    def reindex(self, *, body: Any, refresh: bool, wait_for_completion: bool) -> dict[str, Any]:
        self.calls.append(("reindex", wait_for_completion, self.transport.max_retries))
        return {"task": TASK}

    def _task(self, task_id: str) -> dict[str, Any]:
        assert task_id == TASK
        self.calls.append(("poll",))
        return self.polls.pop(0) if len(self.polls) > 1 else self.polls[0]

    def _tasks(self, actions: str, detailed: bool) -> Any:
        assert (actions, detailed) == ("*reindex", True)
        if isinstance(self.running, Exception):
            raise self.running
        return self.running

    def count(self, index: str) -> dict[str, int]:
        return {"count": 4}


RUNNING = {"completed": False, "task": {"action": "indices:data/write/reindex"}}
DONE = {"completed": True, "response": {"total": 4, "created": 4, "failures": [], "timed_out": False}}


def _rebuild(client: FakeClient, **kwargs: Any) -> Any:
    return rebuild_index(cast(OpenSearch, client), NAME, poll=0, **kwargs)


def test_the_copy_is_a_task_started_once_and_polled_until_it_completes() -> None:
    client = FakeClient([RUNNING, RUNNING, RUNNING, DONE])
    result = _rebuild(client)
    assert (result.rebuilt, result.documents) == (True, 4)
    assert client.calls == [
        ("create", TARGET),
        ("block", NAME, True),  # before the copy starts
        ("reindex", False, 0),  # wait_for_completion=false, not resent
        *[("poll",)] * 4,
        ("swap",),  # the blocked index goes with the swap
    ]
    assert client.transport.max_retries == 3  # the client retries as before for everything else


def test_a_copy_outlasting_the_timeout_refuses_keeps_the_target_and_names_the_task() -> None:
    client = FakeClient([RUNNING])
    with pytest.raises(RebuildRefused, match=f"still runs as task {TASK}"):
        _rebuild(client, timeout=0)
    assert ("delete", TARGET) not in client.calls  # the task still writes into it
    assert client.calls[-1] == ("block", NAME, None)  # lifted: the old index serves on, writable
    assert "swap" not in {call[0] for call in client.calls}


def test_a_running_copy_into_the_leftover_refuses_its_drop() -> None:
    running = {
        "nodes": {
            "node-1": {
                "tasks": {
                    "node-1:3": {
                        "action": "indices:data/write/reindex",
                        "description": "reindex from [x] to [y]",
                    },
                    TASK: {"description": f"reindex from [{NAME}] to [{TARGET}]"},
                }
            }
        }
    }
    client = FakeClient([DONE], leftover=True, running=running)
    with pytest.raises(RebuildRefused, match=f"a copy into {TARGET} is still running: task {TASK}"):
        _rebuild(client)
    assert client.calls == []  # nothing dropped, created or blocked

    client.running = {"nodes": {"node-1": {"tasks": {}}}}  # the task is done: the re-run converges
    assert _rebuild(client).rebuilt
    assert client.calls[:2] == [("delete", TARGET), ("create", TARGET)]


def test_a_task_listing_refused_otherwise_than_for_lack_of_the_api_stops_before_the_drop() -> None:
    client = FakeClient([DONE], leftover=True, running=AuthorizationException(403, "security_exception", {}))
    with pytest.raises(AuthorizationException):
        _rebuild(client)
    assert client.calls == []
    client.running = NO_HANDLER  # a server without `_tasks` (osmem): nothing runs there
    assert _rebuild(client).rebuilt


@pytest.mark.parametrize(
    "answer",
    [
        {"completed": True, "error": {"type": "exception"}},
        {"completed": True, "response": {"failures": [{"status": 400}], "timed_out": False}},
    ],
    ids=["task-error", "copy-failures"],
)
def test_a_failed_copy_deletes_the_finished_target_and_lifts_the_block(answer: dict[str, Any]) -> None:
    client = FakeClient([RUNNING, answer])
    with pytest.raises(RebuildRefused, match="the copy failed"):
        _rebuild(client)
    assert client.calls[-2:] == [("delete", TARGET), ("block", NAME, None)]


# ------------------------------------------------------------ over HTTP

#: (method, path, body) -> (status, body)
Script = Callable[[str, str, bytes], tuple[int, Any]]


@pytest.fixture
def serve() -> Iterator[Callable[[Script], str]]:
    servers: list[ThreadingHTTPServer] = []

    def start(script: Script) -> str:
        handler = type("Scripted", (_Handler,), {"script": staticmethod(script)})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_gateway_timeout_on_reindex_is_not_resent(serve: Callable[[Script], str]) -> None:
    """The reviewer's case: the domain's load balancer answers 504 while the task it started runs on. The
    adapter's client (max_retries=3, retries 502/503/504) sends the POST once; the target is kept for the task,
    the block lifted."""
    seen: list[tuple[str, str, bytes]] = []

    def cluster(method: str, path: str, body: bytes) -> tuple[int, Any]:
        seen.append((method, path, body))
        answers: dict[tuple[str, str], tuple[int, Any]] = {
            ("GET", f"/{NAME}/_alias"): (200, {NAME: {"aliases": {}}}),
            ("GET", f"/{TARGET}/_alias"): (404, {"error": {"type": "index_not_found_exception"}}),
            ("GET", f"/{NAME}/_mapping"): (200, {NAME: {"mappings": MAPPING}}),
            ("GET", f"/{NAME}/_settings"): (200, {NAME: {"settings": SETTINGS}}),
            ("PUT", f"/{TARGET}"): (200, {"acknowledged": True}),
            ("PUT", f"/{NAME}/_settings"): (200, {"acknowledged": True}),
            ("POST", f"/{NAME}/_refresh"): (200, {}),
            ("POST", "/_reindex"): (504, {"message": "gateway timeout"}),
        }
        return answers[(method, path)]

    client = build_opensearch_client(serve(cluster), timeout=5)
    with pytest.raises(TransportError) as answered:
        rebuild_index(client, NAME)
    assert answered.value.status_code == 504
    assert [path for method, path, _ in seen if method == "POST" and path == "/_reindex"] == ["/_reindex"]
    assert ("DELETE", f"/{TARGET}") not in [(method, path) for method, path, _ in seen]
    settings = [body for method, path, body in seen if (method, path) == ("PUT", f"/{NAME}/_settings")]
    assert settings == [b'{"index":{"blocks":{"write":true}}}', b'{"index":{"blocks":{"write":null}}}']


def _delete_by_query_answer(status: int, *causes: str) -> Script:
    def script(method: str, path: str, body: bytes) -> tuple[int, Any]:
        assert path == f"/{NAME}/_delete_by_query", path
        failures = [
            {"index": NAME, "id": f"e{i}", "cause": {"type": t}, "status": 403} for i, t in enumerate(causes)
        ]
        return status, {"deleted": 0, "failures": failures, "timed_out": False}

    return script


def test_a_delete_by_query_refused_by_the_write_block_is_busy(serve: Callable[[Script], str]) -> None:
    """OpenSearch answers a `_delete_by_query` on a write-blocked index with its failures and their worst
    status (403 `cluster_block_exception`): busy, as the same block on a `_bulk` item is, so a stage retries
    and the API answers 503 (osmem deletes through the block, so this is scripted)."""
    blocked = OpenSearchEngine(
        build_opensearch_client(serve(_delete_by_query_answer(403, "cluster_block_exception")), max_retries=0)
    )
    with pytest.raises(IndexUnavailable, match="rejected as busy"):
        blocked.delete_by_knowledge(SPACE, "kb1", ["k1"])
    with pytest.raises(IndexUnavailable):
        blocked.delete_by_ids(SPACE, "kb1", ["e1"])

    refused = OpenSearchEngine(
        build_opensearch_client(
            serve(_delete_by_query_answer(403, "cluster_block_exception", "security_exception")),
            max_retries=0,
        )
    )
    with pytest.raises(IndexWriteError, match="403 cluster_block_exception") as caught:
        refused.delete_by_knowledge(SPACE, "kb1", ["k1"])
    assert not isinstance(caught.value, IndexUnavailable)  # one failure is not the block's: refused


class BlockAnswersLate(FakeClient):
    """The server applies the write block, and the answer to that PUT never arrives."""

    def __init__(self) -> None:
        super().__init__([DONE])
        self.blocked: bool | None = None
        self.indices.put_settings = self._put_settings

    def _put_settings(self, index: str, body: Any) -> None:
        self.blocked = body["index"]["blocks"]["write"]
        if self.blocked:
            raise ConnectionTimeout("TIMEOUT", "read timed out", None)


def test_a_block_whose_answer_was_lost_is_lifted_again() -> None:
    client = BlockAnswersLate()
    with pytest.raises(ConnectionTimeout):
        rebuild_index(cast(OpenSearch, client), NAME, poll=0)
    assert client.blocked is None  # the serving index is writable again
