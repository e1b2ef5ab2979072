"""Issue 27: moto's DynamoDB Query reads only the partition (or the index's matching items) and transactions
save only the items they touch; the answers are moto's own. Every query here is asked twice, of the patched
server and of moto's original methods put back, page by page: items, order, counts and LastEvaluatedKey."""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from chalicelib.local import moto_dynamodb
from chalicelib.local.moto_server import MotoServer

PARTITIONS = [f"kb-{i}" for i in range(8)]


@pytest.fixture
def table(moto_server: MotoServer) -> Iterator[tuple[Any, str]]:
    assert moto_dynamodb.ORIGINALS, "the patches are installed with the server"
    ddb = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=moto_server.url)
    name = f"scaling-{uuid.uuid4().hex[:8]}"
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
            {"AttributeName": "owner", "AttributeType": "S"},
            {"AttributeName": "created", "AttributeType": "S"},
            {"AttributeName": "status", "AttributeType": "S"},
            {"AttributeName": "n", "AttributeType": "N"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by_owner",
                "KeySchema": [
                    {"AttributeName": "owner", "KeyType": "HASH"},
                    {"AttributeName": "created", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            },
            {
                "IndexName": "by_status",
                "KeySchema": [{"AttributeName": "status", "KeyType": "HASH"}],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            },
        ],
        LocalSecondaryIndexes=[
            {
                "IndexName": "by_n",
                "KeySchema": [
                    {"AttributeName": "pk", "KeyType": "HASH"},
                    {"AttributeName": "n", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    rng = random.Random(27)
    for i in range(240):
        item: dict[str, Any] = {
            "pk": {"S": rng.choice(PARTITIONS)},
            "sk": {"S": f"chunk#{rng.randrange(10_000):05d}"},
            "n": {"N": str(rng.randrange(50))},
            "text": {"S": "x" * rng.randrange(1, 40)},
        }
        if i % 5:  # a sparse index: some items have no owner
            item["owner"] = {"S": f"owner-{rng.randrange(4)}"}
            item["created"] = {"S": f"2026-12-{rng.randrange(1, 28):02d}"}  # ties within an owner
        if i % 3 == 0:
            item["status"] = {"S": rng.choice(["new", "done"])}
        ddb.put_item(TableName=name, Item=item)
    yield ddb, name
    ddb.delete_table(TableName=name)


def _pages(ddb: Any, operation: str = "query", **query: Any) -> list[dict[str, Any]]:
    """Every page of a Query (or a Scan: `operation="scan"`), following LastEvaluatedKey."""
    pages = []
    while True:
        reply = getattr(ddb, operation)(**query)
        reply.pop("ResponseMetadata", None)
        pages.append(reply)
        if "LastEvaluatedKey" not in reply:
            return pages
        query["ExclusiveStartKey"] = reply["LastEvaluatedKey"]


def _as_moto_ships(monkeypatch: pytest.MonkeyPatch) -> None:
    for (cls, name), original in moto_dynamodb.ORIGINALS.items():
        monkeypatch.setattr(cls, name, original)


def _queries(name: str) -> list[dict[str, Any]]:
    queries: list[dict[str, Any]] = []
    for pk in [*PARTITIONS[:4], "kb-absent"]:
        base = {
            "TableName": name,
            "KeyConditionExpression": "pk = :p",
            "ExpressionAttributeValues": {":p": {"S": pk}},
        }
        queries += [
            base,
            {**base, "ScanIndexForward": False, "Limit": 7},
            {**base, "Limit": 5, "ConsistentRead": True},
            {
                **base,
                "KeyConditionExpression": "pk = :p AND begins_with(sk, :b)",
                "ExpressionAttributeValues": {":p": {"S": pk}, ":b": {"S": "chunk#0"}},
                "Limit": 4,
            },
            {
                **base,
                "KeyConditionExpression": "pk = :p AND sk BETWEEN :a AND :z",
                "ExpressionAttributeValues": {
                    ":p": {"S": pk},
                    ":a": {"S": "chunk#02"},
                    ":z": {"S": "chunk#07"},
                },
            },
            {
                **base,
                "FilterExpression": "n > :n",
                "ExpressionAttributeValues": {":p": {"S": pk}, ":n": {"N": "20"}},
                "Limit": 6,
            },
            {**base, "ProjectionExpression": "sk, #t", "ExpressionAttributeNames": {"#t": "text"}},
            {**base, "Select": "COUNT"},
            {**base, "IndexName": "by_n", "Limit": 6},
            {
                **base,
                "IndexName": "by_n",
                "KeyConditionExpression": "pk = :p AND n < :n",
                "ExpressionAttributeValues": {":p": {"S": pk}, ":n": {"N": "25"}},
                "ScanIndexForward": False,
            },
        ]
    for owner in ["owner-0", "owner-1", "owner-3", "owner-none"]:
        base = {
            "TableName": name,
            "IndexName": "by_owner",
            "KeyConditionExpression": "#o = :o",
            "ExpressionAttributeNames": {"#o": "owner"},
            "ExpressionAttributeValues": {":o": {"S": owner}},
        }
        queries += [
            base,
            {**base, "Limit": 7},
            {**base, "Limit": 9, "ScanIndexForward": False},
            {
                **base,
                "KeyConditionExpression": "#o = :o AND created >= :c",
                "ExpressionAttributeValues": {":o": {"S": owner}, ":c": {"S": "2026-12-14"}},
                "Limit": 5,
            },
        ]
    for status in ["new", "done"]:
        queries.append(
            {
                "TableName": name,
                "IndexName": "by_status",
                "KeyConditionExpression": "#s = :s",
                "ExpressionAttributeNames": {"#s": "status"},
                "ExpressionAttributeValues": {":s": {"S": status}},
                "Limit": 8,
            }
        )
    return queries


def _answers(ddb: Any, name: str) -> list[list[dict[str, Any]]]:
    return [_pages(ddb, **q) for q in _queries(name)]


def _compare(ddb: Any, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    patched = _answers(ddb, name)
    with monkeypatch.context() as m:
        _as_moto_ships(m)
        shipped = _answers(ddb, name)
    assert len(patched) == len(shipped)
    for got, want in zip(patched, shipped, strict=True):
        assert got == want
    assert any(len(pages) > 1 for pages in patched)  # pagination is exercised
    assert any(page.get("Count") for pages in patched for page in pages)


def test_queries_answer_as_moto_does(table: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    ddb, name = table
    _compare(ddb, name, monkeypatch)


def test_index_maps_follow_updates_deletes_and_transactions(
    table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ddb, name = table
    _answers(ddb, name)  # the index maps are built now; the writes below must keep them true
    items = ddb.scan(TableName=name)["Items"]
    rng = random.Random(9)
    for item in rng.sample(items, 40):
        key = {"pk": item["pk"], "sk": item["sk"]}
        choice = rng.randrange(4)
        if choice == 0:  # an index key changed in place
            ddb.update_item(
                TableName=name,
                Key=key,
                UpdateExpression="SET #o = :o, created = :c",
                ExpressionAttributeNames={"#o": "owner"},
                ExpressionAttributeValues={":o": {"S": "owner-3"}, ":c": {"S": "2026-12-31"}},
            )
        elif choice == 1:  # out of the sparse indexes
            ddb.update_item(
                TableName=name,
                Key=key,
                UpdateExpression="REMOVE #o, #s",
                ExpressionAttributeNames={"#o": "owner", "#s": "status"},
            )
        elif choice == 2:
            ddb.delete_item(TableName=name, Key=key)
        else:  # an item created by an update
            ddb.update_item(
                TableName=name,
                Key={"pk": item["pk"], "sk": {"S": "new#" + item["sk"]["S"]}},
                UpdateExpression="SET #o = :o, created = :c, n = :n, #s = :s",
                ExpressionAttributeNames={"#o": "owner", "#s": "status"},
                ExpressionAttributeValues={
                    ":o": {"S": "owner-1"},
                    ":c": {"S": "2026-12-02"},
                    ":n": {"N": "7"},
                    ":s": {"S": "new"},
                },
            )
    first = {"pk": items[0]["pk"], "sk": {"S": "tx#1"}}
    ddb.transact_write_items(
        TransactItems=[
            {
                "Put": {
                    "TableName": name,
                    "Item": {**first, "owner": {"S": "owner-0"}, "created": {"S": "2026-12-05"}},
                }
            },
            {
                "Update": {
                    "TableName": name,
                    "Key": {"pk": items[1]["pk"], "sk": items[1]["sk"]},
                    "UpdateExpression": "SET #o = :o",
                    "ExpressionAttributeNames": {"#o": "owner"},
                    "ExpressionAttributeValues": {":o": {"S": "owner-0"}},
                }
            },
        ]
    )
    _compare(ddb, name, monkeypatch)


def test_a_cancelled_transaction_leaves_every_item_as_it_was(
    table: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ddb, name = table
    _answers(ddb, name)
    before = sorted(map(str, ddb.scan(TableName=name)["Items"]))
    victim = ddb.query(
        TableName=name,
        IndexName="by_owner",
        KeyConditionExpression="#o = :o",
        ExpressionAttributeNames={"#o": "owner"},
        ExpressionAttributeValues={":o": {"S": "owner-2"}},
        Limit=1,
    )["Items"][0]
    with pytest.raises(ClientError) as raised:
        ddb.transact_write_items(
            TransactItems=[
                {
                    "Put": {
                        "TableName": name,
                        "Item": {
                            "pk": {"S": "kb-0"},
                            "sk": {"S": "tx#new"},
                            "owner": {"S": "owner-2"},
                            "created": {"S": "2026-12-01"},
                        },
                    }
                },
                {"Delete": {"TableName": name, "Key": {"pk": victim["pk"], "sk": victim["sk"]}}},
                {
                    "Update": {
                        "TableName": name,
                        "Key": {"pk": {"S": "kb-1"}, "sk": {"S": "never"}},
                        "UpdateExpression": "SET #o = :o",
                        "ConditionExpression": "attribute_exists(pk)",
                        "ExpressionAttributeNames": {"#o": "owner"},
                        "ExpressionAttributeValues": {":o": {"S": "owner-2"}},
                    }
                },
            ]
        )
    assert raised.value.response["Error"]["Code"] == "TransactionCanceledException"
    assert sorted(map(str, ddb.scan(TableName=name)["Items"])) == before
    _compare(ddb, name, monkeypatch)


def test_a_query_reads_only_its_partition(table: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the bench measures as time, said as work: moto's whole-table listing is not called."""
    from moto.dynamodb.models.table import Table

    ddb, name = table
    listed: list[int] = []
    original = moto_dynamodb.ORIGINALS[(Table, "all_items")]

    def counting(self: Any) -> Any:
        items = original(self)
        listed.append(len(items))
        return items

    monkeypatch.setattr(Table, "all_items", moto_dynamodb.narrowed_all_items(counting))
    ddb.query(
        TableName=name,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "kb-0"}},
    )
    ddb.query(
        TableName=name,
        IndexName="by_owner",
        KeyConditionExpression="#o = :o",
        ExpressionAttributeNames={"#o": "owner"},
        ExpressionAttributeValues={":o": {"S": "owner-0"}},
    )
    assert listed == []
