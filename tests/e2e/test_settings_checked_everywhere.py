"""Settings that cannot be honoured are a 400 on every path that creates or reparses a document, not only
on the file uploads: manual text, URL imports, reparse and batch reparse check them too (one check,
`process_config.check_document_settings`). Chunking that could not take effect (an overlap as large as the
chunk, a parent smaller than its children) is a 400 `invalid_chunking` wherever chunking is set; a knowledge
base stored with such settings before the rule keeps working."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api

TEXT = b"# Tides\n\nThe tide tables for the harbour are printed every spring.\n"

#: (process_config, the code it answers): none of these can be honoured in a knowledge base without models
UNHONOURABLE = [
    ({"ocr_languages": ["klingon"]}, "invalid_ocr_languages"),
    ({"asr_language": "zz-zz"}, "invalid_asr_language"),
    ({"question_generation": {"enabled": True}}, "setting_cannot_be_honoured"),
    ({"ocr_engine": "vlm"}, "setting_cannot_be_honoured"),
    ({"caption_language": "English"}, "setting_cannot_be_honoured"),
    ({"chunking": {"chunk_size": 100, "chunk_overlap": 100}}, "invalid_chunking"),
]


def _put(api: Api, path: str, body: dict[str, Any]) -> Any:
    return api.client.http.put(
        f"/api/v1{path}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body=json.dumps(body),
    )


def _refused(response: Any, code: str) -> None:
    assert response.status_code == 400, response.json_body
    assert response.json_body["error"]["code"] == code, response.json_body


@pytest.mark.parametrize(("config", "code"), UNHONOURABLE)
def test_manual_text_and_url_imports_refuse_what_uploads_refuse(
    api: Api, config: dict[str, Any], code: str
) -> None:
    kb = api.create_kb()["id"]
    _refused(api.upload(kb, "t.md", TEXT, {"process_config": json.dumps(config)}), code)
    manual = api.post(
        f"/knowledge-bases/{kb}/knowledge/manual", {"content": "# a\n\nb", "process_config": config}
    )
    _refused(manual, code)
    url = api.post(
        f"/knowledge-bases/{kb}/knowledge/url",
        {"url": "https://example.com/page.html", "process_config": config},
    )
    _refused(url, code)
    assert api.get(f"/knowledge-bases/{kb}/knowledge").json_body["data"]["total"] == 0


@pytest.mark.parametrize(("config", "code"), UNHONOURABLE)
def test_reparse_and_batch_reparse_refuse_them_and_change_nothing(
    api: Api, services: Services, config: dict[str, Any], code: str
) -> None:
    kb = api.create_kb()["id"]
    created = api.upload(kb, "t.md", TEXT).json_body["data"]
    _refused(api.post(f"/knowledge/{created['id']}/reparse", {"process_config": config}), code)
    batch = api.post(
        "/knowledge/batch-reparse", {"kb_id": kb, "ids": [created["id"]], "process_config": config}
    )
    _refused(batch, code)
    row = services.knowledge.get(created["id"])
    assert row is not None and row.attempt == 1 and row.process_overrides == {}


def test_settings_that_can_be_honoured_still_reparse(api: Api) -> None:
    kb = api.create_kb()["id"]
    created = api.upload(kb, "t.md", TEXT).json_body["data"]
    config = {"ocr_languages": ["eng"], "chunking": {"chunk_size": 300, "chunk_overlap": 20}}
    again = api.post(f"/knowledge/{created['id']}/reparse", {"process_config": config})
    assert again.status_code == 200 and again.json_body["data"]["attempt"] == 2, again.json_body
    batch = api.post(
        "/knowledge/batch-reparse", {"kb_id": kb, "ids": [created["id"]], "process_config": config}
    )
    assert batch.status_code == 202, batch.json_body


@pytest.mark.parametrize(
    ("chunking", "names"),
    [
        ({"chunk_size": 100, "chunk_overlap": 200}, ("chunk_overlap", "chunk_size")),
        ({"chunk_size": 100, "chunk_overlap": 100}, ("chunk_overlap", "chunk_size")),
        (
            {"enable_parent_child": True, "parent_chunk_size": 256, "child_chunk_size": 512},
            ("parent_chunk_size", "child_chunk_size"),
        ),
    ],
)
def test_chunking_that_cannot_take_effect_is_refused_at_creation(
    api: Api, chunking: dict[str, Any], names: tuple[str, ...]
) -> None:
    response = api.post("/knowledge-bases", {"name": "odd", "chunking_config": chunking})
    _refused(response, "invalid_chunking")
    assert all(name in response.json_body["error"]["message"] for name in names)


def test_a_change_is_checked_on_the_merged_chunking(api: Api) -> None:
    kb = api.create_kb(chunking_config={"chunk_size": 300, "chunk_overlap": 50})["id"]
    _refused(
        _put(api, f"/knowledge-bases/{kb}", {"chunking_config": {"chunk_overlap": 300}}), "invalid_chunking"
    )
    _refused(_put(api, f"/knowledge-bases/{kb}", {"chunking_config": {"chunk_size": 40}}), "invalid_chunking")
    parent = {"chunking_config": {"enable_parent_child": True, "parent_chunk_size": 300}}  # child: 384
    _refused(_put(api, f"/knowledge-bases/{kb}", parent), "invalid_chunking")
    assert api.get(f"/knowledge-bases/{kb}").json_body["data"]["chunking_config"]["chunk_overlap"] == 50
    fine = _put(api, f"/knowledge-bases/{kb}", {"chunking_config": {"chunk_size": 60}})
    assert fine.status_code == 200, fine.json_body
    # parent-child off: its sizes are not used, so they are not compared
    off = api.create_kb(chunking_config={"parent_chunk_size": 256, "child_chunk_size": 512})
    assert off["chunking_config"]["enable_parent_child"] is False


def test_a_knowledge_base_stored_with_odd_chunking_still_works(
    api: Api, services: Services, runtime: LocalRuntime
) -> None:
    """Stored before the rule: its other settings still change, and its documents still chunk."""
    kb = api.create_kb()["id"]
    stored = services.kbs.get(kb)
    assert stored is not None
    odd = replace(stored.chunking_config, chunk_size=100, chunk_overlap=150)
    services.kbs.put(replace(stored, chunking_config=odd))
    renamed = _put(
        api, f"/knowledge-bases/{kb}", {"name": "still-here", "chunking_config": {"strategy": "heading"}}
    )
    assert renamed.status_code == 200, renamed.json_body
    created = api.upload(kb, "t.md", TEXT).json_body["data"]
    reparsed = api.post(f"/knowledge/{created['id']}/reparse", {"process_config": {"ocr_languages": ["eng"]}})
    assert reparsed.status_code == 200, reparsed.json_body
    runtime.drain(timeout=120)
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    _refused(
        _put(api, f"/knowledge-bases/{kb}", {"chunking_config": {"chunk_overlap": 120}}), "invalid_chunking"
    )
