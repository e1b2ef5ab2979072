"""Issue 26: one envelope for every answer. An unknown route (API Gateway's own answer, rewritten by the
template's gateway response, emulated locally from the same template), a wrong method and a wrong content
type (Chalice's own answers, rewritten by the app's middleware) all answer `{"success": false, "error":
{"code", "message"}}` with lower-case codes; JSON goes out as UTF-8; validation messages are for people."""

from __future__ import annotations

import json
from typing import Any

import pytest
from chalice.test import Client

from .conftest import Api

V1 = "/api/v1"


@pytest.mark.parametrize("path", ["/", "/docs", f"{V1}/no-such-route", f"{V1}/knowledge/", f"{V1}/a/b/c/d"])
def test_an_unknown_route_is_a_404_in_the_envelope(client: Client, path: str) -> None:
    response = client.http.get(path)
    assert response.status_code == 404, response.body
    assert response.json_body == {
        "success": False,
        "error": {
            "code": "route_not_found",
            "message": "no route takes this method and path; the API is described at /api/v1/docs",
        },
    }


def test_a_wrong_method_and_a_wrong_content_type_answer_in_the_envelope(client: Client, api: Api) -> None:
    wrong_method = client.http.patch(f"{V1}/knowledge-bases", headers={"X-API-Key": api.api_key})
    assert wrong_method.status_code == 405
    assert wrong_method.json_body["success"] is False
    assert wrong_method.json_body["error"]["code"] == "method_not_allowed"
    kb = api.create_kb()
    wrong_type = client.http.post(
        f"{V1}/knowledge-bases/{kb['id']}/knowledge/file",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body=b"{}",
    )
    assert wrong_type.status_code == 415
    assert wrong_type.json_body["error"] == {
        "code": "unsupported_media_type",
        "message": "this route does not take a application/json body",
    }


def test_json_is_utf8_and_names_fields_as_documented(client: Client, api: Api) -> None:
    kb = api.create_kb("知识库 한국어")
    raw = client.http.get(f"{V1}/knowledge-bases/{kb['id']}", headers={"X-API-Key": api.api_key}).body
    assert "知识库 한국어".encode() in raw and b"\\u" not in raw
    missing = api.post(f"/knowledge-bases/{kb['id']}/knowledge/upload-url", {"file_size": 3})
    assert missing.status_code == 400
    assert missing.json_body["error"]["code"] == "missing_file_name"
    assert missing.json_body["error"]["message"].startswith("file_name: ")
    blank = api.post("/knowledge-bases", {"name": "   "})
    assert "Value error" not in json.dumps(blank.json_body)


def test_the_api_docs_are_served_by_the_api_with_a_strict_policy(client: Client) -> None:
    page = client.http.get(f"{V1}/docs")
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    policy = page.headers["Content-Security-Policy"]
    assert "script-src 'self';" in policy and "frame-ancestors 'none'" in policy
    text = page.body.decode()
    assert 'data-openapi="/api/v1/openapi.json"' in text and "<script>" not in text
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css", "init.js", "LICENSE"):
        served = client.http.get(f"{V1}/docs/{asset}")
        assert served.status_code == 200 and len(served.body) > 100, asset
        assert f"/api/v1/docs/{asset}".encode() in page.body or asset in ("LICENSE",)
    assert b"SwaggerUIBundle" in client.http.get(f"{V1}/docs/swagger-ui-bundle.js").body
    missing = client.http.get(f"{V1}/docs/..%2Fhttp.py")
    assert (missing.status_code, missing.json_body["error"]["code"]) == (404, "asset_not_found")


def test_the_vendored_swagger_ui_is_the_pinned_package_s() -> None:
    """scripts/vendor_swagger_ui.py copied it; a new pin without a new copy fails here."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or spec.origin is None:
        pytest.skip("swagger-ui-py (a dev dependency) is not installed")
    package = Path(spec.origin).parent / "static"
    vendored = Path(__file__).resolve().parents[2] / "chalicelib" / "api" / "static" / "swagger-ui"
    for name in ("swagger-ui-bundle.js", "swagger-ui.css", "LICENSE"):
        assert (vendored / name).read_bytes() == (package / name).read_bytes(), name


def test_cors_is_off_until_origins_are_configured_then_only_for_them(
    client: Client, api: Api, services: Any
) -> None:
    from dataclasses import replace

    origin = "https://kb.example.com"
    path = f"{V1}/knowledge-bases"
    asked = {"Origin": origin, "Access-Control-Request-Method": "POST"}
    off = client.http.request("OPTIONS", path, headers=asked)
    assert off.status_code == 204 and "Access-Control-Allow-Origin" not in off.headers
    read = client.http.get(path, headers={"X-API-Key": api.api_key, "Origin": origin})
    assert "Access-Control-Allow-Origin" not in read.headers

    services.settings = replace(services.settings, cors_origins=(origin, "http://localhost:3000"))
    preflight = client.http.request("OPTIONS", path, headers=asked)
    assert preflight.status_code == 204
    assert preflight.headers["Access-Control-Allow-Origin"] == origin
    assert preflight.headers["Access-Control-Allow-Methods"] == "GET, POST"
    assert "X-API-Key" in preflight.headers["Access-Control-Allow-Headers"]
    read = client.http.get(path, headers={"X-API-Key": api.api_key, "Origin": origin})
    assert read.status_code == 200 and read.headers["Access-Control-Allow-Origin"] == origin
    assert read.headers["Vary"] == "Origin"
    other = client.http.get(path, headers={"X-API-Key": api.api_key, "Origin": "https://evil.example"})
    assert "Access-Control-Allow-Origin" not in other.headers
    refused = client.http.get(f"{V1}/no-such-route", headers={"Origin": origin})
    assert refused.status_code == 404  # API Gateway's answer: the app never sees it


def test_cors_origins_must_be_origins() -> None:
    from chalicelib.settings import load_settings

    assert load_settings(
        {"WEKNORA_CORS_ORIGINS": "https://a.example, http://b.example:8080/"}
    ).cors_origins == (
        "https://a.example",
        "http://b.example:8080",
    )
    for bad in ("*", "https://a.example/path", "ftp://a.example", "a.example"):
        with pytest.raises(ValueError, match="WEKNORA_CORS_ORIGINS"):
            load_settings({"WEKNORA_CORS_ORIGINS": bad})
