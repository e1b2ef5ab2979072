"""Issue 27: the local stack's snapshot writes only what changed since the last one, and restoring it gives
the same state (items of every attribute type, objects, dead letters) in a fresh moto server."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests

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

    monkeypatch.setattr(MotoSnapshot, "_save_queues", disk_full)
    assert snapshot.save_while_running() is None
    monkeypatch.undo()
    ddb.put_item(TableName=table, Item={"pk": {"S": "kb"}, "sk": {"N": "2"}})
    again = snapshot.save()
    assert not again.full and again.tables == {table: 2}  # the failed batch's key and the new one
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        keys = sorted(k for (k,) in db.execute("SELECT k FROM items WHERE tbl = ?", (table,)))
    assert keys == ['{"pk":{"S":"kb"},"sk":{"N":"1"}}', '{"pk":{"S":"kb"},"sk":{"N":"2"}}']
    ddb.delete_table(TableName=table)


@pytest.mark.parametrize("failure", ["reply_lost", "database_unopenable"])
def test_a_batch_whose_save_never_started_is_handed_over_again(
    moto_server: MotoServer,
    names: tuple[str, str, str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    failure: str,
) -> None:
    """The server hands its batch over, then the reply is lost or the database cannot be opened: the next
    save must say the batch was not saved, or its keys (a put, a delete) never reach the snapshot."""
    from chalicelib.local import snapshot as snapshot_module

    table, bucket, dlq = names
    _provision(moto_server.url, table, bucket, dlq)
    ddb, _, _ = _clients(moto_server.url)
    ddb.put_item(TableName=table, Item={"pk": {"S": "doomed"}, "sk": {"N": "0"}})
    snapshot = MotoSnapshot(tmp_path, moto_server.url)
    snapshot.save()
    ddb.put_item(TableName=table, Item={"pk": {"S": "new-a"}, "sk": {"N": "1"}})
    ddb.delete_item(TableName=table, Key={"pk": {"S": "doomed"}, "sk": {"N": "0"}})
    if failure == "reply_lost":
        real_post = requests.post

        def lost(url: str, *args: Any, **kwargs: Any) -> Any:
            real_post(url, *args, **kwargs)  # the server handed its batch out ...
            raise requests.ReadTimeout("read timed out")  # ... and the answer never came

        monkeypatch.setattr(snapshot_module.requests, "post", lost)
    else:

        def unopenable(*_: Any, **__: Any) -> Any:
            raise sqlite3.OperationalError("unable to open database file")

        monkeypatch.setattr(snapshot_module.sqlite3, "connect", unopenable)
    assert snapshot.save_while_running() is None
    monkeypatch.undo()
    ddb.put_item(TableName=table, Item={"pk": {"S": "new-b"}, "sk": {"N": "2"}})
    snapshot.save()
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        keys = sorted(k for (k,) in db.execute("SELECT k FROM items WHERE tbl = ?", (table,)))
    assert keys == ['{"pk":{"S":"new-a"},"sk":{"N":"1"}}', '{"pk":{"S":"new-b"},"sk":{"N":"2"}}']
    ddb.delete_table(TableName=table)


def test_a_failed_save_leaves_every_blob_its_snapshot_names(
    moto_server: MotoServer, names: tuple[str, str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, bucket, dlq = names
    _provision(moto_server.url, table, bucket, dlq)
    _, s3, _ = _clients(moto_server.url)
    s3.put_object(Bucket=bucket, Key="a.pdf", Body=b"first version")
    snapshot = MotoSnapshot(tmp_path, moto_server.url)
    snapshot.save()
    s3.put_object(Bucket=bucket, Key="a.pdf", Body=b"second version")  # the first one's blob is dropped

    def fails(*_: Any) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(MotoSnapshot, "_save_queues", fails)
    assert snapshot.save_while_running() is None  # rolled back: the snapshot still names the first blob
    monkeypatch.undo()
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        (blob,) = db.execute("SELECT blob FROM objects WHERE bucket = ?", (bucket,)).fetchone()
    assert (tmp_path / "blobs" / blob).is_file()
    snapshot.save()  # committed now: the first version's blob goes, the second's stays
    blobs = {path.name for path in (tmp_path / "blobs").iterdir()}
    assert blob not in blobs and hashlib.sha256(b"second version").hexdigest() in blobs
    s3.delete_object(Bucket=bucket, Key="a.pdf")
    s3.delete_bucket(Bucket=bucket)


def test_a_database_whose_first_save_never_committed_is_not_a_snapshot(tmp_path: Path) -> None:
    """Moving from state.json: the database is created, its first (full) save is killed. The next start
    must restore state.json again, not an empty database."""
    from chalicelib.local.snapshot import _SCHEMA, snapshot_exists

    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        db.executescript(_SCHEMA)
    assert not snapshot_exists(tmp_path)  # a brand-new stack's leftover: no snapshot
    (tmp_path / "state.json").write_text('{"format": 1, "tables": {}, "buckets": {}, "dead_letters": {}}')
    assert snapshot_exists(tmp_path)
    with pytest.raises(ValueError, match=r"state\.json"):  # it reads state.json, not the empty database
        (tmp_path / "state.json").write_text('{"format": 0}')
        MotoSnapshot(tmp_path, "http://127.0.0.1:9").restore()


def test_letters_an_operator_holds_during_a_save_stay_in_the_snapshot(
    moto_server: MotoServer, names: tuple[str, str, str], tmp_path: Path
) -> None:
    table, bucket, dlq = names
    _provision(moto_server.url, table, bucket, dlq)
    _, _, sqs = _clients(moto_server.url)
    url = sqs.get_queue_url(QueueName=dlq)["QueueUrl"]
    for n in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"failed {n}")
    snapshot = MotoSnapshot(tmp_path, moto_server.url)
    snapshot.save()
    held = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=60)["Messages"]
    assert len(held) == 2  # `dlq list` holds them out of sight while the next save reads the queue
    snapshot.save()
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        rows = db.execute("SELECT message FROM messages WHERE queue = ?", (dlq,)).fetchall()
        bodies = sorted(json.loads(m)["body"] for (m,) in rows)
    assert bodies == ["failed 0", "failed 1", "failed 2"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=held[0]["ReceiptHandle"])  # redriven: gone for good
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=held[1]["ReceiptHandle"], VisibilityTimeout=0)
    snapshot.save()
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        (count,) = db.execute("SELECT count(*) FROM messages WHERE queue = ?", (dlq,)).fetchone()
    assert count == 2
    ddb, _, _ = _clients(moto_server.url)
    ddb.delete_table(TableName=table)


def test_the_change_log_keeps_nothing_until_a_snapshot_asks() -> None:
    from moto.dynamodb.models import dynamodb_backends

    from chalicelib.local.moto_changes import ChangeLog

    class Table:
        name = "t"

    log = ChangeLog()
    for n in range(1000):
        log.touched(Table(), (n, None))  # type: ignore[arg-type]
    backend = dynamodb_backends["123456789012"]["us-east-1"]
    assert log.take(backend, previous_saved=True) == {"tables": {}}  # the first save reads every table
    log.touched(Table(), ("k", None))  # type: ignore[arg-type]
    assert log._keys._dirty == {"t": {("k", None)}}
