"""Issue 24, defect 5: the stage tree of an attempt that can make no more progress shows how it ended. A user
cancel leaves no stage `pending`, an attempt superseded by a reparse leaves nothing `running` or `pending`,
and a document that failed in the docreader names the docreader as its current stage."""

from __future__ import annotations

from typing import Any

from chalicelib.local.runtime import LocalRuntime

from .conftest import Api

TIDES = b"# Tides\n\nSpring tides happen at full and new moon, when the sun and moon pull together.\n"
OPEN = {"pending", "running"}


def _spans(api: Api, knowledge_id: str, attempt: int | None = None) -> dict[str, Any]:
    query = f"?attempt={attempt}" if attempt else ""
    response = api.get(f"/knowledge/{knowledge_id}/spans{query}")
    assert response.status_code == 200, response.json_body
    return dict(response.json_body["data"])


def test_a_cancelled_attempt_leaves_no_stage_pending(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "tides.md", TIDES).json_body["data"]
    runtime.poll_once()  # the docreader has run; chunking is queued
    assert api.post(f"/knowledge/{created['id']}/cancel").status_code == 200
    runtime.drain(timeout=120)
    spans = _spans(api, created["id"])
    assert spans["root"]["status"] == "cancelled"
    assert [s["span_id"] for s in spans["trace"] if s["status"] in OPEN] == []
    assert spans["current_stage"] == "docreader"


def test_an_attempt_superseded_by_a_reparse_shows_nothing_running(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "tides.md", TIDES).json_body["data"]
    runtime.poll_once()
    again = api.post(f"/knowledge/{created['id']}/reparse")
    assert again.status_code == 200 and again.json_body["data"]["attempt"] == 2
    runtime.drain(timeout=120)
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    first = _spans(api, created["id"], attempt=1)
    assert [s["span_id"] for s in first["trace"] if s["status"] in OPEN] == []
    assert first["root"] is None or first["root"]["status"] not in OPEN
    closed = [s for s in first["trace"] if s["status"] == "cancelled"]
    assert closed and all(s["error_code"] == "superseded" for s in closed)
    assert _spans(api, created["id"])["root"]["status"] == "done"


def test_a_document_that_failed_in_the_docreader_reports_the_docreader_as_its_stage(
    api: Api, runtime: LocalRuntime
) -> None:
    kb = api.create_kb()
    broken = api.upload(kb["id"], "broken.pdf", b"%PDF-1.7\n this is not a pdf body").json_body["data"]
    runtime.drain(timeout=120)
    spans = _spans(api, broken["id"])
    assert spans["parse_status"] == "failed"
    assert spans["current_stage"] == "docreader"
    assert spans["last_error"]["stage"] == "docreader"
    assert [s["span_id"] for s in spans["trace"] if s["status"] in OPEN] == []
