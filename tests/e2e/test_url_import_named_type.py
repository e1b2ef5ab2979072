"""Through the API: a URL import with the type the tenant gave is read as that type (WeKnora's download
mode), not as what the server's Content-Type made of it (a CSV served as octet-stream had been read as a
page); a PDF named docx is refused by the parser, as an upload would be."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime
from chalicelib.net.ssrf import AllowList
from chalicelib.net.urlimport import SafeUrlImporter

from .conftest import Api

ROWS = b"name,port\nalpha,80\nbravo,443\ncharlie,8080\n"


def test_the_given_type_decides_what_a_url_download_is(
    api: Api, runtime: LocalRuntime, services: Services, server, corpus: Path
) -> None:
    services.settings = replace(services.settings, ssrf_allow=("127.0.0.1:*",))
    services.urls = SafeUrlImporter(AllowList.parse(services.settings.ssrf_allow))
    server.body("/export", ROWS, "application/octet-stream")
    server.body("/paper.pdf", (corpus / "screenplay-example.pdf").read_bytes(), "application/pdf")
    kb = api.create_kb()
    table = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/url", {"url": server.url("/export?id=9"), "file_type": "csv"}
    )
    misnamed = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/url",
        {"url": server.url("/paper.pdf"), "file_name": "paper.docx"},
    )
    assert table.status_code == 201 and misnamed.status_code == 201
    assert table.json_body["data"]["file_type"] == "csv" and misnamed.json_body["data"]["file_type"] == "docx"
    runtime.drain(timeout=120)
    assert api.knowledge(table.json_body["data"]["id"])["parse_status"] == "completed"
    chunks = api.get(f"/knowledge/{table.json_body['data']['id']}/chunks?limit=200").json_body["data"][
        "items"
    ]
    assert any("| alpha | 80 |" in chunk["content"] for chunk in chunks)  # a table, not a page's paragraph
    refused = api.knowledge(misnamed.json_body["data"]["id"])
    assert (refused["parse_status"], refused["error_code"]) == ("failed", "unsupported_type")
