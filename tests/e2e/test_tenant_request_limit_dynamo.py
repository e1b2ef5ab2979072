"""A tenant's request limit on DynamoDB (moto): the API's keys count in the request-counts table, one
conditional UpdateItem per request (the API's role allows it: the runtime fixture checks every call), the
window's item carries its TTL, the request past the limit is 429 `tenant_rate_limited` with `Retry-After`,
and another tenant's keys go on."""

from __future__ import annotations

from dataclasses import replace

import boto3
import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.request_limits import RequestWindow
from chalicelib.operations import tenants as tenant_operations
from chalicelib.settings import get_settings

from .conftest import Api

NOW = 1_800_000_002.25  # 7.75 s to the window's end: Retry-After 8


def test_a_tenant_past_its_window_is_refused_and_the_count_expires_by_ttl(
    api: Api, other_api: Api, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tenant_operations, "clock", lambda: NOW)
    services.settings = replace(services.settings, tenant_requests_per_second=1)
    assert [api.get("/models").status_code for _ in range(10)] == [200] * 10
    refused = api.get("/models")
    assert refused.status_code == 429, refused.body
    assert refused.json_body["error"]["code"] == "tenant_rate_limited"
    assert refused.headers["Retry-After"] == "8"
    assert other_api.get("/models").status_code == 200

    dynamodb = boto3.client("dynamodb")
    table = get_settings().table("request-counts")
    window = RequestWindow.at(NOW, 1)
    item = dynamodb.get_item(TableName=table, Key={"window_key": {"S": f"local#{window.start}"}})["Item"]
    assert item["requests"] == {"N": "10"}  # the refused request counted nothing
    assert item["expires_at"] == {"N": str(window.expires_at)}
    ttl = dynamodb.describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    assert ttl["TimeToLiveStatus"] == "ENABLED" and ttl["AttributeName"] == "expires_at"


def test_the_operators_rate_is_kept_on_the_tenant_row(services: Services) -> None:
    from chalicelib.operations.tenants import create_tenant_with_key

    tenant, _ = create_tenant_with_key(services, "acme")
    assert services.tenants.get(tenant.id).requests_per_second == 0  # type: ignore[union-attr]
    changed = services.tenants.set_quotas(tenant.id, 1000, 5, 3)
    assert changed is not None and changed.requests_per_second == 3
    assert (changed.storage_quota, changed.document_quota) == (1000, 5)
    services.tenants.put(changed)  # a whole-row write keeps it
    assert services.tenants.get(tenant.id).requests_per_second == 3  # type: ignore[union-attr]
    assert services.tenants.set_quotas("no-such-tenant", 0, 0, 3) is None
