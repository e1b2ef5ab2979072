"""The CLI against a fake WeKnora API server.

TEST DOUBLE: the project's real HTTP API does not exist yet, so a small in-test HTTP server speaks the same
envelope and routes, and drives each knowledge item through pending → processing → completed/failed.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import sys
import threading
import time
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from rich.console import Console

from chalicelib.bootstrap import memory_deps
from chalicelib.domain.ids import api_key_hash
from chalicelib.local import cli
from chalicelib.operations.tenants import LOCAL_TENANT_ID
from chalicelib.settings import default_corpus

KEY = "k1"
STAGES = ["docreader", "chunking", "embedding"]
COST = {
    "aws_dollars": 0.000123,
    "model_dollars": 0.0,
    "prices_as_of": "2026-11-01",
    "lines": [{"unit": "sqs_requests", "quantity": 14.0, "unit_price": 4e-07, "dollars": 5.6e-06}],
    "model_tokens": [],
    "workflow_pending": 0,
}


@dataclass
class FakeApi:
    kbs: list[dict[str, Any]] = field(default_factory=list)
    knowledge: dict[str, dict[str, Any]] = field(default_factory=dict)
    polls: dict[str, int] = field(default_factory=dict)
    stored: dict[str, bytes] = field(default_factory=dict)
    uploads: list[str] = field(default_factory=list)
    search_bodies: list[dict[str, Any]] = field(default_factory=list)
    listings: int = 0
    base: str = ""

    def new_knowledge(self, kb_id: str, name: str) -> dict[str, Any]:
        kid = f"k{len(self.knowledge) + 1}"
        row = {"id": kid, "kb_id": kb_id, "file_name": name, "parse_status": "pending", "error_message": ""}
        self.knowledge[kid] = row
        self.polls[kid] = 0
        return row

    def advance(self, kid: str) -> None:
        """Each poll moves the item one stage on; files named fail* fail at chunking."""
        row = self.knowledge[kid]
        if row["parse_status"] in ("completed", "failed"):
            return
        self.polls[kid] += 1
        step = self.polls[kid]
        if row["file_name"].startswith("fail") and step >= 2:
            row.update(parse_status="failed", error_message="CHUNKING_FAILED: no text")
        elif step > len(STAGES):
            row.update(parse_status="completed", chunk_count=3)
        else:
            row["parse_status"] = "processing"

    def spans(self, kid: str) -> dict[str, Any]:
        row = self.knowledge[kid]
        step = self.polls[kid]
        trace = [{"span_id": "root", "parent_id": "", "status": "running", "outputs": {}}]
        for i, stage in enumerate(STAGES, 1):
            status = (
                "done"
                if i < step or row["parse_status"] == "completed"
                else "running"
                if i == step
                else "pending"
            )
            if row["parse_status"] == "failed" and stage == "chunking":
                status = "failed"
            outputs = {"chunks": 3} if stage == "chunking" and status == "done" else {}
            node: dict[str, Any] = {
                "span_id": stage,
                "parent_id": "root",
                "status": status,
                "outputs": outputs,
            }
            if stage == "embedding" and status == "running":  # the spans API's progress for the stage
                node["progress"] = {
                    "unit": "chunks",
                    "done": 720,
                    "total": 3152,
                    "percent": 22.8,
                    "rate_per_second": 24.0,
                    "eta_seconds": 101.3,
                }
            trace.append(node)
        trace.append(
            {"span_id": "embedding.batch[0]", "parent_id": "embedding", "status": "pending", "outputs": {}}
        )
        current = STAGES[min(step, len(STAGES)) - 1] if step else ""
        return {
            "knowledge_id": kid,
            "attempt": 1,
            "parse_status": row["parse_status"],
            "current_stage": current,
            "trace": trace,
        }


def make_handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any]) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _ok(self, data: Any, status: int = 200) -> None:
            self._send(status, {"success": True, "data": data})

        def _err(self, status: int, code: str, message: str, data: Any = None) -> None:
            body: dict[str, Any] = {"success": False, "error": {"code": code, "message": message}}
            if data is not None:
                body["data"] = data
            self._send(status, body)

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length", 0)))

        def _authed(self) -> bool:
            if self.headers.get("X-API-Key") != KEY:
                self._err(401, "unauthorized", "bad API key")
                return False
            return True

        def do_GET(self) -> None:
            if not self._authed():
                return
            if self.path == "/api/v1/knowledge-bases":
                return self._ok(api.kbs)
            listing = re.fullmatch(r"/api/v1/knowledge-bases/(\w+)/knowledge\?page_size=100", self.path)
            if listing:  # one page holds every row here; each listing moves every row on, as a GET does
                api.listings += 1
                rows = [k for k in api.knowledge.values() if k["kb_id"] == listing.group(1)]
                for row in rows:
                    api.advance(row["id"])
                return self._ok({"items": rows, "next_cursor": None})
            m = re.fullmatch(r"/api/v1/knowledge/(\w+)(/spans|/cost)?", self.path)
            if m and m.group(1) in api.knowledge:
                kid = m.group(1)
                if m.group(2) == "/spans":
                    return self._ok(api.spans(kid))
                if m.group(2) == "/cost":
                    return self._ok(COST)
                api.advance(kid)
                return self._ok(api.knowledge[kid])
            self._err(404, "not_found", self.path)

        def do_POST(self) -> None:
            if not self._authed():
                return
            body = self._body()
            if self.path == "/api/v1/knowledge-bases":
                kb = {"id": f"kb{len(api.kbs) + 1}", "name": json.loads(body)["name"]}
                api.kbs.append(kb)
                return self._ok(kb, 201)
            m = re.fullmatch(
                r"/api/v1/knowledge-bases/(\w+)/(knowledge/file|knowledge/upload-url|hybrid-search)",
                self.path,
            )
            if not m:
                return self._err(404, "not_found", self.path)
            kb_id, action = m.groups()
            if action == "knowledge/file":
                assert self.headers["Content-Type"].startswith("multipart/form-data")
                name = re.search(rb'name="file"; filename="([^"]+)"', body)
                assert name is not None
                fname = name.group(1).decode()
                api.uploads.append(fname)
                if re.search(rb'filename="[^"]+"\r\nContent-Type: [^\r]+\r\n\r\n\r\n--', body):
                    return self._err(400, "empty_file", "the file is empty")
                if fname.startswith("dup"):
                    existing = api.new_knowledge(kb_id, "original.txt")
                    return self._err(409, "duplicate_file", "file already exists", existing)
                return self._ok(api.new_knowledge(kb_id, fname))
            if action == "knowledge/upload-url":
                req = json.loads(body)
                row = api.new_knowledge(kb_id, req["file_name"])
                return self._ok(
                    {
                        "upload_url": f"{api.base}/storage/{row['id']}?X-Amz-Signature=x",
                        "headers": {"Content-Type": "application/octet-stream"},
                        "knowledge_id": row["id"],
                    }
                )
            req = json.loads(body)
            api.search_bodies.append(req)
            hits = [
                {
                    "content": "Moto emulates SQS [bold]really[/bold].",
                    "score": 0.91,
                    "knowledge_id": "k1",
                    "chunk_id": "c1",
                    "knowledge_title": "aws.md",
                },
                {
                    "content": "Chalice registers handlers.",
                    "score": 0.52,
                    "knowledge_id": "k1",
                    "chunk_id": "c2",
                    "knowledge_title": "aws.md",
                },
            ]
            return self._ok(hits[: req["match_count"]])

        def do_PUT(self) -> None:
            m = re.fullmatch(r"/storage/(\w+)\?.*", self.path)
            assert m and "X-API-Key" not in self.headers  # presigned URL: no API key sent to storage
            api.stored[m.group(1)] = self._body()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    return Handler


@pytest.fixture
def api() -> Iterator[FakeApi]:
    fake = FakeApi()
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(fake))
    fake.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield fake
    server.shutdown()
    server.server_close()


def run(argv: list[str], terminal: bool = False) -> tuple[int, str]:
    buf = io.StringIO()
    console = Console(file=buf, width=160, force_terminal=terminal, color_system=None)
    code = cli.main(argv, console=console)
    return code, buf.getvalue()


def api_args(api: FakeApi) -> list[str]:
    return ["--api", f"{api.base}/api/v1", "--key", KEY]


def test_ingest_creates_the_kb_uploads_and_follows_to_completion(api: FakeApi, tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("hello")
    code, out = run(["ingest", str(a), "--kb", "docs", "--interval", "0.01", *api_args(api)])
    assert code == 0, out
    assert api.kbs == [{"id": "kb1", "name": "docs"}]
    assert "created" in out and "all 1 file(s) completed" in out
    assert api.knowledge["k1"]["parse_status"] == "completed"
    assert "embedding(running) [####................] 720/3152 chunks" in out  # progress while it runs


def test_ingest_on_a_terminal_draws_a_live_table(api: FakeApi, tmp_path: Path) -> None:
    a = tmp_path / "[x].txt"  # rich markup characters in a file name must be shown as they are
    a.write_text("hello")
    code, out = run(["ingest", str(a), "--kb", "docs", "--interval", "0.01", *api_args(api)], terminal=True)
    assert code == 0
    assert "┃ file" in out and "[x].txt" in out and "completed" in out


def test_ingest_reports_failure_duplicates_and_large_files(api: FakeApi, tmp_path: Path) -> None:
    api.kbs.append({"id": "kb7", "name": "docs"})
    ok, bad, dup, big = (tmp_path / n for n in ("ok.txt", "fail.txt", "dup.txt", "big.bin"))
    ok.write_text("fine")
    bad.write_text("broken")
    dup.write_text("again")
    big.write_bytes(b"\x00\x01" * (cli.DIRECT_UPLOAD_MAX_BYTES // 2 + 1))
    argv = ["ingest", str(ok), str(bad), str(dup), str(big), "--kb", "docs", "--interval", "0.01"]
    code, out = run([*argv, *api_args(api)])
    assert code == 1
    assert len(api.kbs) == 1  # found by name, not created again
    assert api.uploads == ["ok.txt", "fail.txt", "dup.txt"]  # the big one went through upload-url
    (big_id,) = [k for k, row in api.knowledge.items() if row["file_name"] == "big.bin"]
    assert api.stored[big_id] == big.read_bytes()
    assert re.search(r"duplicate of k\d", out)
    assert "fail.txt failed: CHUNKING_FAILED: no text" in out
    assert all(row["parse_status"] in ("completed", "failed") for row in api.knowledge.values())


def test_ingest_gives_up_after_the_timeout(api: FakeApi, tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_text("x")
    code, out = run(["ingest", str(a), "--kb", "d", "--interval", "0.01", "--timeout", "0", *api_args(api)])
    assert code == 1 and "after 0s" in out


def test_status_prints_the_stage_tree(api: FakeApi) -> None:
    row = api.new_knowledge("kb1", "x.pdf")
    api.polls[row["id"]] = 2  # status reads the row (a poll: step 3, embedding), then the spans
    code, out = run(["status", row["id"], *api_args(api)])
    assert code == 0
    lines = out.splitlines()
    assert "current_stage=embedding" in lines[0]
    assert any(re.search(r"chunking done chunks=3", ln) for ln in lines)
    emb = next(i for i, ln in enumerate(lines) if "embedding running" in ln)
    batch = next(i for i, ln in enumerate(lines) if "embedding.batch[0]" in ln)
    assert batch > emb and lines[batch].index("embedding.batch") > lines[emb].index("embedding")  # nested
    assert "720/3152 chunks 24.0/s ETA 1m41s" in lines[emb]  # the stage's progress bar
    assert "cost: $0.000123 AWS" in out and "sqs_requests" in out and "2026-11-01" in out


def test_search_prints_the_top_chunks(api: FakeApi) -> None:
    api.kbs.append({"id": "kb3", "name": "docs"})
    code, out = run(["search", "--kb", "docs", "what emulates sqs", "-n", "1", *api_args(api)])
    assert code == 0
    assert api.search_bodies == [{"query_text": "what emulates sqs", "match_count": 1}]
    assert (
        "Moto emulates SQS [bold]really[/bold]." in out and "0.9100" in out and "Chalice registers" not in out
    )
    code, out = run(["search", "--kb", "nope", "q", *api_args(api)])
    assert code == 1 and "no knowledge base named 'nope'" in out


def test_search_flags_become_the_request_s_filters(api: FakeApi) -> None:
    api.kbs.append({"id": "kb3", "name": "docs"})
    argv = ["search", "--kb", "docs", "q", "-n", "3", "--knowledge", "k1", "--knowledge", "k2"]
    argv += [
        "--tag",
        "t1",
        "--type",
        "pdf",
        "--type",
        ".MD",
        "--meta",
        "dept=ops",
        "--meta",
        "year=2024,2025",
    ]
    argv += ["--meta", 'code="007"', "--meta", "year=2026", "--meta", 'note="a,b"', "--meta", "draft=false"]
    argv += ["--min-score", "0.25", "--retriever", "keyword", "--vector-weight", "0.7", "--per-document", "2"]
    argv += ["--collapse-copies"]
    code, out = run([*argv, *api_args(api)])
    assert code == 0, out
    assert api.search_bodies == [
        {
            "query_text": "q",
            "match_count": 3,
            "knowledge_ids": ["k1", "k2"],
            "tag_ids": ["t1"],
            "file_types": ["pdf", ".MD"],  # the API normalises the case and the dot
            "metadata": {
                "dept": "ops",
                "year": {"in": [2024, 2025, 2026]},  # numbers as JSON numbers; a repeated key widens its `in`
                "code": "007",  # a quoted value stays a string
                "note": "a,b",
                "draft": False,
            },
            "min_score": 0.25,
            "retriever": "keyword",
            "vector_weight": 0.7,
            "max_chunks_per_document": 2,
            "collapse_copies": True,
        }
    ]
    for bad in (["--meta", "novalue"], ["--meta", "=x"], ["--retriever", "bm25"], ["--min-score", "high"]):
        with pytest.raises(SystemExit):  # argparse refuses before any request
            run(["search", "--kb", "docs", "q", *bad, *api_args(api)])
    assert len(api.search_bodies) == 1


def test_api_errors_become_exit_code_1(api: FakeApi, tmp_path: Path) -> None:
    code, out = run(["status", "k1", "--api", f"{api.base}/api/v1", "--key", "wrong"])
    assert code == 1 and "401 unauthorized: bad API key" in out
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, out = run(["status", "k1", "--api", f"http://127.0.0.1:{port}/api/v1", "--key", KEY])
    assert code == 1 and "cannot reach" in out


def test_up_serves_the_project_app_and_bootstraps_the_tenant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fixtures = Path(__file__).parent / "fixtures"
    (tmp_path / "infra").mkdir()
    for name in ("template.json", "flow.asl.json"):
        (tmp_path / "infra" / name).write_text((fixtures / name).read_text())
    (tmp_path / "app.py").write_text(
        "import os\n"
        "from chalice import Chalice\n"
        "app = Chalice(app_name='uptest')\n"
        "STATE = os.environ['WEKNORA_STATE_DIR']\n"
        "@app.route('/api/v1/ping')\n"
        "def ping():\n"
        "    return {'success': True, 'data': {'state': STATE, 'table': os.environ['DOCS_TABLE']}}\n"
    )
    # the app's composition root: the in-memory set, whose tenants the test reads back
    deps = memory_deps()
    monkeypatch.setitem(sys.modules, "chalicelib.bootstrap", types.SimpleNamespace(get_deps=lambda: deps))
    monkeypatch.delitem(sys.modules, "app", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))  # `up` puts the cwd (this fake app) on sys.path
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WEKNORA_API_KEY", "secret-key")
    monkeypatch.delenv("WEKNORA_STATE_DIR", raising=False)
    saved_env = dict(os.environ)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    stop = threading.Event()
    buf = io.StringIO()
    console = Console(file=buf, width=200, force_terminal=False, color_system=None)
    args = cli.build_parser().parse_args(["up", "--port", str(port)])
    result: list[int] = []
    thread = threading.Thread(target=lambda: result.append(cli.cmd_up(args, console, stop)), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while "weknora-ingest up" not in buf.getvalue() and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        out = buf.getvalue()
        assert f"http://127.0.0.1:{port}/api/v1" in out and "secret-key" in out
        resp = requests.get(f"http://127.0.0.1:{port}/api/v1/ping", timeout=10)
        assert resp.json()["data"] == {"state": str(tmp_path / ".weknora"), "table": "lt-docs"}
        local = deps.tenants.get(LOCAL_TENANT_ID)
        assert local is not None and local.api_key_hash == api_key_hash("secret-key")
    finally:
        stop.set()
        thread.join(20)
        sys.modules.pop("app", None)
        os.environ.clear()
        os.environ.update(saved_env)
    assert result == [0]


# ---- check-corpus -----------------------------------------------------------------------------------------

MANIFEST_HEAD = "file\ttype\tbytes\tpages\tsource_package\tlicense\texercises\n"


def fake_corpus(root: Path, files: dict[str, bytes]) -> Path:
    root.mkdir(parents=True)
    rows = [f"{name}\t{name.rsplit('.', 1)[-1]}\t{len(data)}\t\t-\t-\t-\n" for name, data in files.items()]
    (root / "MANIFEST.tsv").write_text(MANIFEST_HEAD + "".join(rows))
    for name, data in files.items():
        (root / name).write_bytes(data)
    return root


def test_check_corpus_arguments_and_the_default_corpus(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WEKNORA_CORPUS", str(tmp_path / "mine"))
    args = cli.build_parser().parse_args(["check-corpus"])
    assert (args.corpus, args.only, args.kb, args.timeout) == (tmp_path / "mine", None, None, 3600.0)
    args = cli.build_parser().parse_args(
        ["check-corpus", "--corpus", "c", "--only", "*.pdf", "--kb", "k", "--timeout", "5", "--key", "s"]
    )
    assert (args.corpus, args.only, args.kb, args.timeout, args.key) == (Path("c"), "*.pdf", "k", 5.0, "s")

    monkeypatch.delenv("WEKNORA_CORPUS")
    work = tmp_path / "work"
    checkout = work / "wt" / "project"  # a worktree, two levels below the team's shared/
    checkout.mkdir(parents=True)
    assert default_corpus(checkout) == work / "wt" / "shared" / "corpus"  # none found: beside it
    (work / "shared" / "corpus").mkdir(parents=True)
    assert default_corpus(checkout) == work / "shared" / "corpus"
    (work / "wt" / "shared" / "corpus").mkdir(parents=True)
    assert default_corpus(checkout) == work / "wt" / "shared" / "corpus"  # the nearest wins


def test_check_corpus_prints_one_line_per_file(api: FakeApi, tmp_path: Path) -> None:
    corpus = fake_corpus(
        tmp_path / "corpus",
        {
            "notes.md": b"# Notes\n\nsome text",
            "empty.txt": b"",  # broken on purpose: the API's rejection is the expected outcome
            "fail-table.md": b"| a |",  # the fake API fails it at chunking: not expected
            "big.csv": b"a,b\n" * (cli.DIRECT_UPLOAD_MAX_BYTES // 4 + 1),  # through the presigned URL
            "dup-notes.md": b"again",  # the fake API answers 409 with the existing row: followed
            "gone.md": b"",
        },
    )
    (corpus / "gone.md").unlink()  # listed, but not there
    argv = ["check-corpus", "--corpus", str(corpus), "--kb", "corpus", "--interval", "0.01", *api_args(api)]
    code, out = run(argv)
    assert code == 1, out
    lines = {ln.split()[1]: ln for ln in out.splitlines() if ln.startswith(("ok ", "FAIL "))}
    assert list(lines) == ["notes.md", "empty.txt", "fail-table.md", "big.csv", "dup-notes.md", "gone.md"]
    assert re.match(r"ok   notes\.md +md +completed +chunks=3 ", lines["notes.md"])
    assert re.match(r"ok   empty\.txt +txt +rejected +chunks=0 .* the file is empty$", lines["empty.txt"])
    assert re.search(r"^FAIL fail-table\.md +md +failed .* CHUNKING_FAILED: no text$", lines["fail-table.md"])
    assert re.match(r"ok   big\.csv +csv +completed ", lines["big.csv"])
    assert re.match(r"ok   dup-notes\.md +md +completed ", lines["dup-notes.md"])
    assert re.search(r"^FAIL gone\.md +md +missing .* listed in MANIFEST\.tsv but not in ", lines["gone.md"])
    assert out.rstrip().endswith("4 passed, 2 failed")
    assert api.kbs == [{"id": "kb1", "name": "corpus"}]
    # followed by listing the knowledge base once a look, not by a request per file
    assert api.listings == max(api.polls.values()) and api.listings < sum(api.polls.values())

    code, out = run([*argv, "--only", "notes*"], terminal=True)  # the KB is found by name, not created again
    assert code == 0 and out.rstrip().endswith("1 passed, 0 failed"), out
    assert len(api.kbs) == 1


def test_check_corpus_refuses_to_check_nothing(api: FakeApi, tmp_path: Path) -> None:
    code, out = run(["check-corpus", "--corpus", str(tmp_path), *api_args(api)])
    assert code == 1 and f"no MANIFEST.tsv in {tmp_path}" in out
    corpus = fake_corpus(tmp_path / "corpus", {"notes.md": b"text"})
    code, out = run(["check-corpus", "--corpus", str(corpus), "--only", "*.pdf", *api_args(api)])
    assert code == 1 and "no MANIFEST.tsv file matches --only *.pdf" in out
    assert api.kbs == []


def test_ingest_refreshes_a_few_rows_per_look_in_turn(
    api: FakeApi, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Following many files must not flood the stack it watches: each look reads at most
    REFRESH_PER_LOOK rows, the least recently read first, and every file still reaches its end."""
    files = []
    for i in range(10):
        f = tmp_path / f"f{i}.txt"
        f.write_text(f"text {i}")
        files.append(str(f))
    reads_per_look: list[int] = []
    seen = 0
    real_sleep = time.sleep

    def look_ended(seconds: float) -> None:
        nonlocal seen
        reads = sum(api.polls.values())
        reads_per_look.append(reads - seen)
        seen = reads
        real_sleep(seconds)

    monkeypatch.setattr(cli.time, "sleep", look_ended)
    code, out = run(["ingest", *files, "--kb", "docs", "--interval", "0.001", *api_args(api)])
    assert code == 0, out
    assert "all 10 file(s) completed" in out
    assert reads_per_look and max(reads_per_look) == cli.REFRESH_PER_LOOK


def test_key_issue_and_tenant_create_take_a_scope_and_knowledge_bases() -> None:
    args = cli.build_parser().parse_args(
        ["key", "issue", "t1", "--scope", "read", "--kb", "kb-a", "--kb", "kb-b"]
    )
    assert cli._key_access(args) == {"scope": "read", "kb_ids": ["kb-a", "kb-b"]}
    args = cli.build_parser().parse_args(["tenant", "create", "acme"])
    assert cli._key_access(args) == {"scope": "admin"}  # as keys were before scopes: the whole tenant
