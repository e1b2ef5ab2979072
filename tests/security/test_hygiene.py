"""Hygiene (issue 9, item 10), through the public path: names without bidi overrides or markup, no internal
storage path in any answer, no URL credentials in titles or errors, and no script or event handler in the
chunks of a file, as for hand-written text."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from e2e.conftest import Api

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime
from chalicelib.net.ssrf import AllowList
from chalicelib.net.urlimport import SafeUrlImporter

ACTIVE = ("<script", "onerror", "onclick", "javascript:", "alert(")
BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def _chunks(api: Api, knowledge_id: str) -> str:
    response = api.post("/chunker/preview", {"knowledge_id": knowledge_id})
    assert response.status_code == 200, response.json_body
    return json.dumps(response.json_body["data"], ensure_ascii=False)


def test_file_names_lose_bidi_overrides_and_folders_lose_markup(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    name = "<b>reports</b>/<img src=x onerror=alert(1)>/invoice\u202egpj.md"
    response = api.upload(kb["id"], "x.md", b"# Invoice\n\nTotal due.", {"fileName": name})
    assert response.status_code == 200, response.json_body
    row = response.json_body["data"]
    assert not set(row["file_name"]) & set(BIDI) and row["file_name"].endswith(".md")
    assert "<" not in row["folder_path"] and ">" not in row["folder_path"], row["folder_path"]
    assert "reports" in row["folder_path"]
    presigned = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/upload-url", {"file_name": "a\u2066b\u2069.md"}
    )
    assert presigned.status_code == 201, presigned.json_body
    assert not set(json.dumps(presigned.json_body, ensure_ascii=False)) & set(BIDI)


def test_no_answer_carries_the_internal_storage_path(api: Api, runtime: LocalRuntime) -> None:
    kb = api.create_kb()
    upload = api.upload(kb["id"], "a.md", b"# A\n\nThe storage path stays inside.")
    manual = api.post(f"/knowledge-bases/{kb['id']}/knowledge/manual", {"content": "# M\n\ntext"})
    runtime.drain(timeout=120)
    ids = [upload.json_body["data"]["id"], manual.json_body["data"]["id"]]
    answers = [upload, manual, api.get(f"/knowledge-bases/{kb['id']}/knowledge")]
    answers += [api.get(f"/knowledge/{i}") for i in ids] + [api.get(f"/knowledge/{i}/spans") for i in ids]
    answers.append(api.post(f"/knowledge-bases/{kb['id']}/hybrid-search", {"query_text": "storage path"}))
    for answer in answers:
        text = json.dumps(answer.json_body)
        assert "file_path" not in text and "local://" not in text and "s3://" not in text, text[:500]


def test_scripts_and_handlers_are_stripped_from_files_as_from_manual_text(
    api: Api, runtime: LocalRuntime
) -> None:
    kb = api.create_kb()
    markdown = (
        b"# Notes\n\nThe tide table <img src=x onerror=alert(1)> for March.\n\n"
        b"<script>alert('md')</script>\n\n<div onclick=\"alert(2)\">High water at noon.</div>\n"
    )
    html = (
        b"<html><head><title>Tides</title><script>alert('head')</script></head><body>"
        b'<h1>Tides</h1><p onclick="alert(3)">Spring tides follow the full moon closely.</p>'
        b"<script>alert('body')</script><a href=\"javascript:alert(4)\">more</a></body></html>"
    )
    md = api.upload(kb["id"], "notes.md", markdown)
    page = api.upload(kb["id"], "tides.html", html)
    manual = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/manual",
        {
            "content": "# Manual\n\nLow water <img src=x onerror=alert(5)> at six.\n\n<script>alert(6)</script>"
        },
    )
    for response in (md, page, manual):
        assert response.status_code == 200, response.json_body
    runtime.drain(timeout=180)
    for response, kept in ((md, "High water at noon"), (page, "Spring tides"), (manual, "Low water")):
        knowledge_id = response.json_body["data"]["id"]
        assert api.knowledge(knowledge_id)["parse_status"] == "completed"
        chunks = _chunks(api, knowledge_id)
        assert kept in chunks
        assert not [a for a in ACTIVE if a in chunks], chunks


@pytest.fixture
def site(services: Services) -> Iterator[str]:
    class Missing(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Missing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    services.settings = replace(services.settings, ssrf_allow=(f"127.0.0.1:{port}",))
    services.urls = SafeUrlImporter(AllowList.parse(services.settings.ssrf_allow))
    yield f"127.0.0.1:{port}"
    server.shutdown()


def test_url_credentials_never_show(api: Api, runtime: LocalRuntime, site: str) -> None:
    kb = api.create_kb()
    refused = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/url", {"url": "http://admin:hunter2@10.0.0.1/"}
    )
    assert refused.status_code == 400 and "hunter2" not in json.dumps(refused.json_body)
    accepted = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/url", {"url": f"http://admin:hunter2@{site}/missing.md"}
    )
    assert accepted.status_code == 201, accepted.json_body
    assert "hunter2" not in json.dumps(accepted.json_body)
    runtime.drain(timeout=120)
    row = api.knowledge(accepted.json_body["data"]["id"])
    assert row["parse_status"] == "failed" and row["error_message"]
    listed = api.get(f"/knowledge-bases/{kb['id']}/knowledge")
    spans = api.get(f"/knowledge/{row['id']}/spans")
    for answer in (json.dumps(row), json.dumps(listed.json_body), json.dumps(spans.json_body)):
        assert "hunter2" not in answer
