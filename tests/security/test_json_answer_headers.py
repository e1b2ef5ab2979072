"""Every JSON answer of the API says `Cache-Control: no-store` (tenant data stays out of a browser's and a
proxy's cache: a shared machine, a tab signed out) and `X-Content-Type-Options: nosniff` (it is only ever
read as JSON): answers, refusals, Chalice's own errors. The pages and files that have their own headers (the
console, the docs) keep them."""

from __future__ import annotations

from typing import Any

from .conftest import API_KEY, Api

V1 = "/api/v1"


def _json_headers(response: Any) -> None:
    headers = {k.lower(): v for k, v in response.headers.items()}
    assert headers["content-type"].startswith("application/json"), headers
    assert headers.get("cache-control") == "no-store", headers
    assert headers.get("x-content-type-options") == "nosniff", headers


def test_answers_and_refusals_are_never_cached_nor_sniffed(api: Api) -> None:
    kb = api.create_kb("ledgers")
    http = api.client.http
    answers = [
        api.get("/knowledge-bases"),  # a tenant's data
        api.get(f"/knowledge-bases/{kb['id']}"),
        api.post("/knowledge-bases", {"name": ""}),  # 400
        api.get("/knowledge-bases/no-such-kb"),  # 404
        http.get(f"{V1}/knowledge-bases"),  # 401: no key
        http.get(f"{V1}/knowledge-bases", headers={"X-API-Key": "wk-wrong"}),
        http.request("PATCH", f"{V1}/knowledge-bases", headers={"X-API-Key": API_KEY}),  # Chalice's 405
        http.get("/r/no-such-token"),  # a download link's refusal
        http.get(f"{V1}/health"),
    ]
    for response in answers:
        _json_headers(response)
    assert [r.status_code for r in answers[2:6]] == [400, 404, 401, 401]


def test_the_console_and_the_docs_keep_their_own_headers(api: Api) -> None:
    http = api.client.http
    page = http.get("/console/")
    assert page.headers["Cache-Control"] == "no-cache" and page.headers["X-Content-Type-Options"] == "nosniff"
    assert "Content-Security-Policy" in page.headers
    docs = http.get(f"{V1}/docs")
    assert docs.status_code == 200 and "Content-Security-Policy" in docs.headers
    openapi = http.get(f"{V1}/openapi.json")
    assert openapi.status_code == 200 and openapi.headers["Content-Type"] == "application/json"
