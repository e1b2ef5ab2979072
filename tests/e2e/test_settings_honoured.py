"""Issue 24, defects 7 and 8: a setting that cannot be honoured is a 400 with a stable code (an unknown
parser engine, or one that does not parse the file type, anywhere a body names one), and a multipart
`tag_ids` sent as a JSON array string is read as the list it is."""

from __future__ import annotations

import json

import pytest

from chalicelib.domain.parser_engines import BUILTIN_OWN_TYPES, PARSER_ENGINE_TYPES
from chalicelib.parsers.engines import build_catalog

from .conftest import Api

TEXT = b"# Notes\n\nThe tide tables for the harbour are printed every spring.\n"


def _put(api: Api, path: str, body: dict[str, object]) -> object:
    return api.client.http.put(
        f"/api/v1{path}",
        headers={"X-API-Key": api.api_key, "Content-Type": "application/json"},
        body=json.dumps(body),
    )


@pytest.mark.parametrize(
    ("rules", "says"),
    [({"md": "mineru"}, "unknown"), ({"pdf": "simple"}, "does not parse .pdf")],
)
def test_a_parser_engine_rule_that_cannot_be_honoured_is_a_400_everywhere(
    api: Api, rules: dict[str, str], says: str
) -> None:
    kb = api.create_kb()
    upload = api.upload(
        kb["id"], "n.md", TEXT, {"process_config": json.dumps({"parser_engine_rules": rules})}
    )
    assert upload.status_code == 400, upload.json_body
    assert (
        upload.json_body["error"]["code"] == "invalid_process_config"
        and says in upload.json_body["error"]["message"]
    )
    created = api.post(
        "/knowledge-bases", {"name": "engines", "chunking_config": {"parser_engine_rules": rules}}
    )
    assert created.status_code == 400 and created.json_body["error"]["code"] == "invalid_chunking_config"
    tenant = _put(api, "/tenant/settings", {"parser_engine_rules": rules})
    assert tenant.status_code == 400 and tenant.json_body["error"]["code"] == "invalid_engine_rules"  # type: ignore[attr-defined]
    manual = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/manual",
        {"content": "# x\n\ny", "process_config": {"parser_engine_rules": rules}},
    )
    assert manual.status_code == 400 and manual.json_body["error"]["code"] == "invalid_process_config"


def test_an_engine_that_parses_the_type_is_accepted(api: Api) -> None:
    kb = api.create_kb(chunking_config={"parser_engine_rules": {"md": "markitdown", ".PDF": "builtin"}})
    assert kb["chunking_config"]["parser_engine_rules"] == {"md": "markitdown", "pdf": "builtin"}


def test_the_rule_table_is_the_catalog_the_docreader_runs() -> None:
    catalog = build_catalog()
    assert {name: engine.file_types for name, engine in catalog.items()} == PARSER_ENGINE_TYPES
    assert set(catalog["builtin"].handlers) == BUILTIN_OWN_TYPES  # type: ignore[attr-defined]


def test_multipart_tag_ids_as_a_json_array_string_are_a_list(api: Api) -> None:
    kb = api.create_kb()
    tags = [api.post(f"/knowledge-bases/{kb['id']}/tags", {"name": n}).json_body["data"]["id"] for n in "ab"]
    upload = api.upload(kb["id"], "n.md", TEXT, {"tag_ids": json.dumps(tags)})
    assert upload.status_code == 200, upload.json_body
    assert sorted(upload.json_body["data"]["tag_ids"]) == sorted(tags)
    comma = api.upload(kb["id"], "m.md", TEXT + b"more", {"tag_ids": ",".join(tags)})
    assert comma.status_code == 200 and sorted(comma.json_body["data"]["tag_ids"]) == sorted(tags)
    broken = api.upload(kb["id"], "o.md", TEXT + b"other", {"tag_ids": '["a", '})
    assert broken.status_code == 400 and broken.json_body["error"]["code"] == "invalid_tag_ids"
