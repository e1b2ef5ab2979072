"""The CLI against the real API: `weknora-ingest up` (the project app on the real template, in a thread)
driven by `cli.main(argv)` as a person would, every command's `--json` read back (issue 25, items 4-6).

One stack for the module's tests in a worker (a start costs seconds to tens of seconds on a shared machine);
each test makes its own knowledge bases, so `pytest -n` may spread them over workers.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from project_paths import ROOT
from rich.console import Console

from chalicelib.local import cli
from chalicelib.local.cli import kb as kb_module
from chalicelib.local.cli.routes import ROUTE_COMMANDS

KEY = "cli-api-test-key"
OPERATOR_KEY = "op-cli-api-test"


class PoolWarnings(logging.Handler):
    """urllib3's "Connection pool is full, discarding connection" warnings while the stack runs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        import traceback

        self.messages.append(record.getMessage() + "".join(traceback.format_stack()[-25:-8]))


class Stack:
    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.out = io.StringIO()
        self.stop_event = threading.Event()
        args = cli.build_parser().parse_args(["up", "--port", str(self.port), "--snapshot-interval", "0"])
        console = Console(file=self.out, width=250, force_terminal=False, color_system=None)
        self.result: list[int] = []
        self.thread = threading.Thread(
            target=lambda: self.result.append(cli.cmd_up(args, console, self.stop_event)), daemon=True
        )
        self.thread.start()
        deadline = time.monotonic() + 180
        while "weknora-ingest up" not in self.out.getvalue():
            assert self.thread.is_alive() and time.monotonic() < deadline, self.out.getvalue()
            time.sleep(0.1)
        self.api = f"http://127.0.0.1:{self.port}/api/v1"

    def run(self, *argv: str, operator: bool = False) -> tuple[int, str]:
        buf = io.StringIO()
        console = Console(file=buf, width=250, force_terminal=False, color_system=None)
        creds = ["--operator-key", OPERATOR_KEY] if operator else ["--key", KEY]
        code = cli.main([*argv, "--api", self.api, *creds], console)
        return code, buf.getvalue()

    def data(self, *argv: str, operator: bool = False) -> Any:
        code, out = self.run(*argv, "--json", operator=operator)
        assert code == 0, out
        return json.loads(out)

    def stop(self) -> str:
        self.stop_event.set()
        self.thread.join(60)
        assert self.result == [0], self.out.getvalue()
        return self.out.getvalue()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    saved_env = dict(os.environ)
    saved_path = list(sys.path)
    saved_cwd = Path.cwd()
    os.chdir(ROOT)
    os.environ["WEKNORA_STATE_DIR"] = str(tmp_path_factory.mktemp("cli-state") / "state")
    os.environ["WEKNORA_API_KEY"] = KEY
    os.environ["WEKNORA_OPERATOR_KEY"] = OPERATOR_KEY
    pool = PoolWarnings()
    logging.getLogger("urllib3.connectionpool").addHandler(pool)
    running = Stack()
    running.pool = pool  # type: ignore[attr-defined]
    try:
        yield running
    finally:
        out = running.stop()
        assert "saved" in out
        logging.getLogger("urllib3.connectionpool").removeHandler(pool)
        from chalicelib.bootstrap import set_deps

        set_deps(None)
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        os.environ.clear()
        os.environ.update(saved_env)


def leaf_commands(parser: Any = None, prefix: str = "") -> set[str]:
    """Every command path the parser accepts ("kb create", "ls", …)."""
    import argparse

    parser = parser or cli.build_parser()
    found: set[str] = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                path = f"{prefix} {name}".strip()
                below = leaf_commands(child, path)
                found |= below or {path}
    return found


def test_every_route_of_the_app_has_a_cli_command(stack: Stack) -> None:
    """The app `up` serves: each of its API routes (view name) maps to a command the parser accepts, so a
    route added without a command fails here. The browser console's pages are not API routes."""
    app = sys.modules["app"].app
    views = {
        entry.view_name
        for path, methods in app.routes.items()
        if path.startswith("/api/")
        for method, entry in methods.items()
        if method != "OPTIONS"  # every path's CORS preflight: the browser's, not a command's
    }
    assert views, "no routes found"
    missing = sorted(views - set(ROUTE_COMMANDS))
    assert not missing, f"routes without a CLI command (add them to cli/routes.py): {missing}"
    assert not sorted(set(ROUTE_COMMANDS) - views), "ROUTE_COMMANDS names routes the app no longer has"
    commands = leaf_commands()
    assert not sorted(set(ROUTE_COMMANDS.values()) - commands)


def ingest_a_directory_and_a_glob_then_read_everything_back(stack: Stack, tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    (docs / "deep" / ".hidden").mkdir(parents=True)
    (docs / "lighthouse.md").write_text("# Lighthouses\n\nThe keeper trims the wick at noon.\n")
    (docs / "deep" / "harbour.md").write_text("# Harbour\n\nBoats bring oil and bread on Mondays.\n")
    (docs / "deep" / ".hidden" / "secret.md").write_text("# not this one\n")
    (tmp_path / "loose.txt").write_text("Loose notes about the fog horn and the tide tables.\n")
    code, out = stack.run(
        "ingest", str(docs), str(tmp_path / "*.txt"), "--kb", "cli-docs", "--interval", "0.2"
    )
    assert code == 0, out
    assert "3 file(s) completed" in out
    assert re.search(r"3 file\(s\): 3 done, 0 failed, 0 waiting, 0 running; elapsed \d", out), out
    assert "secret.md" not in out

    rows = stack.data("ls", "cli-docs")
    assert sorted(r["file_name"] for r in rows) == ["harbour.md", "lighthouse.md", "loose.txt"]
    assert [r["file_name"] for r in stack.data("ls", "cli-docs", "--type", "txt")] == ["loose.txt"]
    assert stack.data("ls", "cli-docs", "--status", "failed") == []
    code, out = stack.run("ls", "cli-docs")
    assert code == 0 and "3 document(s)" in out and "lighthouse.md" in out

    stats = stack.data("kb", "stats", "cli-docs")
    assert stats["documents"] == 3 and stats["parse_status"] == {"completed": 3}
    assert stats["chunks"] >= 3 and stats["oldest_waiting"] is None
    code, out = stack.run("watch", "cli-docs", "--interval", "0.1")
    assert code == 0 and "settled: 3 documents: completed 3" in out, out
    code, out = stack.run("watch", "cli-docs", "--json", "--interval", "0.1")
    looks = [json.loads(line) for line in out.splitlines()]  # JSON Lines: one stats document a look
    assert code == 0 and looks[-1]["parse_status"] == {"completed": 3}

    # item 6: the stack's console has one line per finished document, with its time and chunks
    log = stack.out.getvalue()
    for name in ("lighthouse.md", "harbour.md", "loose.txt"):
        lines = [ln for ln in log.splitlines() if f" {name} " in ln]
        assert len(lines) == 1, log
        assert re.search(rf"completed +{re.escape(name)}  \d+\.\ds  \d+ chunks?  \(", lines[0]), lines
    assert " 200 " not in log and '"GET /api' not in log  # no access lines without --verbose
    assert not [m for m in stack.pool.messages if "pool is full" in m]  # type: ignore[attr-defined]

    lighthouse = next(r for r in rows if r["file_name"] == "lighthouse.md")
    kid = lighthouse["id"]
    assert stack.data("show", kid)["parse_status"] == "completed"
    status = stack.data("status", kid)
    assert status["knowledge"]["id"] == kid and status["waiting"] is False
    assert {s["span_id"] for s in status["spans"]["trace"]} >= {"docreader", "chunking", "embedding"}
    code, out = stack.run("status", kid)
    assert code == 0 and "docreader" in out and "cost:" in out

    chunks = stack.data("chunks", "list", kid)
    assert chunks and "keeper" in " ".join(c["content"] for c in chunks)
    assert stack.data("chunks", "show", kid, chunks[0]["id"])["id"] == chunks[0]["id"]
    target = tmp_path / "out"
    target.mkdir()
    saved = stack.data("download", kid, "-o", str(target))
    assert Path(saved["path"]).read_bytes() == (docs / "lighthouse.md").read_bytes()

    hits = stack.data("search", "--kb", "cli-docs", "who trims the wick", "-n", "2")
    assert hits and hits[0]["knowledge_id"] == kid
    assert stack.data("cost", kid)["knowledge_id"] == kid
    assert stack.data("cost", "--kb", "cli-docs")["documents"] == 3


def kb_tags_edit_move_rm_and_tasks(stack: Stack) -> None:
    made = stack.data("kb", "create", "cli-other", "--description", "the second one")
    assert made["name"] == "cli-other"
    names = {k["name"] for k in stack.data("kb", "list")}
    assert {"cli-docs", "cli-other"} <= names
    assert stack.data("kb", "update", "cli-other", "--description", "changed")["description"] == "changed"
    assert stack.data("kb", "show", made["id"])["description"] == "changed"

    tag = stack.data("tags", "create", "cli-docs", "urgent", "--color", "#ff0000")
    assert tag["name"] == "urgent"
    rows = {r["file_name"]: r for r in stack.data("ls", "cli-docs")}
    harbour, loose = rows["harbour.md"]["id"], rows["loose.txt"]["id"]
    edited = stack.data("edit", harbour, "--tag", tag["id"], "--title", "Harbour notes")
    assert edited["tag_ids"] == [tag["id"]] and edited["title"] == "Harbour notes"
    assert [r["id"] for r in stack.data("ls", "cli-docs", "--tag", tag["id"])] == [harbour]
    assert stack.data("tags", "show", "cli-docs", tag["id"])["id"] == tag["id"]

    moved = stack.data("move", harbour, "--to", "cli-other", "--wait")
    assert moved["status"] == "completed", moved
    assert [r["id"] for r in stack.data("ls", "cli-other")] == [harbour]

    manual = stack.data("add-text", "cli-other", "A note", "--content", "# Note\n\nThe tide turns at six.\n")
    assert manual["id"]
    gone = stack.data("rm", loose, "--wait")
    assert gone["status"] == "completed", gone
    assert loose not in {r["id"] for r in stack.data("ls", "cli-docs")}
    started = stack.data("retry-failed", "cli-docs")
    assert stack.data("task", started["task_id"], "--wait")["status"] == "completed"
    stack.data("share", "list", "cli-docs")
    code, out = stack.run("task", started["task_id"])
    assert code == 0 and f"task {started['task_id']} retry_failed completed" in out, out


def test_a_failed_document_gets_one_line_in_the_stack_s_console(stack: Stack, tmp_path: Path) -> None:
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4\n1 0 obj\n<<")  # truncated: the docreader fails it at once
    code, out = stack.run("ingest", str(broken), "--kb", "cli-broken", "--interval", "0.1")
    assert code == 1 and "broken.pdf failed" in out, out
    deadline = time.monotonic() + 10  # the watcher looks twice a second
    while " broken.pdf " not in stack.out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = [ln for ln in stack.out.getvalue().splitlines() if " broken.pdf " in ln]
    assert len(lines) == 1 and re.search(r"failed +broken\.pdf  \d+\.\ds  [a-z_]+: ", lines[0]), lines


def test_faq_import_with_progress_and_failed_rows(stack: Stack, tmp_path: Path) -> None:
    stack.data("kb", "create", "cli-faq", "--type", "faq")
    entries = [
        {"standard_question": "How do I reset the lamp?", "answers": ["Hold the switch for ten seconds."]},
        {"standard_question": "", "answers": ["an answer without a question"]},
    ]
    source = tmp_path / "faq.json"
    source.write_text(json.dumps(entries))
    code, out = stack.run("faq", "import", "cli-faq", str(source))
    assert code == 1, out  # a partial import is not a success
    assert re.search(r"faq_import partial: 2/2 done, 1 succeeded, 1 failed", out), out
    assert "1 row(s) failed: `weknora-ingest faq failed cli-faq` shows them" in out
    listed = stack.data("faq", "list", "cli-faq")
    assert [e["standard_question"] for e in listed] == ["How do I reset the lamp?"]
    last = stack.data("faq", "failed", "cli-faq")
    assert (last["status"], last["success"], last["failed"]) == ("partial", 1, 1)
    code, out = stack.run("faq", "failed", "cli-faq")
    assert code == 0 and "an answer without a question" in out and "1 failed row(s)" in out, out
    entry = stack.data("faq", "add", "cli-faq", "Where is the key?", "--answer", "Under the mat.")
    assert stack.data("faq", "show", "cli-faq", entry["id"])["answers"] == ["Under the mat."]


def test_service_and_operator_commands(stack: Stack) -> None:
    assert stack.data("health")
    assert isinstance(stack.data("engines"), list | dict)
    assert isinstance(stack.data("models"), list | dict)
    assert isinstance(stack.data("settings", "show"), dict)
    code, out = stack.run("openapi")
    assert code == 0 and "/api/v1/knowledge-bases/{kb_id}/stats" in json.loads(out)["paths"]
    tenants = stack.data("tenant", "list", operator=True)
    assert isinstance(tenants, list) and tenants


def test_api_errors_print_the_stable_code_and_exit_1(
    stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = stack.run("show", "no-such-knowledge")
    assert code == 1 and re.search(r"API error 404 \w+: ", out), out
    code, out = stack.run("show", "no-such-knowledge", "--json")
    error = json.loads(out)["error"]
    assert code == 1 and error["status"] == 404 and error["code"] and error["message"]
    buf = io.StringIO()
    console = Console(file=buf, width=250, force_terminal=False, color_system=None)
    code = cli.main(["kb", "list", "--api", stack.api, "--key", "wrong-key"], console)
    assert code == 1 and re.search(r"API error 401 \w+: ", buf.getvalue()), buf.getvalue()
    # `up` without --verbose: no access line for a 200, a 404 or a 401 (the server thread writes to stderr)
    assert '"GET /api/v1/' not in capsys.readouterr().err


def test_console_opens_the_browser_on_the_kb(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    monkeypatch.setattr(kb_module.webbrowser, "open", lambda url: opened.append(url) or True)
    kb_id = stack.data("kb", "create", "cli-console")["id"]
    data = stack.data("console", "--kb", "cli-console")
    # without the key: a browser's command line is readable by every user of the machine
    assert opened == [data["url"]] == [f"http://127.0.0.1:{stack.port}/console/#kb={kb_id}"]
    data = stack.data("console", "--kb", "cli-console", "--with-key")
    assert data == {"url": f"http://127.0.0.1:{stack.port}/console/#key={KEY}&kb={kb_id}", "opened": False}
    assert len(opened) == 1


def the_rest_of_the_commands(stack: Stack, tmp_path: Path) -> None:
    clone = stack.data("kb", "clone", "cli-docs", "--name", "cli-clone", "--wait")
    assert (clone["kind"], clone["status"], clone["succeeded"]) == (
        "clone_kb",
        "completed",
        1,
    )  # lighthouse.md: the others moved or deleted
    assert [r["file_name"] for r in stack.data("ls", "cli-clone")] == ["lighthouse.md"]
    assert stack.data("kb", "delete", "cli-clone", "--wait")["status"] == "completed"
    assert "cli-clone" not in {k["name"] for k in stack.data("kb", "list")}
    assert stack.data("kb", "graph", "cli-docs", "keeper")["relations"] == []
    assert stack.data("kb", "wiki", "cli-docs")["pages"] == []

    acme = stack.data("tenant", "create", "acme", "--scope", "read", operator=True)
    tenant_id = acme["tenant"]["id"]
    assert acme["key"]["scope"] == "read" and acme["api_key"]
    assert [k["id"] for k in stack.data("key", "list", tenant_id, operator=True)] == [acme["key"]["id"]]
    stack.data("tenant", "quotas", tenant_id, "--documents", "10", operator=True)
    stack.data("share", "add", "cli-docs", tenant_id)
    assert tenant_id in json.dumps(stack.data("share", "list", "cli-docs"))
    stack.data("share", "remove", "cli-docs", tenant_id)
    assert tenant_id not in json.dumps(stack.data("share", "list", "cli-docs"))

    tag = stack.data("tags", "create", "cli-docs", "later")
    assert stack.data("tags", "update", "cli-docs", tag["id"], "--name", "someday")["name"] == "someday"
    stack.data("tags", "delete", "cli-docs", tag["id"])
    assert "someday" not in json.dumps(stack.data("tags", "list", "cli-docs"))

    draft = stack.data(
        "add-text", "cli-docs", "Draft", "--content", "# Draft\n\nThe bell rings twice.\n", "--draft"
    )
    assert draft["parse_status"] == "draft"
    assert stack.data("publish", draft["id"])["parse_status"] in ("pending", "processing", "completed")
    code, out = stack.run("status", draft["id"], "--follow", "--interval", "0.2")
    assert code == 0 and "parse_status=completed" in out, out
    chunk = stack.data("chunks", "list", draft["id"])[0]
    assert stack.data("chunks", "edit", draft["id"], chunk["id"], "--disable")["is_enabled"] is False
    again = stack.data("reparse", draft["id"])
    assert again["attempt"] == 2
    cancelled = stack.data("cancel", draft["id"])
    assert cancelled["parse_status"] in ("cancelled", "completed"), cancelled  # it may finish first

    text = tmp_path / "notes.md"
    text.write_text("# One\n\nfirst part\n\n# Two\n\nsecond part\n")
    preview = stack.data("preview", str(text))
    assert preview and "first part" in json.dumps(preview)
    assert stack.data("settings", "set", "--engine-rules", '{"docx": "markitdown"}') == {
        "parser_engine_rules": {"docx": "markitdown"}
    }

    stack.data("kb", "create", "cli-faq-2", "--type", "faq")
    entry = stack.data(
        "faq", "add", "cli-faq-2", "Who has the spare key?", "--answer", "The keeper.", "--tag", "keys"
    )
    changed = stack.data("faq", "update", "cli-faq-2", entry["id"], "--answer", "The harbour master.")
    assert changed["answers"] == ["The harbour master."]
    assert "keys" in json.dumps(stack.data("faq", "tags", "cli-faq-2"))
    stack.data("faq", "rm", "cli-faq-2", entry["id"])
    assert entry["id"] not in {e["id"] for e in stack.data("faq", "list", "cli-faq-2")}

    code, out = stack.run("add-url", "cli-docs", "http://127.0.0.1:1/x")
    assert code == 1 and "API error 400 ssrf_blocked" in out, out
    code, out = stack.run("ingest", "http://127.0.0.1:1/page", "--kb", "cli-docs", "--interval", "0.1")
    assert code == 1 and "upload failed: ssrf_blocked: URL rejected" in out, out


def test_search_filters_from_the_command_line(stack: Stack, tmp_path: Path) -> None:
    """`search` flags narrow the hits as the API's filters do (every file is about harbours)."""
    docs = tmp_path / "harbour"
    docs.mkdir()
    (docs / "pilots.md").write_text("# Pilots\n\nHarbour pilots guide ships past the breakwater.\n")
    (docs / "cranes.md").write_text("# Cranes\n\nHarbour cranes lift containers off the ships.\n")
    (docs / "fees.txt").write_text("Harbour fees are paid before ships leave the harbour.\n")
    code, out = stack.run("ingest", str(docs), "--kb", "cli-filters", "--interval", "0.2")
    assert code == 0, out
    ids = {r["file_name"]: r["id"] for r in stack.data("ls", "cli-filters")}
    names = {v: k for k, v in ids.items()}
    tag = stack.data("tags", "create", "cli-filters", "cargo")["id"]
    stack.data(
        "edit", ids["cranes.md"], "--tag", tag, "--set", '{"metadata": {"dept": "cargo", "year": 2024}}'
    )
    stack.data("edit", ids["pilots.md"], "--set", '{"metadata": {"dept": "ops", "year": 2025}}')
    stack.data("edit", ids["fees.txt"], "--set", '{"metadata": {"dept": "ops", "year": "2024"}}')

    def found(*flags: str) -> set[str]:
        hits = stack.data("search", "--kb", "cli-filters", "harbour ships", "-n", "10", *flags)
        return {names[h["knowledge_id"]] for h in hits}

    assert found("--retriever", "keyword") == {"pilots.md", "cranes.md", "fees.txt"}
    assert found("--knowledge", ids["pilots.md"], "--knowledge", ids["fees.txt"]) == {"pilots.md", "fees.txt"}
    assert found("--tag", tag) == {"cranes.md"}
    assert found("--type", "txt") == {"fees.txt"}
    assert found("--meta", "dept=ops") == {"pilots.md", "fees.txt"}
    assert found("--meta", "year=2024,2025") == {"pilots.md", "cranes.md"}  # numbers, not the string
    assert found("--meta", 'year="2024"') == {"fees.txt"}
    assert found("--meta", "dept=ops", "--type", "md") == {"pilots.md"}
    keyword = stack.data("search", "--kb", "cli-filters", "harbour ships", "--retriever", "keyword")
    assert {h["match_type"] for h in keyword} == {"keyword"}
    best = stack.data(
        "search", "--kb", "cli-filters", "harbour ships", "--retriever", "keyword", "--min-score", "1"
    )
    assert [h["knowledge_id"] for h in best] == [keyword[0]["knowledge_id"]]
    vector = stack.data(
        "search", "--kb", "cli-filters", "harbour", "--retriever", "vector", "--vector-weight", "1"
    )
    assert vector and {h["match_type"] for h in vector} == {"vector"}
    code, out = stack.run("search", "--kb", "cli-filters", "harbour", "--min-score", "2")
    assert code == 1 and "API error 400 invalid_min_score" in out, out


def test_a_session_at_the_terminal(stack: Stack, tmp_path: Path) -> None:
    """One story, in order (each step works on what the one before made): ingest and read back, then
    organise and change, then every other command."""
    ingest_a_directory_and_a_glob_then_read_everything_back(stack, tmp_path)
    kb_tags_edit_move_rm_and_tasks(stack)
    the_rest_of_the_commands(stack, tmp_path)
    assert not stack.pool.messages, stack.pool.messages[:1]  # type: ignore[attr-defined]
