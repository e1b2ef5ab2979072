"""What the API answers is another tenant's text as often as not (a knowledge base shared read-only): names,
titles, tag names, chunks and error messages reach the terminal shown, never as control characters. An ESC
or a C1 CSI in them would clear the screen, retitle the window, write the clipboard (OSC 52) or draw fake
lines. And `download` writes only where the person said: the API's file name is a name, not a path.

The CLI runs whole (`cli.main`, its real ApiClient) against a small HTTP server answering hostile data."""

from __future__ import annotations

import ast
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from rich.console import Console

from chalicelib.local import cli
from chalicelib.local.cli import follow, output

#: an OSC 52 clipboard write, a screen clear, a C1 CSI colour, a line break and a bell in one name
HOSTILE = "Finance\x1b]52;c;ZWNobyBwd25lZA==\x07\x1b[2J\x9b31mFAKE\x1b[0m\nnext\r"
KB = {"id": "kb-1", "name": HOSTILE, "description": HOSTILE, "type": "document", "created_at": "2026-12-05"}
ROW = {
    "id": "k1",
    "kb_id": "kb-1",
    "title": HOSTILE,
    "file_name": HOSTILE,
    "file_type": "md",
    "parse_status": "failed",
    "error_message": HOSTILE,
    "created_at": "2026-12-05T23:16:04+00:00",
}


class HostileApi:
    """GET/POST path (no query) -> the envelope's `data`; `errors` answer the envelope's error."""

    def __init__(self) -> None:
        self.answers: dict[tuple[str, str], Any] = {}
        self.errors: dict[tuple[str, str], tuple[int, str, str]] = {}
        self.files: dict[str, bytes] = {}
        handler = self._handler()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        api = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                self.rfile.read(length)
                path = urlsplit(self.path).path
                if path in api.files:
                    self._send(200, api.files[path], "application/octet-stream")
                    return
                key = (self.command, path.removeprefix("/api/v1"))
                if key in api.errors:
                    status, code, message = api.errors[key]
                    body = {"success": False, "error": {"code": code, "message": message}}
                elif key in api.answers:
                    status, body = 200, {"success": True, "data": api.answers[key]}
                else:
                    status, body = (
                        599,
                        {"success": False, "error": {"code": "unexpected", "message": str(key)}},
                    )
                self._send(status, json.dumps(body).encode(), "application/json")

            def _send(self, status: int, data: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = _answer

        return Handler


@pytest.fixture
def hostile() -> Iterator[HostileApi]:
    api = HostileApi()
    api.answers.update(
        {
            ("GET", "/knowledge-bases"): [KB],
            ("GET", "/knowledge-bases/kb-1"): KB,
            ("GET", "/knowledge-bases/kb-1/tags"): {
                "items": [{"id": "t1", "name": HOSTILE, "color": HOSTILE}]
            },
            ("GET", "/knowledge-bases/kb-1/knowledge"): {"items": [ROW], "next_cursor": None},
            ("GET", "/knowledge-bases/kb-1/stats"): {
                "kb_id": "kb-1",
                "documents": 1,
                "parse_status": {HOSTILE: 1},
                "oldest_waiting": {"file_name": HOSTILE, "queue": HOSTILE, "waited_seconds": 3},
            },
            ("POST", "/knowledge-bases/kb-1/hybrid-search"): [
                {
                    "score": 0.5,
                    "knowledge_title": HOSTILE,
                    "chunk_id": "c1",
                    "content": f"line one\r\n{HOSTILE}\tend",
                    "copies": [{"knowledge_title": HOSTILE}],
                }
            ],
            ("GET", "/knowledge/k1"): ROW,
            ("GET", "/knowledge/k1/chunks/c1"): {"id": "c1", "content": f"first\n{HOSTILE}"},
            ("GET", "/knowledge/k1/spans"): {
                "knowledge_id": "k1",
                "attempt": 1,
                "parse_status": HOSTILE,
                "current_stage": HOSTILE,
                "last_error": HOSTILE,
                "trace": [{"span_id": "docreader", "status": "failed", "error_message": HOSTILE}],
            },
            ("GET", "/knowledge/k1/cost"): {
                "aws_dollars": 0.0,
                "model_dollars": 0.0,
                "prices_as_of": HOSTILE,
                "lines": [{"unit": HOSTILE, "quantity": 1, "dollars": 0.0}],
            },
        }
    )
    api.errors[("GET", "/knowledge/gone")] = (404, "knowledge_not_found", f"no document {HOSTILE}")
    yield api
    api.server.shutdown()
    api.server.server_close()


def run(api: HostileApi, argv: list[str], terminal: bool = False) -> tuple[int, str]:
    buf = io.StringIO()
    console = Console(file=buf, width=120, force_terminal=terminal, color_system=None)  # no styles: no ESC
    code = cli.main([*argv, "--api", f"{api.base}/api/v1", "--key", "k"], console=console)
    return code, buf.getvalue()


def raw_controls(out: str) -> set[str]:
    """The control characters a terminal would act on (line breaks are the output's own)."""
    return {c for c in out if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) < 0xA0}


COMMANDS = [
    ["kb", "list"],
    ["kb", "show", "kb-1"],
    ["kb", "stats", "kb-1"],
    ["tags", "list", "kb-1"],
    ["search", "--kb", "kb-1", "zebrafish"],
    ["show", "k1"],
    ["ls", "kb-1"],
    ["chunks", "show", "k1", "c1"],
    ["status", "k1"],
    ["cost", "k1"],
    ["show", "gone"],  # the API's error message
]


@pytest.mark.parametrize("terminal", [False, True])
@pytest.mark.parametrize("argv", COMMANDS, ids=[" ".join(c) for c in COMMANDS])
def test_text_from_the_api_never_reaches_the_terminal_as_control_characters(
    hostile: HostileApi, argv: list[str], terminal: bool
) -> None:
    code, out = run(hostile, argv, terminal)
    assert code == (1 if argv == ["show", "gone"] else 0), out
    assert raw_controls(out) == set(), repr(out)
    assert "Finance\\x1b" in out, out  # shown, so the person sees something is odd


def test_json_output_escapes_c1_controls_too(hostile: HostileApi) -> None:
    code, out = run(hostile, ["kb", "list", "--json"])
    assert code == 0 and raw_controls(out) == set(), repr(out)
    assert json.loads(out)[0]["name"] == HOSTILE  # still the API's data, to the character


def test_ingest_lines_and_the_live_table_show_control_characters(hostile: HostileApi, tmp_path: Path) -> None:
    hostile.answers[("POST", "/knowledge-bases/kb-1/knowledge/file")] = {
        "id": "k1",
        "parse_status": "pending",
    }
    (tmp_path / "a.md").write_text("# a")
    code, out = run(hostile, ["ingest", str(tmp_path / "a.md"), "--kb", "kb-1", "--interval", "0"])
    assert code == 1 and raw_controls(out) == set(), repr(out)
    assert "\\x1b" in out

    row = follow.Tracked(file=HOSTILE, knowledge_id=HOSTILE, parse_status=HOSTILE, error=HOSTILE)
    buf = io.StringIO()
    Console(file=buf, width=200, force_terminal=True, color_system=None).print(
        follow.progress_table([row], 0.0)
    )
    assert raw_controls(buf.getvalue()) == set(), repr(buf.getvalue())


def test_visible_keeps_line_breaks_only_where_a_field_has_lines() -> None:
    assert output.visible("a\x1bb\x9bc\x7f\td\ne\r") == "a\\x1bb\\x9bc\\x7f\\td\\ne\\r"
    assert output.visible("a\x1b\r\nb\tc\rd", multiline=True) == "a\\x1b\nb\tc\\rd"
    assert output.visible("数据 ünïcode [b]") == "数据 ünïcode [b]"


def test_rich_s_markup_escape_is_used_only_through_output() -> None:
    """Rich's `escape` alone lets ESC through: a module printing API text into markup uses
    `output.markup_safe` (escape after visible), so no call site can forget the control characters."""
    folder = Path(cli.__file__).parent
    importing = sorted(
        path.name
        for path in folder.glob("*.py")
        if path.name != "output.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ImportFrom) and node.module == "rich.markup"
    )
    assert importing == []


# ---- download: the API's file name is a name in the folder, never a path -----------------------------------


@pytest.fixture
def served_file(hostile: HostileApi) -> HostileApi:
    hostile.files["/blob"] = b"written by the server\n"
    return hostile


def file_url(api: HostileApi, file_name: str) -> None:
    api.answers[("GET", "/knowledge/k1/file-url")] = {
        "url": f"{api.base}/blob",
        "kind": "original",
        "file_name": file_name,
    }


@pytest.mark.parametrize("file_name", ["../escaped.txt", "/tmp/../{tmp}/abs/escaped.txt", "..\\escaped.txt"])
def test_download_writes_the_api_s_file_name_only_inside_the_folder(
    served_file: HostileApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_name: str
) -> None:
    work = tmp_path / "work"
    (tmp_path / "abs").mkdir()
    work.mkdir()
    monkeypatch.chdir(work)
    file_url(served_file, file_name.format(tmp=tmp_path))
    code, out = run(served_file, ["download", "k1"])
    assert code == 0, out
    assert [p.name for p in work.iterdir()] == ["escaped.txt"], out
    assert not (tmp_path / "escaped.txt").exists() and not (tmp_path / "abs" / "escaped.txt").exists()
    code, out = run(served_file, ["download", "k1", "-o", str(tmp_path / "abs")])
    assert code == 0 and (tmp_path / "abs" / "escaped.txt").read_bytes() == b"written by the server\n", out


@pytest.mark.parametrize("file_name", ["..", ".", "a/..", "/"])
def test_download_refuses_a_file_name_that_names_no_file(
    served_file: HostileApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, file_name: str
) -> None:
    monkeypatch.chdir(tmp_path)
    file_url(served_file, file_name)
    code, out = run(served_file, ["download", "k1"])
    assert code == 1 and "give -o PATH" in out, out
    assert list(tmp_path.iterdir()) == []
    code, out = run(served_file, ["download", "k1", "-o", "chosen.bin"])  # a name given: that is used
    assert code == 0 and (tmp_path / "chosen.bin").exists(), out


def test_download_never_overwrites_a_file_without_force(
    served_file: HostileApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    file_url(served_file, ".bashrc")
    (tmp_path / ".bashrc").write_text("mine\n")
    (tmp_path / "elsewhere.txt").write_text("mine too\n")
    (tmp_path / "link.txt").symlink_to(tmp_path / "elsewhere.txt")
    code, out = run(served_file, ["download", "k1"])
    assert code == 1 and "exists: --force overwrites it" in out, out
    assert (tmp_path / ".bashrc").read_text() == "mine\n"
    code, out = run(served_file, ["download", "k1", "-o", "link.txt"])  # a link is not followed either
    assert code == 1 and (tmp_path / "elsewhere.txt").read_text() == "mine too\n", out
    code, out = run(served_file, ["download", "k1", "--force"])
    assert code == 0 and (tmp_path / ".bashrc").read_bytes() == b"written by the server\n", out
