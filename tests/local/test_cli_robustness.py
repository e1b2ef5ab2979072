"""The CLI on bad input, lost networks and states that never settle: one clear line and a nonzero exit,
never a traceback or a loop without end (the CLI audit). Fast: the commands run through `cli.main` on a
fake client, a silent socket or a tiny storage server; `up` is stopped before it starts anything."""

from __future__ import annotations

import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from rich.console import Console

from chalicelib.local import cli
from chalicelib.local.cli import faq, follow, kb, knowledge, service, up, watch
from chalicelib.local.cli.client import ApiClient, ApiError, storage_request
from chalicelib.local.cli.knowledge import LS_COLUMNS
from chalicelib.local.cli.output import print_rows

KB = {"id": "kb-1", "name": "docs"}


def run(argv: list[str], terminal: bool = False, width: int = 160) -> tuple[int, str]:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=terminal, color_system=None)
    code = cli.main(argv, console=console)
    return code, buf.getvalue()


def no_traceback(out: str) -> None:
    assert "Traceback" not in out and len(out.strip().splitlines()) == 1, out


class FakeClient:
    """What the commands ask of an ApiClient; a test sets the answers it needs. `looks_left` stops a loop
    that would otherwise never end (the test fails instead of hanging)."""

    def __init__(self) -> None:
        self.rows: dict[str, list[dict[str, Any] | ApiError]] = {}  # knowledge id: the answers in turn
        self.uploaded: list[str] = []
        self.unreadable: set[str] = set()
        self.created: list[str] = []
        self.answers: dict[tuple[str, str], Any] = {}
        self.stats_reply: dict[str, Any] = {}
        self.looks_left = 200

    def _look(self) -> None:
        self.looks_left -= 1
        assert self.looks_left > 0, "still polling: the loop never ends"

    def kb_id(self, ref: str) -> str:
        return ref

    def ensure_kb(self, ref: str) -> tuple[dict[str, Any], bool]:
        return KB, False

    def upload_row(self, kb_id: str, path: Path) -> dict[str, Any]:
        if path.name in self.unreadable:
            raise PermissionError(13, "Permission denied", str(path))
        self.uploaded.append(path.name)
        kid = f"k-{path.stem}"
        self.rows.setdefault(kid, [{"id": kid, "parse_status": "completed"}])
        return {"id": kid, "parse_status": "pending"}

    def knowledge(self, knowledge_id: str) -> dict[str, Any]:
        self._look()
        answers = self.rows[knowledge_id]
        answer = answers.pop(0) if len(answers) > 1 else answers[0]
        if isinstance(answer, ApiError):
            raise answer
        return dict(answer)

    def spans(self, knowledge_id: str) -> dict[str, Any]:
        row = self.rows[knowledge_id][0]
        status = row.get("parse_status") if isinstance(row, dict) else "?"
        return {"knowledge_id": knowledge_id, "parse_status": status, "current_stage": "", "trace": []}

    def cost(self, knowledge_id: str) -> dict[str, Any]:
        return {"aws_dollars": 0.0, "model_dollars": 0.0, "lines": []}

    def pages(self, path: str, params: dict[str, Any], limit: int | None = None) -> Iterator[dict[str, Any]]:
        return iter([])

    def stats(self, kb_id: str) -> dict[str, Any]:
        self._look()
        return self.stats_reply

    def call(self, method: str, path: str, **kw: Any) -> Any:
        self._look()
        if (method, path) not in self.answers:
            raise AssertionError(f"unexpected {method} {path}")
        return self.answers[(method, path)]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeClient:
    client = FakeClient()
    modules = (
        (follow, "make_client"),
        (kb, "client"),
        (watch, "client"),
        (knowledge, "client"),
        (faq, "client"),
    )
    for module, name in modules:
        monkeypatch.setattr(module, name, lambda args: client)
    monkeypatch.setattr(service, "client", lambda args: client)
    return client


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (a stuck proxy, an overloaded function)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[Any] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept())
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for connection, _ in held:
        connection.close()


@pytest.fixture
def storage() -> Iterator[str]:
    """A presigned-link stand-in: every GET answers `stored bytes`."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", "12")
            self.end_headers()
            self.wfile.write(b"stored bytes")

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/bucket/object?X-Amz-Signature=s"
    server.shutdown()
    server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---- up: the state dir and the port -------------------------------------------------------------------


def test_up_refuses_to_empty_a_state_dir_it_did_not_make(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    precious = tmp_path / "precious"
    (precious / "notes").mkdir(parents=True)
    (precious / "notes" / "thesis.txt").write_text("my thesis")
    monkeypatch.setenv("WEKNORA_STATE_DIR", str(precious))
    code, out = run(["up", "--port", str(free_port())])
    assert code == 1 and "holds files `up` did not make (notes)" in out, out
    no_traceback(out)
    assert (precious / "notes" / "thesis.txt").read_text() == "my thesis"


def test_a_state_dir_up_made_is_emptied_of_its_own_entries_only(tmp_path: Path) -> None:
    legacy = tmp_path / "legacy"  # an earlier `up`'s, from before the marker: only its own entries
    for name in ("files/local/a.md", "index/v3/seg", "moto-snapshot/state.sqlite"):
        (legacy / name).parent.mkdir(parents=True, exist_ok=True)
        (legacy / name).write_text("x")
    up.start_fresh(legacy)
    assert sorted(p.name for p in legacy.iterdir()) == [up.STATE_MARKER]
    (legacy / "files").mkdir()
    (legacy / "notes.txt").write_text("kept")  # the marker says `up` made it: its own entries go, no more
    up.start_fresh(legacy)
    assert sorted(p.name for p in legacy.iterdir()) == [up.STATE_MARKER, "notes.txt"]
    new = tmp_path / "new" / ".weknora"
    up.start_fresh(new)
    assert (new / up.STATE_MARKER).is_file()


def test_up_param_without_a_value_is_refused_before_anything_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "state"
    (state / "mine").mkdir(parents=True)
    monkeypatch.setenv("WEKNORA_STATE_DIR", str(state))
    with pytest.raises(SystemExit) as exited:
        cli.main(["up", "--param", "OperatorKey"])
    assert exited.value.code == 2 and "expected NAME=VALUE, got 'OperatorKey'" in capsys.readouterr().err
    assert (state / "mine").is_dir()
    args = cli.build_parser().parse_args(["up", "--param", "OperatorKey=a=b"])
    assert args.param == [("OperatorKey", "a=b")]


def test_up_on_a_busy_port_says_so_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEKNORA_STATE_DIR", str(tmp_path / "state"))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        started = time.monotonic()
        code, out = run(["up", "--port", str(port)])
    assert code == 1 and f"port {port} is in use" in out and time.monotonic() - started < 5, out
    no_traceback(out)
    assert not (tmp_path / "state").exists()  # nothing touched


# ---- follow loops that end ------------------------------------------------------------------------------


@pytest.mark.parametrize("status", ["draft", "deleting"])
def test_status_follow_stops_on_a_row_that_does_not_move_by_itself(fake: FakeClient, status: str) -> None:
    fake.rows["k1"] = [{"id": "k1", "parse_status": status}]
    code, out = run(["status", "k1", "--follow", "--interval", "0"])
    assert code == 0 and f"parse_status={status}" in out and "cost:" in out, out
    assert fake.looks_left > 190  # a look or two, not a loop


def test_ingest_stops_following_a_document_deleted_meanwhile(fake: FakeClient, tmp_path: Path) -> None:
    (tmp_path / "big.md").write_text("# big")
    gone = ApiError(404, "knowledge_not_found", "knowledge k-big not found")
    fake.rows["k-big"] = [
        {"id": "k-big", "parse_status": "processing"},
        {"id": "k-big", "parse_status": "deleting"},
        gone,
    ]
    started = time.monotonic()
    code, out = run(
        ["ingest", str(tmp_path / "big.md"), "--kb", "docs", "--interval", "0", "--timeout", "30"]
    )
    assert code == 1 and time.monotonic() - started < 10, out
    assert "✗ big.md deleted: knowledge k-big not found" in out, out


def test_a_presigned_upload_s_row_may_404_before_it_exists(fake: FakeClient, tmp_path: Path) -> None:
    (tmp_path / "huge.md").write_text("# huge")
    fake.upload_row = lambda kb_id, path: {"id": "k-huge"}  # type: ignore[method-assign]  # a presigned PUT
    not_yet = ApiError(404, "knowledge_not_found", "knowledge k-huge not found")
    fake.rows["k-huge"] = [not_yet, not_yet, {"id": "k-huge", "parse_status": "completed"}]
    code, out = run(["ingest", str(tmp_path / "huge.md"), "--kb", "docs", "--interval", "0"])
    assert code == 0 and "all 1 file(s) completed" in out, out


def test_an_unreadable_file_in_a_folder_fails_alone(fake: FakeClient, tmp_path: Path) -> None:
    folder = tmp_path / "unread"
    folder.mkdir()
    for name in ("1-ok.md", "2-locked.md", "3-ok.md"):
        (folder / name).write_text(f"# {name}")
    fake.unreadable.add("2-locked.md")
    code, out = run(["ingest", str(folder), "--kb", "docs", "--interval", "0"])
    assert code == 1 and fake.uploaded == ["1-ok.md", "3-ok.md"], out
    assert "✗ 2-locked.md upload failed: cannot read" in out and "Permission denied" in out, out
    assert "1-ok.md k-1-ok: completed" in out and "3-ok.md k-3-ok: completed" in out


def test_ingest_kb_takes_an_id_as_every_command_does() -> None:
    class Listing(ApiClient):
        def __init__(self) -> None:
            super().__init__("http://127.0.0.1:9/api/v1", "k")
            self.posted: list[Any] = []

        def call(self, method: str, path: str, **kw: Any) -> Any:
            if method == "POST":
                self.posted.append(kw["json"])
                return {"id": "new", **kw["json"]}
            kbs = [{"id": "kb-7", "name": "handbook"}, {"id": "kb-8", "name": "kb-7"}]
            return {"success": True, "data": kbs, "next_cursor": None} if kw.get("whole") else kbs

    client = Listing()
    assert client.ensure_kb("kb-7") == ({"id": "kb-7", "name": "handbook"}, False)  # the id wins
    assert client.ensure_kb("handbook")[0]["id"] == "kb-7"
    assert client.ensure_kb("fresh") == ({"id": "new", "name": "fresh"}, True)
    assert client.posted == [{"name": "fresh"}]


# ---- exit codes ----------------------------------------------------------------------------------------


def test_task_wait_exits_1_when_the_task_failed(fake: FakeClient) -> None:
    task = {"id": "t1", "kind": "faq_import", "status": "failed", "progress": {"error": "BadZipFile"}}
    fake.answers[("GET", "/tasks/t1")] = task
    code, out = run(["task", "t1", "--wait"])
    assert code == 1 and "faq_import failed" in out, out
    code, out = run(["task", "t1", "--wait", "--json"])
    assert code == 1 and json.loads(out)["status"] == "failed"
    fake.answers[("GET", "/tasks/t1")] = {**task, "status": "completed"}
    assert run(["task", "t1", "--wait"])[0] == 0


def test_watch_exits_nonzero_when_it_gave_up_with_documents_in_flight(fake: FakeClient) -> None:
    fake.stats_reply = {"documents": 1, "parse_status": {"processing": 1}, "chunks": 0}
    code, out = run(["watch", "docs", "--timeout", "0.05", "--interval", "0.01"])
    assert code == 1 and "stopped: 1 documents: processing 1" in out, out
    assert run(["watch", "docs", "--timeout", "0.05", "--interval", "0.01", "--json"])[0] == 1
    fake.stats_reply = {"documents": 1, "parse_status": {"completed": 1}, "chunks": 3}
    code, out = run(["watch", "docs", "--timeout", "0.05", "--interval", "0.01"])
    assert code == 0 and "settled:" in out, out


# ---- the network -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("api", ["not-a-url", "ftp://127.0.0.1:1/api/v1", "http://"])
def test_an_unusable_api_url_is_one_line(api: str) -> None:
    code, out = run(["kb", "list", "--api", api])
    assert code == 1 and "API error 0 bad_url: not an http(s) URL" in out, out
    no_traceback(out)
    code, out = run(["kb", "list", "--api", api, "--json"])
    assert code == 1 and json.loads(out)["error"]["code"] == "bad_url"


def test_an_api_that_never_answers_is_a_timeout(silent_port: int) -> None:
    client = ApiClient(f"http://127.0.0.1:{silent_port}/api/v1", "k", timeout=0.2)
    with pytest.raises(ApiError) as raised:
        client.call("GET", "/knowledge-bases")
    assert raised.value.code == "timeout" and "did not answer in time" in raised.value.message


def test_storage_that_never_answers_is_a_timeout_without_the_signature(silent_port: int) -> None:
    with pytest.raises(ApiError) as raised:
        storage_request("GET", f"http://127.0.0.1:{silent_port}/b/o?X-Amz-Signature=secret", timeout=0.2)
    assert raised.value.code == "timeout" and "secret" not in raised.value.message


def test_other_request_failures_are_a_network_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kw: Any) -> Any:
        raise requests.exceptions.ChunkedEncodingError("connection broken: IncompleteRead")

    monkeypatch.setattr(requests, "request", broken)
    with pytest.raises(ApiError) as raised:
        storage_request("GET", "http://127.0.0.1:1/b/o")
    assert raised.value.code == "network_error" and "IncompleteRead" in raised.value.message


# ---- local files and arguments --------------------------------------------------------------------------

BAD_INPUT: list[tuple[list[str], str]] = [
    (
        ["add-text", "docs", "t", "--file", "{tmp}/nope.md"],
        "cannot read {tmp}/nope.md: No such file or directory",
    ),
    (["add-text", "docs", "t", "--file", "{tmp}/bin.md"], "{tmp}/bin.md is not UTF-8 text (byte 0)"),
    (["preview", "{tmp}/nope.txt"], "cannot read {tmp}/nope.txt: No such file or directory"),
    (["faq", "import", "docs", "{tmp}/nope.json"], "cannot read {tmp}/nope.json: No such file or directory"),
    (["faq", "import", "docs", "{tmp}/bad.json"], "{tmp}/bad.json is not JSON: Expecting property name"),
    (
        ["download", "k1", "-o", "{tmp}/no/such/dir/out.md"],
        "cannot write {tmp}/no/such/dir/out.md: No such file",
    ),
]


@pytest.mark.parametrize(("argv", "message"), BAD_INPUT)
def test_a_file_that_cannot_be_read_or_written_is_one_line(
    fake: FakeClient, storage: str, tmp_path: Path, argv: list[str], message: str
) -> None:
    (tmp_path / "bin.md").write_bytes(b"\xff\xfe\x00bad")
    (tmp_path / "bad.json").write_text("{not json")
    fake.answers[("GET", "/knowledge/k1/file-url")] = {
        "url": storage,
        "kind": "original",
        "file_name": "a.md",
    }
    code, out = run([a.format(tmp=tmp_path) for a in argv])
    assert code == 1 and message.format(tmp=tmp_path) in out, out
    no_traceback(out)
    code, out = run([*(a.format(tmp=tmp_path) for a in argv), "--json"])
    assert code == 1 and json.loads(out)["error"]["message"].startswith(message.format(tmp=tmp_path)[:20])


def test_download_writes_into_a_folder_or_a_file(fake: FakeClient, storage: str, tmp_path: Path) -> None:
    fake.answers[("GET", "/knowledge/k1/file-url")] = {
        "url": storage,
        "kind": "original",
        "file_name": "a.md",
    }
    code, out = run(["download", "k1", "-o", str(tmp_path)])
    assert code == 0 and (tmp_path / "a.md").read_bytes() == b"stored bytes", out


@pytest.mark.parametrize(
    "argv",
    [
        ["kb", "update", "docs", "--set", "[1,2]"],
        ["kb", "create", "x", "--set", '"abc"'],
        ["edit", "k1", "--set", "5"],
        ["reparse", "k1", "--process-config", "[]"],
        ["preview", "--chunking", "null"],
    ],
)
def test_a_json_argument_must_be_an_object(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.build_parser().parse_args(argv)
    assert exited.value.code == 2 and "expected a JSON object" in capsys.readouterr().err


def test_cli_errors_are_json_with_json(fake: FakeClient, tmp_path: Path) -> None:
    code, out = run(["ingest", str(tmp_path / "nope.md"), "--kb", "docs", "--json"])
    assert code == 1 and json.loads(out)["error"]["code"] == "file_not_found", out
    code, out = run(["cost", "--json"])
    assert code == 2 and json.loads(out)["error"]["message"] == "give a knowledge id or --kb", out


# ---- what is printed ---------------------------------------------------------------------------------------

LISTING = [
    {
        "id": "7ff4286b-22f7-42f4-90ff-31e74936ae35",
        "file_name": name,
        "file_type": "md",
        "parse_status": "completed",
        "enable_status": "enabled",
        "chunk_count": 3,
        "created_at": "2026-12-05T23:16:04+00:00",
    }
    for name in ("a.md", "notes-2026.md", "plan:fire:[b]v2.md")
]


@pytest.mark.parametrize(("terminal", "width"), [(False, 80), (True, 80), (True, 100), (True, 200)])
def test_a_listing_keeps_its_names_at_any_width(terminal: bool, width: int) -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=terminal, color_system=None)
    print_rows(console, LS_COLUMNS, LISTING)
    out = buf.getvalue()
    assert "a.md" in out and "notes-2026.md" in out and "completed" in out and "enabled" in out, out
    if terminal:
        assert max(len(line) for line in out.splitlines()) <= width, out
    else:  # a pipe: every row whole on one line
        assert "│ 7ff4286b-22f7-42f4-90ff-31e74936ae35 │ plan:fire:[b]v2.md │" in out, out


def test_names_are_printed_as_written(fake: FakeClient, tmp_path: Path) -> None:
    (tmp_path / "plan:fire:v2.md").write_text("# plan")
    code, out = run(["ingest", str(tmp_path / "plan:fire:v2.md"), "--kb", "docs", "--interval", "0"])
    assert code == 0 and "plan:fire:v2.md k-plan:fire:v2: completed" in out and "🔥" not in out, out


# ---- console: the key stays off the browser's command line -------------------------------------------------


def test_console_opens_without_the_key(fake: FakeClient, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    monkeypatch.setattr(kb.webbrowser, "open", lambda url: opened.append(url) or True)
    api = ["--api", "http://127.0.0.1:8000/api/v1", "--key", "wk-secret"]
    code, out = run(["console", "--kb", "kb 1", *api])
    assert code == 0 and opened == ["http://127.0.0.1:8000/console/#kb=kb%201"], opened
    assert "wk-secret" not in out and "sign in there with your API key" in out
    code, out = run(["console", "--with-key", *api])
    assert code == 0 and len(opened) == 1  # printed, not opened
    assert "open http://127.0.0.1:8000/console/#key=wk-secret" in out
