"""`ocr_languages` / `asr_language` over HTTP: a code outside the allow-list is a 400 with a stable code,
on the knowledge base and on an upload's process_config; the accepted value is stored on the KB."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .conftest import Api


@pytest.mark.parametrize(
    ("kb_settings", "upload_config", "code"),
    [
        ({"ocr_languages": ["klingon"]}, None, "invalid_ocr_languages"),
        ({}, {"ocr_languages": ["eng+jpn"]}, "invalid_ocr_languages"),
    ],
)
def test_a_bad_language_is_a_400(
    api: Api, kb_settings: dict[str, Any], upload_config: dict[str, Any] | None, code: str
) -> None:
    if upload_config is None:
        response = api.post("/knowledge-bases", {"name": "langs", **kb_settings})
    else:
        kb = api.create_kb()
        response = api.upload(kb["id"], "a.md", b"# A\n\ntext", {"process_config": json.dumps(upload_config)})
    assert response.status_code == 400, response.json_body
    assert response.json_body["error"]["code"] == code


def test_the_languages_are_stored_on_the_knowledge_base(api: Api) -> None:
    response = api.post(
        "/knowledge-bases", {"name": "cjk", "ocr_languages": ["jpn", "eng"], "asr_language": "ja"}
    )
    assert response.status_code in (200, 201), response.json_body
    body = response.json_body.get("data", response.json_body)
    assert body["ocr_languages"] == ["jpn", "eng"] and body["asr_language"] == "ja"
