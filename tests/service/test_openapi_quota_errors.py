"""The OpenAPI document names each refusal a route answers: every route that checks the tenant's quotas is
driven past them through the HTTP API, and the code of each 4xx it answers must be in the document's
response for that route and status (a route that starts refusing with a new code fails here until the
document says so)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from chalice.test import Client

from chalicelib.bootstrap import Services
from chalicelib.operations.tenants import create_tenant_with_key

V1 = "/api/v1"
BIG = "Spring tides follow the full moon. " * 20
FILE_FORM = (
    b'--b\r\nContent-Disposition: form-data; name="file"; filename="tides.md"\r\n'
    b"Content-Type: application/octet-stream\r\n\r\n# Tides\n\n" + BIG.encode() + b"\r\n--b--\r\n"
)


class Caller:
    def __init__(self, deps: Services, client: Client) -> None:
        self.deps, self.client = deps, client
        self.tenant, self.key = create_tenant_with_key(deps, "quotas")
        self.answers: list[tuple[str, str, int, str]] = []  # (method, path template, status, code)

    def send(self, method: str, template: str, body: Any = None, **ids: str) -> Any:
        headers = {"X-API-Key": self.key, "Content-Type": "application/json"}
        if isinstance(body, bytes):  # a multipart form
            headers["Content-Type"], data = "multipart/form-data; boundary=b", body
        else:
            data = b"" if body is None else json.dumps(body).encode()
        answer = self.client.http.request(method, V1 + template.format(**ids), headers=headers, body=data)
        code = (answer.json_body.get("error") or {}).get("code", "") if answer.json_body else ""
        self.answers.append((method.lower(), V1 + template, answer.status_code, code))
        return answer

    def quotas(self, *, storage: int = 0, documents: int = 0) -> None:
        self.deps.tenants.set_quotas(self.tenant.id, storage_quota=storage, document_quota=documents)


@pytest.fixture
def caller(deps: Services, client: Client) -> Caller:
    return Caller(deps, client)


def test_every_quota_refusal_a_route_answers_is_in_the_openapi_document(
    caller: Caller, client: Client
) -> None:
    send = caller.send
    kb = send("POST", "/knowledge-bases", {"name": "docs"}).json_body["data"]["id"]
    faq = send("POST", "/knowledge-bases", {"name": "faq", "type": "faq"}).json_body["data"]["id"]
    entry = send(
        "POST",
        "/knowledge-bases/{kb_id}/faq/entries",
        {"standard_question": "q?", "answers": ["a"]},
        kb_id=faq,
    ).json_body["data"]["id"]
    manual = {"content": "# Tides\n\n" + BIG}

    caller.quotas(storage=1)  # less than is used already: nothing more fits
    expected = {
        ("post", "/knowledge/file"): send(
            "POST", "/knowledge-bases/{kb_id}/knowledge/file", FILE_FORM, kb_id=kb
        ),
        ("post", "/knowledge/upload-url"): send(
            "POST",
            "/knowledge-bases/{kb_id}/knowledge/upload-url",
            {"file_name": "a.md", "file_size": 300},
            kb_id=kb,
        ),
        ("post", "/faq/entries"): send(
            "POST",
            "/knowledge-bases/{kb_id}/faq/entries",
            {"standard_question": "r?", "answers": [BIG]},
            kb_id=faq,
        ),
        ("put", "/faq/entries/{entry_id}"): send(
            "PUT",
            "/knowledge-bases/{kb_id}/faq/entries/{entry_id}",
            {"answers": [BIG]},
            kb_id=faq,
            entry_id=entry,
        ),
    }
    send("POST", "/knowledge-bases/{kb_id}/knowledge/manual", manual, kb_id=kb)  # refused or not: documented
    for route, answer in expected.items():
        assert (answer.status_code, answer.json_body["error"]["code"]) == (403, "storage_quota_exceeded"), (
            route
        )

    caller.quotas()
    assert send("POST", "/knowledge-bases/{kb_id}/knowledge/manual", manual, kb_id=kb).status_code < 300
    caller.quotas(documents=1)  # the tenant holds one document: no other may be added
    for template, body in (
        ("/knowledge-bases/{kb_id}/knowledge/file", FILE_FORM),
        ("/knowledge-bases/{kb_id}/knowledge/url", {"url": "https://example.org/tides.md"}),
        ("/knowledge-bases/{kb_id}/knowledge/manual", manual),
    ):
        answer = send("POST", template, body, kb_id=kb)
        assert (answer.status_code, answer.json_body["error"]["code"]) == (403, "document_quota_exceeded"), (
            template
        )

    document = client.http.get(f"{V1}/openapi.json").json_body
    undocumented = [
        f"{method.upper()} {path}: {status} {code}"
        for method, path, status, code in caller.answers
        if status >= 400
        and code
        not in document["paths"][path][method]["responses"].get(str(status), {}).get("description", "")
    ]
    assert not undocumented, undocumented
