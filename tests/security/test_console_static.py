"""The console's static files: public (they hold no data), each with its content type and a strict
Content-Security-Policy; the page has no inline script or style and never writes HTML from strings."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from chalice.test import Client
from e2e.conftest import load_app

from chalicelib import console

CSP = re.compile(
    r"^default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
    r"connect-src 'self'( \S+)*; frame-ancestors 'none'; base-uri 'none'; form-action 'none'$"
)

#: what turns a string into markup or code: the console builds every node itself (textContent)
HTML_SINKS = ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function")


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with Client(load_app()) as test_client:
        yield test_client


def _secured(response: Any) -> None:
    headers = {k.lower(): v for k, v in response.headers.items()}
    assert CSP.match(headers["content-security-policy"]), headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["referrer-policy"] == "no-referrer"


def test_the_page_and_every_file_are_served_without_a_key_with_their_type(client: Client) -> None:
    page = client.http.get("/console/")
    assert page.status_code == 200
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    _secured(page)
    assert b'<script type="module" src="app.js"></script>' in page.body
    for name in ("app.js", "api.js", "dom.js", "style.css", "icon.svg"):
        response = client.http.get(f"/console/{name}")
        assert response.status_code == 200, name
        assert response.headers["Content-Type"] == console.CONTENT_TYPES["." + name.rsplit(".", 1)[1]]
        _secured(response)


def test_anything_else_is_a_404_with_the_same_headers(client: Client) -> None:
    for path in ("/console/nope.js", "/console/..%2Fapp.py", "/console/__init__.py", "/console/.env"):
        response = client.http.get(path)
        assert response.status_code == 404, path
        _secured(response)


def test_the_root_without_its_slash_is_redirected_so_relative_urls_resolve_under_it() -> None:
    moved = console.serve("index.html", [], "/prod/console")
    assert (moved.status_code, moved.headers["Location"]) == (308, "console/")
    assert console.serve("index.html", [], "/prod/console/").status_code == 200


def test_connect_src_names_only_the_storage_presigned_links_point_at() -> None:
    assert console.storage_origins("http://127.0.0.1:5001/x", ["b"], "eu-west-1") == ["http://127.0.0.1:5001"]
    assert console.storage_origins("", ["files"], "eu-west-1") == [
        "https://files.s3.eu-west-1.amazonaws.com",
        "https://files.s3.amazonaws.com",
    ]


def test_no_inline_script_or_style_and_no_html_from_strings() -> None:
    files = {path.name: path.read_text(encoding="utf-8") for path in console.STATIC.iterdir()}
    page = files["index.html"]
    assert not re.search(r"<script(?![^>]*\bsrc=)", page), "inline script"
    assert "<style" not in page and " style=" not in page and not re.search(r"\son\w+=", page)
    for name, text in files.items():
        if name.endswith(".js"):
            for sink in HTML_SINKS:
                assert sink not in text, f"{name} uses {sink}"
            # the API and assets are relative to the console's own origin and stage: no other origin
            assert not re.search(r"https?://", text), name
