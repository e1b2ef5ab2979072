"""Progress a person can trust (issue 25, items 5 and 6): a waiting document shows its queue, its wait and
how many were queued before it; the live table keeps its column widths and ends in an overall line; `up`
prints one line per finished document; every setting's environment variable is named in `--help`."""

from __future__ import annotations

import io
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from rich.console import Console

from chalicelib.bootstrap import memory_deps
from chalicelib.domain.types import Knowledge, KnowledgeType, ParseStatus
from chalicelib.local import cli
from chalicelib.local.cli import follow
from chalicelib.local.doc_events import DocumentEvents


def iso(seconds_ago: float) -> str:
    return (datetime.now(UTC) - timedelta(seconds=seconds_ago)).isoformat().replace("+00:00", "Z")


class QueueClient:
    """The three reads `ingest` makes of a waiting document: its row, its spans, the KB's in-flight rows."""

    def __init__(self) -> None:
        self.rows = {
            "k-old1": {"id": "k-old1", "queued_stage": "docreader", "queued_at": iso(200)},
            "k-old2": {"id": "k-old2", "queued_stage": "docreader", "queued_at": iso(120)},
            "k-other": {"id": "k-other", "queued_stage": "embedding", "queued_at": iso(300)},
            "k-me": {
                "id": "k-me",
                "parse_status": "pending",
                "queued_stage": "docreader",
                "queued_at": iso(75),
            },
            "k-later": {"id": "k-later", "queued_stage": "docreader", "queued_at": iso(5)},
        }
        self.listed: list[dict[str, Any]] = []

    def knowledge(self, knowledge_id: str) -> dict[str, Any]:
        return dict(self.rows[knowledge_id])

    def spans(self, knowledge_id: str) -> dict[str, Any]:
        return {"current_stage": "", "trace": [{"span_id": "docreader", "status": "pending"}]}

    def pages(self, path: str, params: dict[str, Any], limit: int | None = None) -> Any:
        self.listed.append(params)
        return iter(self.rows.values() if params["parse_status"] == "pending" else [])


def test_a_waiting_document_shows_its_queue_its_wait_and_how_many_are_ahead() -> None:
    client = QueueClient()
    rows = [follow.Tracked(file="scan.pdf", knowledge_id="k-me")]
    buf = io.StringIO()
    console = Console(file=buf, width=200, force_terminal=False, color_system=None)
    follow.follow(client, rows, console, timeout=0, interval=0, kb_id="kb1")  # type: ignore[arg-type]
    out = buf.getvalue()
    # two of the KB's rows went to the docreader queue before it; one of another queue and a later one don't count
    assert re.search(r"scan\.pdf k-me: pending waiting in docreader 1m1\ds, 2 ahead", out), out
    assert "1 file(s): 0 done, 0 failed, 1 waiting, 0 running; elapsed" in out
    assert [p["parse_status"] for p in client.listed] == ["pending", "processing"]


def test_one_listing_of_the_kb_updates_every_followed_row() -> None:
    """Following many files, the KB's in-flight listing (a request or two) tells each row's state between
    its own turns to be read; a row missing from it has moved on and is read first at the next look."""
    queued = {"queued_stage": "docreader"}
    listing = [
        {"id": "a", "parse_status": "pending", "queued_at": iso(50), **queued},
        {"id": "b", "parse_status": "pending", "queued_at": iso(40), **queued},
        {"id": "c", "parse_status": "processing", "queued_stage": "embedding", "queued_at": iso(30)},
    ]
    b, c, gone = (follow.Tracked(file=n, knowledge_id=n, parse_status="pending") for n in ("b", "c", "gone"))
    gone.refreshed_at = 99.0
    follow.from_listing([b, c, gone], listing)
    assert (b.waiting, b.ahead) == (True, 1) and b.wait_text().startswith("waiting in docreader 4")
    assert (c.parse_status, c.waiting) == ("processing", False)  # its spans never read: maybe running
    assert (gone.waiting, gone.refreshed_at) == (False, 0.0)


def test_a_started_stage_is_not_waiting() -> None:
    row = {"parse_status": "processing", "queued_stage": "chunking", "queued_at": iso(3)}
    assert follow.is_waiting(row, [{"span_id": "chunking", "status": "pending"}])
    assert follow.is_waiting(row, [])
    assert not follow.is_waiting(row, [{"span_id": "chunking", "status": "running"}])
    assert not follow.is_waiting({**row, "parse_status": "completed"}, [])
    later = follow.Tracked(file="x", queued_stage="chunking", queued_at=iso(-30), waiting=True)
    assert later.wait_text().startswith("chunking retry in ")  # a delayed message: visible in the future


def test_the_progress_of_a_running_child_span_is_shown() -> None:
    trace = [
        {"span_id": "docreader", "status": "running"},
        {
            "span_id": "docreader.ocr",
            "status": "running",
            "progress": {"unit": "pages", "done": 2, "total": 3, "percent": 66.7},
        },
    ]
    assert follow.running_progress(trace, "docreader").startswith("docreader.ocr [")
    assert "2/3 pages" in follow.running_progress(trace, "docreader")


def test_the_live_table_keeps_its_column_widths() -> None:
    def header(rows: list[follow.Tracked]) -> str:
        buf = io.StringIO()
        Console(file=buf, width=160, force_terminal=True, color_system=None).print(
            follow.progress_table(rows, 0.0)
        )
        return buf.getvalue().splitlines()[1]

    short = [follow.Tracked(file="a.md", knowledge_id="k1", parse_status="pending")]
    long = [
        follow.Tracked(
            file="a-very-long-file-name-that-goes-on-and-on.pdf",
            knowledge_id="k-0123456789abcdef0123456789",
            stage="embedding",
            stage_status="running",
            parse_status="processing",
        )
    ]
    assert header(short) == header(long)


def test_up_prints_one_line_per_finished_document() -> None:
    deps = memory_deps()
    lines: list[str] = []
    events = DocumentEvents(lambda: deps.knowledge, lines.append)
    row = Knowledge(
        id="k1", tenant_id="t", kb_id="kb", type=KnowledgeType.FILE, file_name="notes.md", file_hash="h1"
    )
    bad = Knowledge(
        id="k2", tenant_id="t", kb_id="kb", type=KnowledgeType.FILE, file_name="scan.pdf", file_hash="h2"
    )
    deps.knowledge.insert(row)
    deps.knowledge.insert(bad)
    assert events.poll_once() == []  # both in flight: nothing yet
    assert events.poll_once() == []
    stored = deps.knowledge.get("k1")
    assert stored is not None
    stored.parse_status, stored.chunk_count = ParseStatus.COMPLETED, 12
    deps.knowledge._rows["k1"] = stored  # type: ignore[attr-defined]
    failed = deps.knowledge.get("k2")
    assert failed is not None
    failed.parse_status, failed.error_code, failed.error_message = ParseStatus.FAILED, "OCR_FAILED", "no text"
    deps.knowledge._rows["k2"] = failed  # type: ignore[attr-defined]
    got = events.poll_once()
    assert len(got) == 2 and events.poll_once() == []  # once each
    assert re.fullmatch(r"completed notes\.md  \d+\.\ds  12 chunks  \(k1\)", got[0]), got
    assert re.fullmatch(r"failed    scan\.pdf  \d+\.\ds  OCR_FAILED: no text  \(k2\)", got[1]), got
    assert lines == got


def test_a_document_that_fails_between_two_looks_is_reported_once() -> None:
    """A truncated PDF fails in the docreader within a few hundred milliseconds of its upload: the row is
    never in flight at a look, so the watcher hears of it as it is created (`observe`)."""
    deps = memory_deps()
    lines: list[str] = []
    events = DocumentEvents(lambda: deps.knowledge, lines.append)
    events.observe(deps)
    events.observe(deps)  # once is enough: no double wrapping
    events.poll_once()
    row = Knowledge(
        id="k9", tenant_id="t", kb_id="kb", type=KnowledgeType.FILE, file_name="broken.pdf", file_hash="h9"
    )
    deps.knowledge.insert(row)
    assert deps.knowledge.mark_failed("k9", 1, "The PDF is damaged", "DOCREADER_FAILED")
    got = events.poll_once()
    assert len(got) == 1 and re.fullmatch(
        r"failed    broken\.pdf  \d+\.\ds  DOCREADER_FAILED: The PDF is damaged  \(k9\)", got[0]
    ), got
    assert events.poll_once() == []
    assert deps.knowledge.get("k9") is not None  # every other call passes through


def test_verbose_prints_access_lines_and_access_log_is_its_alias() -> None:
    parse = cli.build_parser().parse_args
    assert parse(["up"]).verbose is False
    assert parse(["up", "--verbose"]).verbose is True
    assert parse(["up", "--access-log"]).verbose is True


def test_help_names_every_setting_s_environment_variable(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--help"])
    top = capsys.readouterr().out
    for name in (
        "WEKNORA_API",
        "WEKNORA_API_KEY",
        "WEKNORA_OPERATOR_KEY",
        "WEKNORA_PORT",
        "WEKNORA_STATE_DIR",
    ):
        assert name in top
    for argv, names in (
        (["kb", "list"], ("WEKNORA_API", "WEKNORA_API_KEY")),
        (["ls"], ("WEKNORA_API", "WEKNORA_API_KEY", "--json")),
        (["dlq", "list"], ("WEKNORA_API", "WEKNORA_OPERATOR_KEY", "--json")),
        (["up"], ("WEKNORA_PORT",)),
    ):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args([*argv, "--help"])
        text = capsys.readouterr().out
        assert all(name in text for name in names), (argv, text)


def test_the_api_url_comes_from_weknora_api(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WEKNORA_API", "https://example.test/api/v1")
    assert cli.build_parser().parse_args(["kb", "list"]).api == "https://example.test/api/v1"
    monkeypatch.delenv("WEKNORA_API")
    monkeypatch.setenv("WEKNORA_API_URL", "https://old.test/api/v1")  # the older name still works
    assert cli.build_parser().parse_args(["kb", "list"]).api == "https://old.test/api/v1"


def test_the_console_link_keeps_the_stage_prefix() -> None:
    url = cli.console_url("https://abc.execute-api.eu-west-1.amazonaws.com/api/api/v1", "wk-a b", "kb1")
    assert url == "https://abc.execute-api.eu-west-1.amazonaws.com/api/console/#key=wk-a%20b&kb=kb1"
