"""A knowledge base's cost and stats through the API on moto when it is past the inline bound (patched small
here): the first GET answers 202 `report_pending` with the refresh task's id, the task runs on the lifecycle
queue, and the next GET answers the report it stored (`fresh: false`, `as_of`), the one a request computes
inline on the same entries and rows."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import get_deps
from chalicelib.local.runtime import LocalRuntime
from chalicelib.operations import cost, kb_report_refresh, kb_reports

from .conftest import Api

TEXT = b"# Harbour\n\n" + b"The pilot boards the ship at the breakwater before the tide turns.\n\n" * 30
META = ("as_of", "fresh", "refreshing", "task_id")


def without_meta(report: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in report.items() if k not in META}


@pytest.mark.parametrize(
    ("kind", "sliced"), [("cost", False), ("stats", False), ("cost", True), ("stats", True)]
)
def test_a_big_knowledge_base_answers_202_then_the_refreshed_report(
    api: Api, runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch, kind: str, sliced: bool
) -> None:
    """`sliced`: a page a slice, its checkpoint kept in S3 between the deliveries."""
    kb = api.create_kb()
    for n in range(2):
        assert api.upload(kb["id"], f"pilot-{n}.md", TEXT + f"\n\nberth {n}\n".encode()).status_code == 200
    runtime.drain(timeout=180)
    path = f"/knowledge-bases/{kb['id']}/{kind}"
    inline = api.get(path)
    assert inline.status_code == 200, inline.json_body
    exact = inline.json_body["data"]
    assert exact["fresh"] is True and exact["as_of"] and exact["refreshing"] is False

    monkeypatch.setattr(kb_reports, "INLINE_USAGE_ENTRIES", 2)
    monkeypatch.setattr(kb_reports, "INLINE_ROWS", 1)
    kept: list[str] = []
    if sliced:
        monkeypatch.setattr(kb_report_refresh, "SLICE_SECONDS", 0)
        monkeypatch.setattr(cost, "USAGE_PAGE", 3)
        files, save = get_deps().files, get_deps().files.save
        monkeypatch.setattr(files, "save", lambda key, *a, **k: kept.append(key) or save(key, *a, **k))
    pending = [api.get(path) for _ in range(3)]
    assert {p.status_code for p in pending} == {202}
    data = pending[0].json_body["data"]
    assert data["code"] == "report_pending" and data["fresh"] is False and data["as_of"] is None
    assert {p.json_body["data"]["task_id"] for p in pending} == {data["task_id"]}  # one refresh
    task = api.get(f"/tasks/{data['task_id']}").json_body["data"]
    assert task["kind"] == "kb_report" and task["status"] in ("queued", "running")

    runtime.drain(timeout=180)
    assert api.get(f"/tasks/{data['task_id']}").json_body["data"]["status"] == "completed"
    stored = api.get(path)
    assert stored.status_code == 200, stored.json_body
    report = stored.json_body["data"]
    assert report["fresh"] is False and report["refreshing"] is False and report["as_of"] >= exact["as_of"]
    assert get_deps().files.list_keys(f"reports/{kb['id']}/", 10) == []  # its checkpoint went with it
    if sliced:  # a slice's invocation is metered before the next one reads: the knowledge base's own work
        assert len([key for key in kept if key.startswith("reports/")]) >= 2  # checkpoints, in S3
        assert report["documents"] == exact["documents"]
        money = report if kind == "cost" else report["cost"]
        assert money["aws_dollars"] >= (exact if kind == "cost" else exact["cost"])["aws_dollars"]
        return
    # the same entries and rows as the inline read (the refresh's own invocation is metered after it read)
    assert without_meta(report) == without_meta(exact)
