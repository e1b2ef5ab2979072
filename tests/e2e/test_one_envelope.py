"""Issue 26: one envelope for every answer. An unknown route (API Gateway's own answer, rewritten by the
template's gateway response, emulated locally from the same template), a wrong method and a wrong content
type (Chalice's own answers, rewritten by the app's middleware) all answer `{"success": false, "error":
{"code", "message"}}` with lower-case codes; JSON goes out as UTF-8; validation messages are for people."""

from __future__ import annotations

import json

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
