"""Every PynamoDB model of a Services build goes through one Connection (one botocore client), with the
schemas of models that share a table merged, so queries on either model's indexes still work."""

from __future__ import annotations

import pytest
from pynamodb.connection import Connection

from chalicelib.adapters.dynamo import build_models, share_one_connection, shared_connection
from chalicelib.settings import get_settings


def test_models_share_one_connection_and_a_shared_tables_indexes_merge() -> None:
    models = build_models(get_settings())
    connection = Connection(region="us-east-1")
    share_one_connection(connection, *models.all())
    assert {m._get_connection().connection for m in models.all()} == {connection}
    tenants = connection.get_meta_table(models.tenant.Meta.table_name)
    indexes = {i["IndexName"] for i in tenants.data["GlobalSecondaryIndexes"]}
    assert indexes == {"api-key-index", "tenant-keys-index"}
    assert tenants.get_index_hash_keyname("api-key-index") == "api_key_hash"
    assert tenants.get_index_hash_keyname("tenant-keys-index") == "tenant_id"
    assert {a["AttributeName"] for a in tenants.data["AttributeDefinitions"]} == {
        "id",
        "api_key_hash",
        "tenant_id",
    }
    share_one_connection(connection, *models.all())  # again: a no-op

    other = build_models(get_settings())  # a later model on a known table with another schema is refused
    with pytest.raises(ValueError, match="another schema"):
        share_one_connection(connection, other.api_key)


def test_the_process_shares_one_connection_per_region_and_endpoint() -> None:
    assert shared_connection("us-east-1", "http://a") is shared_connection("us-east-1", "http://a")
    assert shared_connection("us-east-1", "http://a") is not shared_connection("us-east-1", "http://b")
    assert shared_connection("eu-west-1", "").host is None  # on AWS: the region's endpoint
