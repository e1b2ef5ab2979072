"""Issue 27: the local stack's snapshot writes only what changed since the last one, and restoring it gives
the same state (items of every attribute type, objects, dead letters) in a fresh moto server."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from chalicelib.local.moto_server import MotoServer
from chalicelib.local.snapshot import MotoSnapshot


def _clients(url: str) -> tuple[Any, Any, Any]:
    kw: dict[str, Any] = {"region_name": "us-east-1", "endpoint_url": url}
    return boto3.client("dynamodb", **kw), boto3.client("s3", **kw), boto3.client("sqs", **kw)


def _provision(url: str, table: str, bucket: str, dlq: str) -> None:
    ddb, s3, sqs = _clients(url)
    ddb.create_table(
        TableName=table,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    s3.create_bucket(Bucket=bucket)
    sqs.create_queue(QueueName=dlq)


def _state(url: str, table: str, bucket: str, dlq: str) -> dict[str, Any]:
    ddb, s3, sqs = _clients(url)
    items = ddb.scan(TableName=table, ConsistentRead=True)["Items"]
    objects = {
        o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
        for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    }
    queue = sqs.get_queue_url(QueueName=dlq)["QueueUrl"]
    bodies = sorted(m["Body"] for m in sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, VisibilityTimeout=0).get("Messages", []))  # fmt: skip
    return {
        "items": sorted(items, key=lambda i: (i["pk"]["S"], int(i["sk"]["N"]))),
        "objects": objects,
        "dlq": bodies,
    }


@pytest.fixture
def names() -> Iterator[tuple[str, str, str]]:
    suffix = uuid.uuid4().hex[:8]
    yield f"snap-{suffix}", f"snap-{suffix}", f"snap-{suffix}-dlq"


def test_a_save_writes_only_what_changed_and_a_restore_gives_the_same_state(
    moto_server: MotoServer, names: tuple[str, str, str], tmp_path: Path
) -> None:
    table, bucket, dlq = names
    _provision(moto_server.url, table, bucket, dlq)
    ddb, s3, sqs = _clients(moto_server.url)
    for i in range(60):
        ddb.put_item(
            TableName=table, Item={"pk": {"S": f"kb-{i % 3}"}, "sk": {"N": str(i)}, "text": {"S": "x" * i}}
        )
    snapshot = MotoSnapshot(tmp_path, moto_server.url)
    first = snapshot.save()
    assert first.full and first.tables[table] == 60

    # Five changes: an item of every attribute type, an update, a delete, a transaction, an object, a letter.
    ddb.put_item(
        TableName=table,
        Item={
            "pk": {"S": "kb-0"},
            "sk": {"N": "1000"},
            "blob": {"B": b"\x00\xffbytes"},
            "blobs": {"BS": [b"\x01", b"\x02"]},
            "nested": {
                "M": {"b": {"B": b"\x03"}, "l": {"L": [{"N": "1.5"}, {"BOOL": True}, {"NULL": True}]}}
            },
            "tags": {"SS": ["a", "b"]},
            "nums": {"NS": ["1", "2"]},
        },
    )
    ddb.update_item(
        TableName=table,
        Key={"pk": {"S": "kb-1"}, "sk": {"N": "1"}},
        UpdateExpression="SET #t = :t",
        ExpressionAttributeNames={"#t": "text"},
        ExpressionAttributeValues={":t": {"S": "changed"}},
    )
    ddb.delete_item(TableName=table, Key={"pk": {"S": "kb-2"}, "sk": {"N": "2"}})
    ddb.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": table, "Item": {"pk": {"S": "kb-9"}, "sk": {"N": "9"}}}},
            {"Delete": {"TableName": table, "Key": {"pk": {"S": "kb-0"}, "sk": {"N": "3"}}}},
        ]
    )
    s3.put_object(Bucket=bucket, Key="doc.txt", Body=b"hello")
    sqs.send_message(QueueUrl=sqs.get_queue_url(QueueName=dlq)["QueueUrl"], MessageBody="it failed")
    second = snapshot.save()
    assert not second.full
    assert second.tables == {table: 5}  # 5 keys written since the first save, not the 60 items

    unchanged = snapshot.save()
    assert not unchanged.full and unchanged.tables == {}
    want = _state(moto_server.url, table, bucket, dlq)
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        (rows,) = db.execute("SELECT count(*) FROM items WHERE tbl = ?", (table,)).fetchone()
    assert rows == len(want["items"]) == 60 + 2 - 2

    fresh = MotoServer(separate_process=True).start(point_sdk=False)
    try:
        _provision(fresh.url, table, bucket, dlq)
        restorer = MotoSnapshot(tmp_path, fresh.url)
        restored = restorer.restore()
        assert restored.tables[table] == 60
        assert _state(fresh.url, table, bucket, dlq) == want
        # The restore's own writes are not changes: the restored stack's next save writes no item.
        after_restore = restorer.save()
        assert not after_restore.full and after_restore.tables == {}
    finally:
        fresh.stop()
    ddb.delete_table(TableName=table)


def test_a_failed_save_hands_over_the_same_changes_again(
    moto_server: MotoServer, names: tuple[str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, bucket, dlq = names
    _provision(moto_server.url, table, bucket, dlq)
    ddb, _, _ = _clients(moto_server.url)
    snapshot = MotoSnapshot(tmp_path, moto_server.url)
    snapshot.save()
    ddb.put_item(TableName=table, Item={"pk": {"S": "kb"}, "sk": {"N": "1"}})

    def disk_full(*_: Any) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(MotoSnapshot, "_save_buckets", disk_full)
    assert snapshot.save_while_running() is None
    monkeypatch.undo()
    ddb.put_item(TableName=table, Item={"pk": {"S": "kb"}, "sk": {"N": "2"}})
    again = snapshot.save()
    assert not again.full and again.tables == {table: 2}  # the failed batch's key and the new one
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        keys = sorted(k for (k,) in db.execute("SELECT k FROM items WHERE tbl = ?", (table,)))
    assert keys == ['{"pk":{"S":"kb"},"sk":{"N":"1"}}', '{"pk":{"S":"kb"},"sk":{"N":"2"}}']
    ddb.delete_table(TableName=table)
