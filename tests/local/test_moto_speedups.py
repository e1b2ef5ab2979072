"""What the local moto server does faster than moto: DynamoDB's data-plane results written with `json.dumps`
(every operation the pipeline uses must answer exactly what moto's own serializer would), and a state
machine's definition parsed once for all its executions."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto.core.responses import BaseResponse
from moto.dynamodb.responses import DynamoHandler
from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser, ASLParserException

from chalicelib.local import moto_patches
from chalicelib.local.moto_server import MotoServer

ITEM: dict[str, Any] = {
    "pk": {"S": "doc"},
    "sk": {"S": "chunk#0001"},
    "text": {"S": 'naïve 中文 \u2028 "quoted"'},
    "count": {"N": "12"},
    "raw": {"B": b"\x00\xffbinary"},
    "flag": {"BOOL": False},
    "nothing": {"NULL": True},
    "list": {"L": [{"S": "a"}, {"N": "1"}, {"B": b"\x01"}, {"M": {"deep": {"BOOL": True}}}]},
    "map": {"M": {"k": {"S": "v"}, "n": {"N": "-3"}, "l": {"L": []}}},
    "strings": {"SS": ["x", "y"]},
    "numbers": {"NS": ["1", "2.5"]},
    "blobs": {"BS": [b"\x02", b"\x03"]},
}
KEY = {"pk": ITEM["pk"], "sk": ITEM["sk"]}


@pytest.fixture
def compared(
    moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> Iterator[list[tuple[str, Any, Any]]]:
    """Every DynamoDB answer serialised both ways while the test runs: (action, ours, moto's)."""
    seen: list[tuple[str, Any, Any]] = []

    def both(handler: Any, action_result: Any) -> Any:
        ours = moto_patches.serialized_as_json(handler, action_result)
        theirs = BaseResponse.serialized(handler, action_result)
        seen.append((handler._get_action(), ours, theirs))
        return ours

    monkeypatch.setattr(DynamoHandler, "serialized", both)
    yield seen


def _table() -> Any:
    client = boto3.client("dynamodb")
    client.create_table(
        TableName="json-results",
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    return client


def test_data_plane_answers_equal_moto_serializer_on_every_attribute_type(
    compared: list[tuple[str, Any, Any]],
) -> None:
    client = _table()
    try:
        table = {"TableName": "json-results", "ReturnConsumedCapacity": "TOTAL"}
        client.put_item(**table, Item=ITEM)
        client.put_item(**table, Item={**ITEM, "sk": {"S": "chunk#0002"}})
        assert client.get_item(**table, Key=KEY)["Item"] == ITEM
        page = client.query(
            **table,
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "doc"}},
            Limit=1,
        )
        assert page["Items"] == [ITEM] and page["LastEvaluatedKey"] == KEY
        assert client.scan(**table)["Count"] == 2
        got = client.batch_get_item(RequestItems={"json-results": {"Keys": [KEY]}})
        assert got["Responses"]["json-results"] == [ITEM]
        updated = client.update_item(
            **table,
            Key=KEY,
            UpdateExpression="SET #c = #c + :one",
            ExpressionAttributeNames={"#c": "count"},
            ExpressionAttributeValues={":one": {"N": "1"}},
            ReturnValues="ALL_NEW",
        )
        assert updated["Attributes"]["count"] == {"N": "13"}
        client.transact_get_items(TransactItems=[{"Get": {"TableName": "json-results", "Key": KEY}}])
        client.transact_write_items(
            TransactItems=[
                {"Put": {"TableName": "json-results", "Item": {**ITEM, "sk": {"S": "chunk#0003"}}}}
            ]
        )
        client.batch_write_item(RequestItems={"json-results": [{"PutRequest": {"Item": ITEM}}]})
        deleted = client.delete_item(**table, Key=KEY, ReturnValues="ALL_OLD")
        assert deleted["Attributes"] == ITEM
        with pytest.raises(client.exceptions.ConditionalCheckFailedException):
            client.put_item(**table, Item=ITEM, ConditionExpression="attribute_exists(pk)")
    finally:
        client.delete_table(TableName="json-results")

    actions = {action for action, _, _ in compared}
    assert actions >= moto_patches.DATA_PLANE
    for action, ours, theirs in compared:
        assert ours[0] == theirs[0], action
        assert ours[1]["Content-Type"] == theirs[1]["Content-Type"], action
        ours_body = json.loads(ours[2])
        # The one key moto's serializer drops: DeleteItem's legacy ConsumedCapacityUnits is not in the
        # output shape, and botocore drops it as well.
        ours_body.pop("ConsumedCapacityUnits", None)
        assert ours_body == json.loads(theirs[2]), action


def test_executions_share_the_syntax_tree_but_not_their_evaluation_state(moto_server: MotoServer) -> None:
    definition = (Path(__file__).parents[2] / "infra" / "statemachine" / "knowledge.asl.json").read_text()
    program, tree = AmazonStateLanguageParser.parse(definition)
    again, same_tree = AmazonStateLanguageParser.parse(definition)
    assert same_tree is tree
    assert again is not program  # executions keep state in the components: each gets its own
    assert type(again) is type(program)
    for _ in range(2):  # a bad definition raises every time: no failure is cached
        with pytest.raises(ASLParserException):
            AmazonStateLanguageParser.parse('{"StartAt": "A", "States": {"A": {"Type": "Nope"}}}')
