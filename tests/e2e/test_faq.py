"""FAQ knowledge bases through the public path: the Chalice test client, moto's DynamoDB (the faq table,
its conditional lease), S3 (presigned upload and download) and SQS (the faq-import queue drained by the
local pollers), the embedded index, and the local embedding model."""

from __future__ import annotations

import csv
import io
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api


def faq_kb(api: Api) -> dict[str, Any]:
    return api.create_kb(type="faq")


def entry(question: str, *answers: str, **extra: Any) -> dict[str, Any]:
    return {"standard_question": question, "answers": list(answers) or [f"answer to {question}"], **extra}


def task(api: Api, task_id: str) -> dict[str, Any]:
    response = api.get(f"/tasks/{task_id}")
    assert response.status_code == 200, response.json_body
    return dict(response.json_body["data"])


def start(api: Api, kb_id: str, body: dict[str, Any]) -> str:
    response = api.post(f"/knowledge-bases/{kb_id}/faq/import", body)
    assert response.status_code == 202, response.json_body
    return str(response.json_body["data"]["task_id"])


def search(api: Api, kb_id: str, text: str, count: int = 5) -> list[dict[str, Any]]:
    response = api.post(f"/knowledge-bases/{kb_id}/hybrid-search", {"query_text": text, "match_count": count})
    assert response.status_code == 200, response.json_body
    return list(response.json_body["data"])


def test_entries_crud_and_search_return_the_entry_with_its_answers(api: Api, runtime: LocalRuntime) -> None:
    document_kb = api.create_kb()
    refused = api.post(f"/knowledge-bases/{document_kb['id']}/faq/entries", entry("q"))
    assert refused.status_code == 400 and refused.json_body["error"]["code"] == "not_faq_kb"

    kb = faq_kb(api)
    created = api.post(
        f"/knowledge-bases/{kb['id']}/faq/entries",
        entry(
            "How do I reset my password?",
            "Use the reset link on the sign-in page.",
            "Or ask your administrator.",
            similar_questions=["I forgot my password"],
            negative_questions=["reset my phone"],
            tags=["account"],
        ),
    )
    assert created.status_code == 201, created.json_body
    entry_id = created.json_body["data"]["id"]
    api.post(f"/knowledge-bases/{kb['id']}/faq/entries", entry("What are the opening hours?", "9 to 5"))
    hits = search(api, kb["id"], "forgot my password")
    assert hits[0]["entry_id"] == entry_id
    assert hits[0]["answers"] == ["Use the reset link on the sign-in page.", "Or ask your administrator."]
    assert hits[0]["standard_question"] == "How do I reset my password?"

    got = api.get(f"/knowledge-bases/{kb['id']}/faq/entries/{entry_id}").json_body["data"]
    assert got["tags"] == ["account"] and got["indexed"] is True
    listed = api.get(f"/knowledge-bases/{kb['id']}/faq/entries?tag=account").json_body["data"]
    assert [i["id"] for i in listed["items"]] == [entry_id] and listed["next_cursor"] == ""

    changed = api.client.http.put(
        f"/api/v1/knowledge-bases/{kb['id']}/faq/entries/{entry_id}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body='{"similar_questions": ["locked out of my account"]}',
    )
    assert changed.status_code == 200, changed.json_body
    assert search(api, kb["id"], "locked out of my account")[0]["entry_id"] == entry_id

    deleted = api.client.http.delete(
        f"/api/v1/knowledge-bases/{kb['id']}/faq/entries/{entry_id}", headers={"X-API-Key": api.api_key}
    )
    assert deleted.status_code == 200
    assert entry_id not in [h["entry_id"] for h in search(api, kb["id"], "reset my password")]
    missing = api.get(f"/knowledge-bases/{kb['id']}/faq/entries/{entry_id}")
    assert missing.status_code == 404 and missing.json_body["error"]["code"] == "faq_entry_not_found"


def test_inline_import_reports_progress_and_a_failed_rows_csv_download(
    api: Api, runtime: LocalRuntime
) -> None:
    kb = faq_kb(api)
    rows = [
        entry("Where is the office?", "Main street 1", similar_questions=["office address"]),
        entry("Where is the office", "duplicate"),
        {"standard_question": "No answer", "answers": [""], "similar_questions": ["x", "y"]},
        entry("Parking", "free", similar_questions=["office address"], negative_questions=["bike parking"]),
    ]
    dry = start(api, kb["id"], {"entries": rows, "dry_run": True})
    runtime.drain(timeout=120)
    report = task(api, dry)["progress"]
    assert (report["added"], report["failed"], report["partial"]) == (2, 2, 1)
    assert api.get(f"/knowledge-bases/{kb['id']}/faq/entries").json_body["data"]["items"] == []

    task_id = start(api, kb["id"], {"entries": rows})
    runtime.drain(timeout=120)
    view = task(api, task_id)
    progress = view["progress"]
    assert view["status"] == "partial" and view["kind"] == "faq_import"
    assert {k: progress[k] for k in ("success", "failed", "partial", "skipped", "merged", "added")} == {
        "success": 2,
        "failed": 2,
        "partial": 1,
        "skipped": 0,
        "merged": 0,
        "added": 2,
    }
    assert progress["processed"] == 4
    # the failed rows' link: a download grant minted by the last-result request (`/r/{token}`, 302 to a
    # presigned GET), never a presigned URL stored with the task
    last = api.get(f"/knowledge-bases/{kb['id']}/faq/import/last-result").json_body["data"]
    assert last["task_id"] == task_id and last["failed"] == 2
    link = str(last["failed_rows_download"])
    assert link.startswith("http://127.0.0.1:8000/r/"), link
    redirect = api.client.http.get(urlsplit(link).path)
    assert redirect.status_code == 302, redirect.json_body
    download = requests.get(redirect.headers["Location"], timeout=30)
    assert download.status_code == 200
    body = download.content
    assert body[:3] == b"\xef\xbb\xbf"
    table = list(csv.reader(io.StringIO(body.decode("utf-8-sig"))))
    assert table[0] == [
        "reason",
        "category",
        "question",
        "similar_questions",
        "negative_questions",
        "answers",
        "answer_all",
        "disabled",
    ]
    assert [r[2] for r in table[1:]] == ["Where is the office", "No answer"]
    assert table[2][3] == "x##y"
    hits = search(api, kb["id"], "office address")
    assert hits[0]["standard_question"] == "Where is the office?"


def test_a_second_import_while_one_runs_gets_409_with_its_task_id(api: Api, runtime: LocalRuntime) -> None:
    kb = faq_kb(api)
    first = start(api, kb["id"], {"entries": [entry("first question")]})
    second = api.post(
        f"/knowledge-bases/{kb['id']}/faq/import", {"entries": [entry("second")], "mode": "replace"}
    )
    assert second.status_code == 409
    assert second.json_body["error"]["code"] == "faq_import_running"
    assert second.json_body["data"]["task_id"] == first
    runtime.drain(timeout=120)
    assert task(api, first)["status"] == "completed"
    third = start(api, kb["id"], {"entries": [entry("second")]})
    runtime.drain(timeout=120)
    assert task(api, third)["status"] == "completed"


def _xlsx(rows: int) -> bytes:
    from openpyxl import Workbook

    book = Workbook(write_only=True)
    sheet = book.create_sheet("faq")
    sheet.append(
        [
            "category",
            "question",
            "similar_questions",
            "negative_questions",
            "answers",
            "answer_all",
            "disabled",
        ]
    )
    for i in range(rows):
        sheet.append(
            [
                f"topic {i % 7}",
                f"How does feature {i} work",
                f"explain feature {i}##feature {i} help",
                "",
                f"Feature {i} works by doing step {i}.",
                "FALSE",
                "FALSE",
            ]
        )
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _xlsx_import(api: Api, runtime: LocalRuntime, services: Services, rows: int) -> None:
    from chalicelib.adapters.models.hashing import HashingEmbedding

    services.replace_embedding_model(HashingEmbedding(64))  # the wiring is under test, not the model
    kb = faq_kb(api)
    grant = api.post(f"/knowledge-bases/{kb['id']}/faq/import/upload-url", {"file_name": "faq.xlsx"})
    assert grant.status_code == 201, grant.json_body
    data = grant.json_body["data"]
    form = requests.post(
        data["url"], data=data["fields"], files={"file": ("faq.xlsx", _xlsx(rows))}, timeout=60
    )
    assert form.status_code == 204
    task_id = start(api, kb["id"], {"object_key": data["object_key"]})
    runtime.drain(timeout=1800)
    view = task(api, task_id)
    assert view["status"] == "completed", view
    assert view["progress"]["added"] == rows and view["progress"]["processed"] == rows
    # the uploaded object was read by the worker and deleted at the end
    assert not services.inbox.exists(services.inbox.url_for(data["object_key"]))
    last = rows - 1
    hits = search(api, kb["id"], f"explain feature {last}", 3)
    assert hits[0]["standard_question"] == f"How does feature {last} work"
    assert hits[0]["answers"] == [f"Feature {last} works by doing step {last}."]
    page = api.get(f"/knowledge-bases/{kb['id']}/faq/entries?limit=100").json_body["data"]
    assert len(page["items"]) == 100 and page["next_cursor"]


def test_a_500_entry_xlsx_import_through_the_presigned_path_completes(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    _xlsx_import(api, runtime, services, 500)


@pytest.mark.slow
def test_a_5000_entry_xlsx_import_through_the_presigned_path_completes(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    _xlsx_import(api, runtime, services, 5000)


def test_an_append_that_merges_unites_the_answers(api: Api, runtime: LocalRuntime) -> None:
    """Issue 24, defect 10: merging into an existing entry replaced its answers; the specification unites
    them (as it does the similar and negative questions and the tags)."""
    kb = faq_kb(api)
    created = api.post(
        f"/knowledge-bases/{kb['id']}/faq/entries", entry("Opening hours", "9 to 5", tags=["office"])
    ).json_body["data"]
    task_id = start(
        api,
        kb["id"],
        {"entries": [entry("Opening hours", "8 to 6 on Saturdays", "9 to 5", tags=["weekend"])]},
    )
    runtime.drain(timeout=120)
    assert task(api, task_id)["progress"]["merged"] == 1
    merged = api.get(f"/knowledge-bases/{kb['id']}/faq/entries/{created['id']}").json_body["data"]
    assert merged["answers"] == ["9 to 5", "8 to 6 on Saturdays"]
    assert merged["tags"] == ["office", "weekend"]
    assert search(api, kb["id"], "opening hours")[0]["answers"] == ["9 to 5", "8 to 6 on Saturdays"]


@pytest.mark.parametrize(
    ("faq_index", "entries_per_faq"),
    [
        ({"index_mode": "question_only", "question_index_mode": "separate"}, 2),
        ({"index_mode": "question_answer", "question_index_mode": "separate"}, 2),
        ({"index_mode": "question_only", "question_index_mode": "combined"}, 1),
        ({"index_mode": "question_answer", "question_index_mode": "combined"}, 1),
    ],
)
def test_the_faq_index_modes(
    api: Api, runtime: LocalRuntime, services: Services, faq_index: dict[str, str], entries_per_faq: int
) -> None:
    """The specification's FAQIndexMode (questions alone, or with the answers) and FAQQuestionIndexMode (a
    vector per question, or one for all of an entry's questions)."""
    from chalicelib.ports import IndexSpace

    kb = api.create_kb(type="faq", faq_index=faq_index)
    assert kb["faq_index"] == faq_index
    created = api.post(
        f"/knowledge-bases/{kb['id']}/faq/entries",
        entry(
            "How do I reset my password?", "Use the lighthouse portal.", similar_questions=["forgot password"]
        ),
    ).json_body["data"]
    space = IndexSpace.of(services.embedding_model(""))
    assert services.engine().count(space, kb["id"], created["id"]) == entries_per_faq
    by_answer = search(api, kb["id"], "lighthouse portal")
    answer_indexed = faq_index["index_mode"] == "question_answer"
    assert (
        any(h["entry_id"] == created["id"] and h["match_type"] != "vector" for h in by_answer)
        == answer_indexed
    )
    hit = search(api, kb["id"], "forgot password")[0]
    assert hit["entry_id"] == created["id"]
    expected = (
        "forgot password" if faq_index["question_index_mode"] == "separate" else "How do I reset my password?"
    )
    assert hit["matched_question"] == expected
    changed = api.client.http.put(
        f"/api/v1/knowledge-bases/{kb['id']}/faq/entries/{created['id']}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body='{"answers": ["Ask the harbour master."]}',
    )
    assert changed.status_code == 200, changed.json_body
    assert services.engine().count(space, kb["id"], created["id"]) == entries_per_faq
    moved = any(
        h["entry_id"] == created["id"] and h["match_type"] != "vector"
        for h in search(api, kb["id"], "harbour master")
    )
    assert moved == answer_indexed  # a changed answer is indexed again where answers are indexed


def test_faq_index_settings_are_for_faq_knowledge_bases(api: Api) -> None:
    refused = api.post("/knowledge-bases", {"name": "docs", "faq_index": {"index_mode": "question_answer"}})
    assert refused.status_code == 400 and refused.json_body["error"]["code"] == "setting_cannot_be_honoured"
    bad = api.post("/knowledge-bases", {"name": "faq", "type": "faq", "faq_index": {"index_mode": "answers"}})
    assert bad.status_code == 400 and bad.json_body["error"]["code"] == "invalid_faq_index"
