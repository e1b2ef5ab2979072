"""Names, titles and tag names are one line of printable text: a C0 or C1 control character in one (ESC,
CSI, a bell, a line break) is a 400 with the field's own code, so no tenant can store escape sequences that
another tenant's terminal would run (a knowledge base shared read-only shows its names to both)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from chalicelib import commands
from chalicelib.commands import validate
from chalicelib.domain.errors import BadRequest

ESCAPES = ["Finance\x1b]52;c;ZWNobyBwd25lZA==\x07", "a\x1b[2Jb", "a\x9b31mb", "a\x00b", "a\x7fb", "a\x90b"]

FIELDS: list[tuple[type[BaseModel], dict[str, Any], str, str]] = [
    (commands.CreateKnowledgeBase, {}, "name", "invalid_name"),
    (commands.UpdateKnowledgeBase, {}, "name", "invalid_name"),
    (commands.CloneKnowledgeBaseRequest, {}, "name", "invalid_name"),
    (commands.ManualRequest, {"content": "x"}, "title", "invalid_title"),
    (commands.UrlImportRequest, {"url": "https://example.com/"}, "title", "invalid_title"),
    (commands.EditKnowledgeRequest, {}, "title", "invalid_title"),
    (commands.CreateTagRequest, {}, "name", "invalid_tag_name"),
    (commands.UpdateTagRequest, {}, "name", "invalid_tag_name"),
    (commands.CreateTenantRequest, {}, "name", "invalid_name"),
    (commands.IssueKeyRequest, {}, "name", "invalid_name"),
]


@pytest.mark.parametrize("value", ESCAPES)
@pytest.mark.parametrize(
    ("model", "rest", "field", "code"), FIELDS, ids=[f"{m.__name__}.{f}" for m, _, f, _ in FIELDS]
)
def test_a_control_character_in_a_name_is_refused_with_the_field_s_code(
    model: type[BaseModel], rest: dict[str, Any], field: str, code: str, value: str
) -> None:
    with pytest.raises(BadRequest) as refused:
        validate(model, {**rest, field: value})
    assert refused.value.code == code
    assert "control characters" in refused.value.message


@pytest.mark.parametrize(
    ("model", "rest", "field", "code"), FIELDS, ids=[f"{m.__name__}.{f}" for m, _, f, _ in FIELDS]
)
def test_printable_names_in_any_script_still_pass(
    model: type[BaseModel], rest: dict[str, Any], field: str, code: str
) -> None:
    name = "Rapport 2026 — 数据 [b] :fire: ünïcode"
    assert getattr(validate(model, {**rest, field: name}), field) == name


def test_a_tag_name_s_tabs_and_line_breaks_still_become_spaces() -> None:
    """Whitespace (NEL, U+0085, included) is folded into single spaces before the check, as it was."""
    assert validate(commands.CreateTagRequest, {"name": " red\tand\nblue\x85x "}).name == "red and blue x"
