"""A request that says one thing twice is refused, not read by its last word (found by an audit).

A JSON key given twice in one object, or a query parameter given twice, once counted with its last value,
silently (`limit=1&limit=500` read 500); other parsers and proxies keep the first, so two readers of one
request disagreed on what it says. And a 415 answer repeated the request's Content-Type verbatim: a header
is the client's text (control characters, markup, any length)."""

from __future__ import annotations

import pytest
from e2e.conftest import V1, Api

from chalicelib.faq.rows import SourceError, read_rows
from security.test_malformed_requests import JSON_ROUTES, _fill, _send, assert_client_error, ids  # noqa: F401


def test_a_key_given_twice_is_refused_on_every_json_route(api: Api, ids: dict[str, str]) -> None:  # noqa: F811
    for method, path in JSON_ROUTES:
        response = _send(api, method, _fill(path, ids), '{"name": "a", "name": "b"}')
        assert_client_error(response, "invalid_json")
        assert "'name' twice" in response.json_body["error"]["message"]


def test_a_key_given_twice_deep_in_a_body_is_refused_and_nothing_changes(
    api: Api,
    ids: dict[str, str],  # noqa: F811
) -> None:
    edit = f"{V1}/knowledge/{ids['knowledge_id']}"
    for raw in ('{"title": "first", "title": "second"}', '{"metadata": {"k": [{"x": 1, "x": 2}]}}'):
        assert_client_error(_send(api, "PUT", edit, raw), "invalid_json")
    shown = api.get(f"/knowledge/{ids['knowledge_id']}").json_body["data"]
    assert shown["title"] not in ("first", "second") and "k" not in (shown.get("metadata") or {})


def test_the_same_key_in_two_objects_is_fine(api: Api, ids: dict[str, str]) -> None:  # noqa: F811
    raw = '{"title": "t", "metadata": {"title": {"title": 1}}}'
    response = _send(api, "PUT", f"{V1}/knowledge/{ids['knowledge_id']}", raw)
    assert response.status_code == 200, response.json_body


def test_a_key_given_twice_in_a_form_s_json_field_is_refused(api: Api, ids: dict[str, str]) -> None:  # noqa: F811
    upload = api.upload(ids["kb_id"], "a.md", b"# a\n\nb", {"metadata": '{"a": 1, "a": 2}'})
    assert_client_error(upload, "invalid_metadata")


def test_an_import_file_with_a_key_given_twice_is_not_read_by_its_last_value() -> None:
    """The entry is refused (its row fails, the others are read); a repeat in the file's own object refuses
    the file."""
    data = b'[{"question": "q", "answers": ["kept?"], "answers": ["or this?"]}, {"question": "r"}]'
    refused, other = read_rows(data, "entries.json")
    assert "'answers' twice" in refused.refused and other.refused == ""
    with pytest.raises(SourceError, match="'entries' twice"):
        read_rows(b'{"entries": [], "entries": [{"question": "q"}]}', "entries.json")


@pytest.mark.parametrize(
    "path",
    [
        "/knowledge-bases/{kb_id}/knowledge?page=1&page=2",
        "/knowledge-bases/{kb_id}/knowledge?source=url&source=file",
        "/knowledge/{knowledge_id}/chunks?limit=1&limit=500",
        "/knowledge/{knowledge_id}/file-url?kind=original&kind=parsed",
        "/knowledge-bases?page_size=5&page_size=5",
    ],
)
def test_a_query_parameter_given_twice_is_refused(api: Api, ids: dict[str, str], path: str) -> None:  # noqa: F811
    response = api.get(_fill(path, ids))
    assert_client_error(response, "invalid_query")
    name = path.split("?", 1)[1].split("=", 1)[0]
    assert f"'{name}'" in response.json_body["error"]["message"]


def test_query_parameters_given_once_still_count(api: Api, ids: dict[str, str]) -> None:  # noqa: F811
    response = api.get(f"/knowledge-bases/{ids['kb_id']}/knowledge?page=1&page_size=1&source=manual")
    assert response.status_code == 200, response.json_body
    assert [i["id"] for i in response.json_body["data"]["items"]] == [ids["knowledge_id"]]


@pytest.mark.parametrize(
    ("content_type", "named"),
    [
        ("text/html<script>alert(1)</script>", "malformed media type"),
        ("application/json\x01\x7f", "malformed media type"),
        ("x" * 5000 + "/y", "malformed media type"),
        ("Text/Plain; charset=<b>\x00</b>", "text/plain"),
    ],
)
def test_a_415_does_not_repeat_the_content_type(
    api: Api,
    ids: dict[str, str],  # noqa: F811
    content_type: str,
    named: str,
) -> None:
    response = _send(api, "POST", f"{V1}/knowledge-bases/{ids['kb_id']}/knowledge/file", b"x", content_type)
    assert response.status_code == 415, response.body[:300]
    error = response.json_body["error"]
    assert error == {"code": "unsupported_media_type", "message": f"this route does not take a {named} body"}
