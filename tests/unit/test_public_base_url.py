"""The base a download link starts with (api/http.py `public_base_url`): configured, or the request's own."""

from __future__ import annotations

from typing import Any

from chalice.app import Request

from chalicelib.api.http import LOCAL_BASE_URL, public_base_url


def _request(headers: dict[str, str], stage: str = "api") -> Request:
    event: dict[str, Any] = {
        "multiValueQueryStringParameters": None,
        "headers": headers,
        "pathParameters": {},
        "requestContext": {"httpMethod": "GET", "resourcePath": "/r/{token}", "stage": stage},
        "httpMethod": "GET",
        "body": None,
        "isBase64Encoded": False,
        "stageVariables": {},
        "path": "/r/x",
    }
    return Request(event)


def test_a_configured_base_wins() -> None:
    assert public_base_url("https://docs.example.com/", _request({"host": "x"})) == "https://docs.example.com"


def test_api_gateways_own_domain_carries_the_stage() -> None:
    host = "abc123.execute-api.eu-west-1.amazonaws.com"
    assert public_base_url("", _request({"host": host})) == f"https://{host}/api"
    assert public_base_url("", _request({"host": host, "x-forwarded-proto": "https"}, stage="v2")) == (
        f"https://{host}/v2"
    )


def test_a_local_or_proxied_host() -> None:
    assert public_base_url("", _request({"host": "127.0.0.1:8000"})) == "http://127.0.0.1:8000"
    proxied = _request({"host": "kb.example.org", "x-forwarded-proto": "https"})
    assert public_base_url("", proxied) == "https://kb.example.org"


def test_no_host_or_a_hostile_one_falls_back_to_the_local_address() -> None:
    assert public_base_url("", _request({})) == LOCAL_BASE_URL
    for hostile in ("evil.com/path", "a@b", "x y", "h?q"):
        assert public_base_url("", _request({"host": hostile})) == LOCAL_BASE_URL
