"""The CLI against an API answering as the real one does (fast: an ApiClient whose `call` answers from
memory): a knowledge base name resolves to the tenant's own knowledge bases first (the key's listing holds
those other tenants shared with it, no acceptance asked), `watch` never settles on a big knowledge base's
stored report while its rows are in flight, and `ingest` ends at once on a presigned upload the API
rejected when it arrived."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from chalicelib.local import cli
from chalicelib.local.cli import follow, kb, knowledge, watch
from chalicelib.local.cli.client import ApiClient, ApiError, CliError

OWN = {"id": "kb-own", "name": "docs", "shared": False, "tenant_id": "t-me"}
THEIRS = {"id": "kb-theirs", "name": "docs", "shared": True, "tenant_id": "t-other"}


class Api(ApiClient):
    """The API's answers from memory: the key's listing (`kbs`), stats, a knowledge base's rows by parse
    status, GET /knowledge/{id} answers in turn; what is posted is recorded."""

    def __init__(self, kbs: list[dict[str, Any]], kb_scope: Any = "reads") -> None:
        super().__init__("http://127.0.0.1:9/api/v1", "k")
        self.kb_scope = kb_scope
        self.kbs = kbs
        self.posted: list[tuple[str, Any]] = []
        self.stats_reply: dict[str, Any] = {}
        self.rows: dict[str, list[dict[str, Any]]] = {}  # parse status: rows of the KB in that state
        self.answers: dict[str, list[dict[str, Any] | ApiError]] = {}  # knowledge id: answers in turn
        self.looks = 0

    def call(self, method: str, path: str, **kw: Any) -> Any:
        self.looks += 1
        assert self.looks < 500, "still polling: the loop never ends"
        params = kw.get("params") or {}
        if (method, path) == ("GET", "/knowledge-bases"):
            return {"success": True, "data": self.kbs, "next_cursor": None}
        if method == "POST" and path == "/knowledge-bases":
            self.posted.append((path, kw["json"]))
            return {"id": "kb-new", "shared": False, **kw["json"]}
        if method == "POST":
            self.posted.append((path, kw.get("json")))
            return {"task_id": "t1"}
        if path.endswith("/stats"):
            return self.stats_reply
        if path.endswith("/knowledge"):
            return {"items": self.rows.get(params.get("parse_status", ""), [])[:1], "next_cursor": None}
        if path.startswith("/knowledge/") and path.endswith("/spans"):
            return {"trace": []}
        if path.startswith("/knowledge/"):
            answers = self.answers[path.split("/")[2]]
            answer = answers.pop(0) if len(answers) > 1 else answers[0]
            if isinstance(answer, ApiError):
                raise answer
            return answer
        raise AssertionError(f"unexpected {method} {path}")


def run(api: Api, monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> tuple[int, str]:
    """`cli.main` with the commands' client being `api` (given the scope the command's parser declares)."""

    def make(args: Any) -> Api:
        api.kb_scope = getattr(args, "kb_scope", "reads")
        return api

    monkeypatch.setattr(kb, "client", make)
    monkeypatch.setattr(watch, "client", make)
    monkeypatch.setattr(knowledge, "client", make)
    monkeypatch.setattr(follow, "make_client", make)
    out = io.StringIO()
    code = cli.main(argv, Console(file=out, width=200))
    return code, out.getvalue()


# ---- names: the tenant's own first ---------------------------------------------------------------------------


def test_ingest_creates_the_tenant_s_own_kb_when_only_a_shared_one_has_the_name() -> None:
    api = Api([THEIRS])
    assert api.ensure_kb("docs") == ({"id": "kb-new", "shared": False, "name": "docs"}, True)
    assert api.posted == [("/knowledge-bases", {"name": "docs"})]
    assert Api([THEIRS, OWN]).ensure_kb("docs") == (OWN, False)  # its own one, wherever listed


def test_a_shared_kb_named_by_its_id_is_refused_for_ingest() -> None:
    with pytest.raises(CliError) as refused:
        Api([OWN, THEIRS]).ensure_kb("kb-theirs")
    assert refused.value.code == "kb_read_only" and "t-other" in refused.value.message


def test_a_command_that_reads_falls_back_to_a_shared_kb_and_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert Api([OWN, THEIRS]).kb_id("docs") == "kb-own"
    assert capsys.readouterr().err == ""
    assert Api([THEIRS]).kb_id("docs") == "kb-theirs"
    assert "kb-theirs, shared with you read-only by tenant t-other" in capsys.readouterr().err


def test_a_command_that_writes_never_takes_a_shared_kb_by_name() -> None:
    assert Api([THEIRS], kb_scope="mine").kb_id("docs") == "docs"  # passed on: the API's 404 names it
    assert Api([OWN, THEIRS], kb_scope="mine").kb_id("docs") == "kb-own"
    assert Api([OWN, THEIRS], kb_scope="shared").kb_id("docs") == "kb-theirs"  # share decline


def test_two_of_a_name_is_an_error_naming_their_ids() -> None:
    twin = {**OWN, "id": "kb-own-2"}
    with pytest.raises(CliError) as ambiguous:
        Api([OWN, twin, THEIRS]).ensure_kb("docs")
    assert ambiguous.value.code == "kb_ambiguous" and "kb-own, kb-own-2" in ambiguous.value.message
    other = {**THEIRS, "id": "kb-theirs-2", "tenant_id": "t-third"}
    with pytest.raises(CliError, match="kb-theirs, kb-theirs-2"):
        Api([THEIRS, other]).kb_id("docs")
    assert Api([OWN, THEIRS, other]).kb_id("docs") == "kb-own"  # its own one decides


@pytest.mark.parametrize(
    ("argv", "scope"),
    [
        (["ls", "docs"], "reads"),
        (["search", "--kb", "docs", "q"], "reads"),
        (["watch", "docs"], "reads"),
        (["kb", "stats", "docs"], "reads"),
        (["tags", "list", "docs"], "reads"),
        (["retry-failed", "docs"], "mine"),
        (["add-url", "docs", "https://example.com/"], "mine"),
        (["kb", "delete", "docs"], "mine"),
        (["tags", "create", "docs", "x"], "mine"),
        (["faq", "import", "docs", "f.json"], "mine"),
        (["webhook", "list", "docs"], "mine"),
        (["share", "add", "docs", "t-other"], "mine"),
        (["share", "decline", "docs"], "shared"),
    ],
)
def test_every_command_declares_where_it_looks_for_a_name(argv: list[str], scope: str) -> None:
    assert cli.build_parser().parse_args(argv).kb_scope == scope


def test_retry_failed_by_name_goes_to_the_tenant_s_own_kb(monkeypatch: pytest.MonkeyPatch) -> None:
    api = Api([THEIRS, OWN])
    code, out = run(api, monkeypatch, ["retry-failed", "docs", "--json"])
    assert code == 0 and api.posted == [("/knowledge-bases/kb-own/retry-failed", None)], out


# ---- watch: a stored report settles nothing ---------------------------------------------------------------------


def test_watch_reads_the_rows_when_the_report_is_a_stored_one(monkeypatch: pytest.MonkeyPatch) -> None:
    api = Api([OWN])
    stored = {"documents": 2, "parse_status": {"completed": 2}, "chunks": 2, "fresh": False, "as_of": "T0"}
    api.stats_reply = stored
    api.rows["pending"] = [{"id": "k-late", "parse_status": "pending"}]  # uploaded since the report
    argv = ["watch", "docs", "--timeout", "0.2", "--interval", "0.05"]
    code, out = run(api, monkeypatch, argv)
    assert code == 1 and "settled" not in out and "stopped: 2 documents" in out, out
    assert "report as of T0" in out, out
    api.rows.clear()  # every row settled: the stored counts are right again
    code, out = run(api, monkeypatch, argv)
    assert code == 0 and "settled: 2 documents" in out, out


def test_watch_settles_on_a_fresh_report_without_reading_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    api = Api([OWN])
    api.stats_reply = {"documents": 1, "parse_status": {"completed": 1}, "chunks": 1, "fresh": True}
    api.rows["pending"] = [{"id": "never-read"}]
    code, out = run(api, monkeypatch, ["watch", "docs", "--timeout", "5"])
    assert code == 0 and "settled: 1 documents" in out, out


def test_a_report_still_being_computed_is_not_settled() -> None:
    assert not watch.settled({"code": "report_pending", "task_id": "t1", "fresh": False})


# ---- ingest: a presigned upload rejected on arrival ------------------------------------------------------------


class Presigned(Api):
    def upload_row(self, kb_id: str, path: Path) -> dict[str, Any]:
        return {"id": f"k-{path.stem}"}  # a presigned PUT: the row comes with the storage event


@pytest.mark.parametrize(
    "code",
    ["duplicate_file", "file_too_large", "upload_expired", "upload_failed", "storage_quota_exceeded"],
)
def test_ingest_ends_at_once_on_a_presigned_upload_rejected_on_arrival(
    code: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    api = Presigned([OWN])
    pending = ApiError(404, "upload_pending", "the presigned upload has not arrived yet")
    api.answers["k-big"] = [pending, ApiError(404, code, "already exists as knowledge k-1")]
    (tmp_path / "big.md").write_text("# big\n", encoding="utf-8")
    argv = [
        "ingest",
        str(tmp_path / "big.md"),
        "--kb",
        "docs",
        "--json",
        "--timeout",
        "30",
        "--interval",
        "0",
    ]
    exit_code, out = run(api, monkeypatch, argv)
    rows = json.loads(out)
    assert exit_code == 1 and rows[0]["parse_status"] == "upload failed", rows
    assert rows[0]["error"] == f"{code}: already exists as knowledge k-1", rows
    assert api.looks < 20, api.looks


@pytest.mark.parametrize("code", ["upload_pending", "knowledge_not_found"])
def test_ingest_waits_for_a_presigned_upload_not_arrived_yet(
    code: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`knowledge_not_found` too: the API answers it while the upload's accept is creating the row."""
    api = Presigned([OWN])
    api.answers["k-big"] = [ApiError(404, code, "not yet"), {"id": "k-big", "parse_status": "completed"}]
    (tmp_path / "big.md").write_text("# big\n", encoding="utf-8")
    argv = [
        "ingest",
        str(tmp_path / "big.md"),
        "--kb",
        "docs",
        "--json",
        "--timeout",
        "30",
        "--interval",
        "0",
    ]
    exit_code, out = run(api, monkeypatch, argv)
    assert exit_code == 0 and json.loads(out)[0]["parse_status"] == "completed", out
