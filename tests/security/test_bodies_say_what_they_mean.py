"""JSON bodies take JSON types, not the multipart form's string conveniences (an empty string once wiped a
document's tags or metadata); titles are one line of text that says something; a presigned upload's size
and content type are ones the PUT can carry; an unknown field and an oversized JSON body answer codes that
say what is wrong (not a field's or an upload's code)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from e2e.conftest import V1, Api

from chalicelib.bootstrap import Services

from .test_malformed_requests import assert_client_error

TEXT = b"# Tides\n\nThe tide tables for the harbour are printed every spring.\n"


def _put(api: Api, path: str, body: dict[str, Any]) -> Any:
    return api.client.http.put(
        f"{V1}{path}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body=json.dumps(body),
    )


@pytest.fixture
def tagged(api: Api) -> tuple[str, str, str]:
    """(kb id, knowledge id, tag id): a document with a tag and metadata."""
    kb = api.create_kb()["id"]
    tag = api.post(f"/knowledge-bases/{kb}/tags", {"name": "ops"}).json_body["data"]["id"]
    created = api.upload(kb, "a.md", TEXT, {"tag_ids": tag, "metadata": '{"dept": "ops"}'})
    assert created.status_code == 200, created.json_body
    return kb, created.json_body["data"]["id"], tag


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"tag_ids": ""}, "invalid_tag_ids"),
        ({"metadata": ""}, "invalid_metadata"),
        ({"metadata": '{"dept": "x"}'}, "invalid_metadata"),
        ({"tag_ids": "a,b"}, "invalid_tag_ids"),
    ],
)
def test_an_edit_takes_json_types_and_a_string_wipes_nothing(
    api: Api, tagged: tuple[str, str, str], body: dict[str, Any], code: str
) -> None:
    _, knowledge_id, tag = tagged
    assert_client_error(_put(api, f"/knowledge/{knowledge_id}", body), code)
    row = api.knowledge(knowledge_id)
    assert row["tag_ids"] == [tag] and row["metadata"] == {"dept": "ops"}


def test_the_json_create_bodies_take_json_types_too(api: Api, tagged: tuple[str, str, str]) -> None:
    kb, _, tag = tagged
    manual = api.post(f"/knowledge-bases/{kb}/knowledge/manual", {"content": "# a\n\nb", "tag_ids": tag})
    assert_client_error(manual, "invalid_tag_ids")
    url = api.post(
        f"/knowledge-bases/{kb}/knowledge/url",
        {"url": "https://example.com/a.html", "process_config": '{"summary_enabled": false}'},
    )
    assert_client_error(url, "invalid_process_config")
    presign = api.post(
        f"/knowledge-bases/{kb}/knowledge/upload-url", {"file_name": "a.pdf", "metadata": "{}"}
    )
    assert_client_error(presign, "invalid_metadata")
    # the form keeps its conveniences: a comma-separated list and JSON text
    form = api.upload(kb, "b.md", TEXT + b"b", {"tag_ids": f" {tag} ,", "metadata": '{"a": 1}'})
    assert form.status_code == 200 and form.json_body["data"]["tag_ids"] == [tag], form.json_body
    assert form.json_body["data"]["metadata"] == {"a": 1}


@pytest.mark.parametrize("title", ["   ", "invoice\u202efdp.exe", "a\u2028b", "a\u2029b", "x\u2066y\u2069"])
def test_a_blank_title_or_one_with_bidi_or_line_separators_is_refused(
    api: Api, tagged: tuple[str, str, str], title: str
) -> None:
    _, knowledge_id, _ = tagged
    assert_client_error(_put(api, f"/knowledge/{knowledge_id}", {"title": title}), "invalid_title")
    assert api.knowledge(knowledge_id)["title"] == "a.md"


def test_a_title_loses_the_spaces_around_it(api: Api, tagged: tuple[str, str, str]) -> None:
    kb, knowledge_id, _ = tagged
    edited = _put(api, f"/knowledge/{knowledge_id}", {"title": "  Tide tables  "})
    assert edited.status_code == 200 and edited.json_body["data"]["title"] == "Tide tables"
    manual = api.post(f"/knowledge-bases/{kb}/knowledge/manual", {"title": " Notes ", "content": "x"})
    assert manual.json_body["data"]["title"] == "Notes"
    bidi = api.post(f"/knowledge-bases/{kb}/knowledge/url", {"url": "https://e.com/a", "title": "a\u202eb"})
    assert_client_error(bidi, "invalid_title")


def test_a_title_taken_from_a_heading_is_the_heading_text(api: Api) -> None:
    kb = api.create_kb()["id"]
    for content, title in [("# Heading\n\ntext", "Heading"), ("### Deep  one ##x\n\ny", "Deep one ##x")]:
        created = api.post(f"/knowledge-bases/{kb}/knowledge/manual", {"content": content, "status": "draft"})
        assert created.status_code == 200 and created.json_body["data"]["title"] == title, created.json_body
    plain = api.post(
        f"/knowledge-bases/{kb}/knowledge/manual", {"content": "#hashtag line", "status": "draft"}
    )
    assert plain.json_body["data"]["title"] == "#hashtag line"  # not a heading: no space after the marker


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"file_name": "x.pdf", "file_size": 0}, "invalid_file_size"),
        (
            {"file_name": "x.pdf", "content_type": "text/plain\r\nX-Amz-Acl: public-read"},
            "invalid_content_type",
        ),
        ({"file_name": "x.pdf", "content_type": "application/pdf\n"}, "invalid_content_type"),
        ({"file_name": "x.pdf", "content_type": "t\u00e9xt/plain"}, "invalid_content_type"),
        ({"file_name": "x.pdf", "content_type": "application"}, "invalid_content_type"),
        ({"file_name": "x.pdf", "content_type": "application/" + "x" * 300}, "invalid_content_type"),
        ({"fileName": "y.pdf", "file_name": "z.pdf"}, "invalid_body"),
    ],
)
def test_a_presigned_upload_is_granted_only_for_what_the_put_can_carry(
    api: Api, body: dict[str, Any], code: str
) -> None:
    kb = api.create_kb()["id"]
    response = api.post(f"/knowledge-bases/{kb}/knowledge/upload-url", body)
    assert_client_error(response, code)
    assert "data" not in response.json_body


def test_a_media_type_with_parameters_is_granted_and_echoed(api: Api) -> None:
    kb = api.create_kb()["id"]
    content_type = 'text/plain; charset=utf-8; name="a b"'
    body = {"file_name": "x.txt", "file_size": 1, "content_type": content_type}
    granted = api.post(f"/knowledge-bases/{kb}/knowledge/upload-url", body)
    assert granted.status_code == 201, granted.json_body
    assert granted.json_body["data"]["headers"] == {"Content-Type": content_type}


def test_an_unknown_field_is_an_invalid_body_not_the_field_it_resembles(api: Api) -> None:
    kb = api.create_kb()["id"]
    response = api.post(f"/knowledge-bases/{kb}/knowledge/manual", {"content": "x", "titel": "typo"})
    assert_client_error(response, "invalid_body")
    nested = api.post(f"/knowledge-bases/{kb}/knowledge/manual", {"content": "x", "process_config": {"x": 1}})
    assert_client_error(nested, "invalid_process_config")  # inside a field: that field's code


def test_an_oversized_json_body_is_body_too_large_without_upload_advice(api: Api, services: Services) -> None:
    kb = api.create_kb()["id"]
    big = "tide " * (services.settings.api_max_body // 5 + 10)
    response = api.post(f"/knowledge-bases/{kb}/hybrid-search", {"query_text": big})
    assert response.status_code == 413
    assert response.json_body["error"]["code"] == "body_too_large"
    assert "upload-url" not in response.json_body["error"]["message"]
    upload = api.upload(kb, "big.md", b"x" * (services.settings.api_max_body + 1))
    assert upload.status_code == 413 and upload.json_body["error"]["code"] == "use_presigned_upload"
