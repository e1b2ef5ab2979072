"""The resource catalog's contract on the DynamoDB adapter (moto: the resources table of
infra/template.json)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import boto3
import pytest
from service.resource_contract import ResourceContract, _now, resource

from chalicelib.bootstrap import Services
from chalicelib.domain.resources import GRANT_KEPT_AFTER_EXPIRY, AccessGrant, token_hash
from chalicelib.ports import ResourceCatalog


class TestDynamoResourceCatalog(ResourceContract):
    @pytest.fixture
    def catalog(self, module_services: Services) -> ResourceCatalog:
        return module_services.resources


def test_a_grant_carries_its_ttl_and_the_table_expires_on_it(module_services: Services) -> None:
    """The resources table (provisioned from infra/template.json) has DynamoDB TTL on `purge_at`; a grant
    carries it as epoch seconds, its expiry plus a day (a resource never expires)."""
    table = module_services.settings.table("resources")
    ttl = boto3.client("dynamodb").describe_time_to_live(TableName=table)["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "purge_at"}
    assert timedelta(days=1) == GRANT_KEPT_AFTER_EXPIRY

    catalog = module_services.resources
    res = catalog.register(resource(str(uuid.uuid4())))
    expires = _now() + timedelta(seconds=900)
    digest = token_hash(uuid.uuid4().hex)
    catalog.put_grant(AccessGrant(digest, res.id, res.tenant_id, "download", _now(), expires))
    items = boto3.resource("dynamodb").Table(table)
    grant_item = items.get_item(Key={"id": f"grant#{digest}"}, ConsistentRead=True)["Item"]
    assert int(grant_item["purge_at"]) == int(expires.timestamp()) + 86_400
    resource_item = items.get_item(Key={"id": res.id}, ConsistentRead=True)["Item"]
    assert "purge_at" not in resource_item
    found = catalog.get_grant(digest)
    assert found is not None and found.expires_at == expires and found.purge_at == int(grant_item["purge_at"])
