"""Issue 27: moto's DynamoDB items live in a file with a bounded number of them in memory (`moto_items`).
With the bound set to a handful, every answer must still be moto's own (its methods put back, same data),
after updates in place, deletes and cancelled transactions, and a Scan's pages must be moto's pages."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError
from test_moto_dynamodb_scaling import _as_moto_ships, _compare, _pages, table  # noqa: F401

from chalicelib.local import moto_items

LIVE = 5


@pytest.fixture(autouse=True)
def few_live_items(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(moto_items, "LIVE_ITEMS", LIVE)


def _live() -> int:
    file = moto_items.item_file()
    return len(file.live)


def test_memory_holds_a_bounded_number_of_items_and_the_rest_reads_back(table: Any) -> None:  # noqa: F811
    ddb, name = table
    everything = sorted(map(str, ddb.scan(TableName=name)["Items"]))
    assert len(everything) > 200 and _live() <= LIVE
    first = ddb.scan(TableName=name, Limit=1)["Items"][0]
    assert ddb.get_item(TableName=name, Key={"pk": first["pk"], "sk": first["sk"]})["Item"] == first
    assert "Item" not in ddb.get_item(TableName=name, Key={"pk": first["pk"], "sk": {"S": "chunk#absent"}})
    assert sorted(map(str, ddb.scan(TableName=name)["Items"])) == everything
    assert ddb.describe_table(TableName=name)["Table"]["ItemCount"] == len(everything)


def test_an_update_in_place_survives_being_forgotten(table: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    """moto changes an updated item in place; the file must get the change before the object is let go."""
    ddb, name = table
    keys = [item for item in ddb.scan(TableName=name, Limit=30)["Items"]]
    for i, item in enumerate(keys):
        ddb.update_item(
            TableName=name,
            Key={"pk": item["pk"], "sk": item["sk"]},
            UpdateExpression="SET #t = :t, #o = :o",
            ExpressionAttributeNames={"#t": "text", "#o": "owner"},
            ExpressionAttributeValues={":t": {"S": f"changed-{i}"}, ":o": {"S": "owner-moved"}},
        )
    ddb.scan(TableName=name)  # every item read once more: the updated ones are long forgotten
    assert _live() <= LIVE
    for i, item in enumerate(keys):
        stored = ddb.get_item(TableName=name, Key={"pk": item["pk"], "sk": item["sk"]})["Item"]
        assert stored["text"] == {"S": f"changed-{i}"}
    moved = ddb.query(
        TableName=name,
        IndexName="by_owner",
        KeyConditionExpression="#o = :o",
        ExpressionAttributeNames={"#o": "owner"},
        ExpressionAttributeValues={":o": {"S": "owner-moved"}},
    )["Items"]
    assert len(moved) == sum(1 for item in keys if "created" in item)  # the GSI's range key must be there
    _compare(ddb, name, monkeypatch)


def test_deletes_and_a_cancelled_transaction_answer_as_moto_does(
    table: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ddb, name = table
    items = ddb.scan(TableName=name, Limit=12)["Items"]
    for item in items[:6]:
        ddb.delete_item(TableName=name, Key={"pk": item["pk"], "sk": item["sk"]})
    before = sorted(map(str, ddb.scan(TableName=name)["Items"]))
    with pytest.raises(ClientError):
        ddb.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": name,
                        "Key": {"pk": items[6]["pk"], "sk": items[6]["sk"]},
                        "UpdateExpression": "SET #o = :o",
                        "ExpressionAttributeNames": {"#o": "owner"},
                        "ExpressionAttributeValues": {":o": {"S": "owner-rolled-back"}},
                    }
                },
                {
                    "Put": {
                        "TableName": name,
                        "Item": {"pk": {"S": "kb-new"}, "sk": {"S": "chunk#new"}},
                    }
                },
                {
                    "ConditionCheck": {
                        "TableName": name,
                        "Key": {"pk": items[7]["pk"], "sk": items[7]["sk"]},
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                },
            ]
        )
    assert sorted(map(str, ddb.scan(TableName=name)["Items"])) == before
    assert ddb.describe_table(TableName=name)["Table"]["ItemCount"] == len(before)
    _compare(ddb, name, monkeypatch)


def test_scans_page_as_moto_does(table: Any, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    ddb, name = table
    scans: list[dict[str, Any]] = [
        {"TableName": name},
        {"TableName": name, "Limit": 7},
        {
            "TableName": name,
            "Limit": 50,
            "FilterExpression": "n > :n",
            "ExpressionAttributeValues": {":n": {"N": "30"}},
        },
        {"TableName": name, "Limit": 9, "ProjectionExpression": "pk, sk"},
        {"TableName": name, "Limit": 11, "Segment": 1, "TotalSegments": 3},
        {"TableName": name, "IndexName": "by_owner", "Limit": 13},
    ]
    ours = [_pages(ddb, "scan", **scan) for scan in scans]
    with monkeypatch.context() as m:
        _as_moto_ships(m)
        shipped = [_pages(ddb, "scan", **scan) for scan in scans]
    assert ours == shipped
    assert all(len(pages) > 1 for pages in ours[1:])


def test_an_index_query_reads_its_page_not_every_item_under_the_key(
    table: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ddb, name = table
    read: list[int] = []
    ordered = moto_items.SpilledItems.index_ordered

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        for item in ordered(self, *args, **kwargs):
            read.append(1)
            yield item

    monkeypatch.setattr(moto_items.SpilledItems, "index_ordered", counted)
    query = {
        "TableName": name,
        "IndexName": "by_owner",
        "KeyConditionExpression": "#o = :o",
        "ExpressionAttributeNames": {"#o": "owner"},
        "ExpressionAttributeValues": {":o": {"S": "owner-1"}},
    }
    under_the_key = ddb.query(**query, Select="COUNT")["Count"]
    read.clear()
    page = ddb.query(**query, Limit=3)
    assert len(page["Items"]) == 3 and "LastEvaluatedKey" in page
    assert len(read) <= 4 < under_the_key
