"""The OpenSearch index scope is a stack parameter (`OpenSearchIndexScope`, rev4 F3): it reaches every function
through Globals, so no function can be left on the other scope, and a `sam deploy` keeps it (a variable set by
hand on each function was dropped by the next deploy, sending every search back to the shared index)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chalicelib.settings import Settings, load_settings

from .iam_policy import ROOT

VARIABLE = "WEKNORA_OPENSEARCH_INDEX_SCOPE"


@pytest.fixture(scope="module")
def template() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((ROOT / "infra" / "template.json").read_text(encoding="utf-8"))
    return loaded


def test_the_index_scope_is_a_parameter_every_function_reads(template: dict[str, Any]) -> None:
    spec = template["Parameters"]["OpenSearchIndexScope"]
    assert spec["Type"] == "String" and spec["AllowedValues"] == ["space", "tenant"]
    assert spec["Default"] == Settings().opensearch_index_scope == load_settings({}).opensearch_index_scope
    assert template["Globals"]["Function"]["Environment"]["Variables"][VARIABLE] == {
        "Ref": "OpenSearchIndexScope"
    }
    for value in spec["AllowedValues"]:  # each value the template allows is one the code accepts
        assert load_settings({VARIABLE: value}).opensearch_index_scope == value
    for name, resource in template["Resources"].items():  # none sets its own
        own = resource.get("Properties", {}).get("Environment", {}).get("Variables", {})
        assert VARIABLE not in own, name
