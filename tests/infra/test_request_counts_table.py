"""The tenants' request limit's table: keyed and expired on the attributes the adapter writes (a window's
count goes by TTL, no sweep), on demand and encrypted as the other tables, and written by the API alone
(one UpdateItem a request: no other function's role names it)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from chalicelib.adapters.dynamo.request_counts import build_request_count_model
from chalicelib.adapters.memory import memory_settings

from .iam_policy import ROOT, package_stack

TABLE = "RequestCountsTable"


@pytest.fixture(scope="module")
def packaged(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return package_stack(tmp_path_factory.mktemp("package"))


def test_the_table_is_keyed_and_expired_on_what_the_adapter_writes() -> None:
    template = json.loads((ROOT / "infra" / "template.json").read_text(encoding="utf-8"))
    properties = template["Resources"][TABLE]["Properties"]
    settings = memory_settings()
    model = build_request_count_model(settings)
    assert properties["TableName"] == {"Fn::Sub": "${Prefix}-request-counts"}
    assert settings.table("request-counts") == f"{settings.prefix}-request-counts"
    assert properties["KeySchema"] == [{"AttributeName": model.window_key.attr_name, "KeyType": "HASH"}]
    assert properties["TimeToLiveSpecification"] == {
        "AttributeName": model.expires_at.attr_name,
        "Enabled": True,
    }
    assert properties["BillingMode"] == "PAY_PER_REQUEST"
    assert properties["SSESpecification"] == {"SSEEnabled": True}


def _statements(template: dict[str, Any], role: str) -> list[dict[str, Any]]:
    policies = template["Resources"][role]["Properties"]["Policies"]
    listed = [s for p in policies for s in p["PolicyDocument"]["Statement"]]
    return [s["Fn::If"][1] if "Fn::If" in s else s for s in listed]


def _names_table(statement: dict[str, Any]) -> bool:
    return TABLE in json.dumps(statement.get("Resource"))


def test_only_the_api_may_count_and_only_with_update_item(packaged: dict[str, Any]) -> None:
    resources = packaged["Resources"]
    assert resources[TABLE]["DeletionPolicy"] == "RetainExceptOnCreate"
    roles = [name for name, r in resources.items() if r.get("Type") == "AWS::IAM::Role"]
    granting = {role: [s for s in _statements(packaged, role) if _names_table(s)] for role in roles}
    assert {role for role, found in granting.items() if found} == {"APIHandlerRole"}
    (grant,) = granting["APIHandlerRole"]
    actions = grant["Action"] if isinstance(grant["Action"], list) else [grant["Action"]]
    assert actions == ["dynamodb:UpdateItem"]
