"""What the local stack's snapshot keeps across a restart besides tables and objects (found by an audit):
every queue's messages (an FAQ import's or a lifecycle task's next step was lost, its task `running` for
good), read without receiving them (a save had counted a receive on every dead letter); DynamoDB's TTL
(moto never expires an item, so caches and finished tasks were kept and snapshotted for ever); and a save
that reads only the S3 keys written since the last one (it listed every object every interval)."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any

import boto3
import pytest

from chalicelib.local.moto_server import MotoServer
from chalicelib.local.snapshot import MotoSnapshot


def _clients(url: str) -> tuple[Any, Any, Any]:
    kw: dict[str, Any] = {"region_name": "us-east-1", "endpoint_url": url}
    return boto3.client("dynamodb", **kw), boto3.client("s3", **kw), boto3.client("sqs", **kw)


def _queues(url: str, prefix: str) -> dict[str, str]:
    _, _, sqs = _clients(url)
    return {
        name: sqs.create_queue(QueueName=f"{prefix}-{name}")["QueueUrl"]
        for name in ("faq-import", "lifecycle", "lifecycle-dlq")
    }


def _receive_all(sqs: Any, url: str) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    while batch := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=60, AttributeNames=["All"],
        MessageAttributeNames=["All"],
    ).get("Messages", []):  # fmt: skip
        got.extend(batch)
    return got


def test_queued_task_messages_survive_a_save_and_restore_exactly_once(
    moto_server: MotoServer, tmp_path: Path
) -> None:
    prefix = f"q{uuid.uuid4().hex[:8]}"
    urls = _queues(moto_server.url, prefix)
    _, _, sqs = _clients(moto_server.url)
    kind = {"kind": {"DataType": "String", "StringValue": "faq"}}
    sqs.send_message(QueueUrl=urls["faq-import"], MessageBody="import-done")
    (done,) = sqs.receive_message(QueueUrl=urls["faq-import"], VisibilityTimeout=60)["Messages"]
    sqs.delete_message(QueueUrl=urls["faq-import"], ReceiptHandle=done["ReceiptHandle"])  # delivered: gone
    sqs.send_message(QueueUrl=urls["faq-import"], MessageBody="import-1", MessageAttributes=kind)
    sqs.send_message(QueueUrl=urls["faq-import"], MessageBody="import-2")
    # one in flight when the stack stops: its poller dies with it, it comes back when its timeout ends
    (taken,) = sqs.receive_message(QueueUrl=urls["faq-import"], VisibilityTimeout=2)["Messages"]
    sqs.send_message(QueueUrl=urls["lifecycle"], MessageBody="clone-step-2")
    sent = {
        m["Body"]: m["Attributes"]["SentTimestamp"]
        for m in sqs.receive_message(
            QueueUrl=urls["lifecycle"], VisibilityTimeout=0, AttributeNames=["SentTimestamp"]
        )["Messages"]
    }

    snapshot = MotoSnapshot(tmp_path, moto_server.url)
    first = snapshot.save()
    again = snapshot.save()

    fresh = MotoServer(separate_process=True).start(point_sdk=False)
    try:
        fresh_urls = _queues(fresh.url, prefix)
        restored = MotoSnapshot(tmp_path, fresh.url).restore()
        _, _, fresh_sqs = _clients(fresh.url)
        time.sleep(2.2)  # the in-flight message's visibility timeout ends
        imports = _receive_all(fresh_sqs, fresh_urls["faq-import"])
        assert sorted(m["Body"] for m in imports) == ["import-1", "import-2"]  # exactly once each
        by_body = {m["Body"]: m for m in imports}
        assert by_body["import-1"]["MessageAttributes"] == kind
        assert by_body[taken["Body"]]["MessageId"] == taken["MessageId"]
        assert by_body[taken["Body"]]["Attributes"]["ApproximateReceiveCount"] == "2"  # 1 before, this one
        (clone,) = _receive_all(fresh_sqs, fresh_urls["lifecycle"])
        assert clone["Body"] == "clone-step-2"
        assert clone["Attributes"]["SentTimestamp"] == sent["clone-step-2"]  # its original age
        assert restored.messages >= 3
    finally:
        fresh.stop()
    assert first.full and first.messages >= 3
    assert not again.full and again.messages == 0  # no queue changed: none written again
    for url in urls.values():
        sqs.delete_queue(QueueUrl=url)


def test_a_save_does_not_count_a_receive_on_a_dead_letter(moto_server: MotoServer, tmp_path: Path) -> None:
    prefix = f"q{uuid.uuid4().hex[:8]}"
    urls = _queues(moto_server.url, prefix)
    _, _, sqs = _clients(moto_server.url)
    sqs.send_message(QueueUrl=urls["lifecycle-dlq"], MessageBody="it failed")
    snapshot = MotoSnapshot(tmp_path, moto_server.url)
    for _ in range(3):
        snapshot.save()
    (letter,) = sqs.receive_message(QueueUrl=urls["lifecycle-dlq"], AttributeNames=["All"])["Messages"]
    assert letter["Attributes"]["ApproximateReceiveCount"] == "1"
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        (saved,) = db.execute(
            "SELECT message FROM messages WHERE queue = ?", (f"{prefix}-lifecycle-dlq",)
        ).fetchone()
    assert json.loads(saved)["receive_count"] == 0
    for url in urls.values():
        sqs.delete_queue(QueueUrl=url)


def _ttl_table(ddb: Any) -> str:
    name = f"ttl-{uuid.uuid4().hex[:8]}"
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.update_time_to_live(
        TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires_at"}
    )
    return name


def _saved_keys(directory: Path, table: str) -> set[str]:
    with sqlite3.connect(directory / "state.sqlite") as db:
        return {
            json.loads(k)["pk"]["S"] for (k,) in db.execute("SELECT k FROM items WHERE tbl = ?", (table,))
        }


def test_an_expired_item_is_gone_after_a_sweep_and_from_the_snapshot(
    moto_server: MotoServer, tmp_path: Path
) -> None:
    ddb, _, _ = _clients(moto_server.url)
    table = _ttl_table(ddb)
    now = int(time.time())
    for pk, expires in (("expired", now - 3600), ("live", now + 3600), ("ancient", now - 6 * 365 * 86400)):
        ddb.put_item(TableName=table, Item={"pk": {"S": pk}, "expires_at": {"N": str(expires)}})
    ddb.put_item(TableName=table, Item={"pk": {"S": "no-ttl"}})
    snapshot = MotoSnapshot(tmp_path, moto_server.url)
    snapshot.save()
    assert _saved_keys(tmp_path, table) == {"expired", "live", "ancient", "no-ttl"}

    assert moto_server.sweep_expired() >= 1
    left = {i["pk"]["S"] for i in ddb.scan(TableName=table, ConsistentRead=True)["Items"]}
    assert left == {"live", "ancient", "no-ttl"}  # DynamoDB ignores a TTL over five years old
    after = snapshot.save()
    assert not after.full and after.tables == {table: 1}  # the sweep's delete reached the change log
    assert _saved_keys(tmp_path, table) == {"live", "ancient", "no-ttl"}
    ddb.delete_table(TableName=table)


def test_a_sweep_examines_a_bounded_number_of_items_and_resumes(
    moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chalicelib.local import moto_ttl

    ddb, _, _ = _clients(moto_server.url)
    table = _ttl_table(ddb)
    past = str(int(time.time()) - 60)
    for n in range(5):
        ddb.put_item(TableName=table, Item={"pk": {"S": f"k{n}"}, "expires_at": {"N": past}})
    monkeypatch.setattr(moto_ttl, "EXAMINED_PER_TABLE", 2)
    monkeypatch.setattr(moto_ttl, "sweeper", moto_ttl.TtlSweeper())  # no other table's place kept
    counts = []
    while len(counts) < 6 and ddb.scan(TableName=table)["Items"]:
        moto_server.sweep_expired()
        counts.append(len(ddb.scan(TableName=table)["Items"]))
    assert counts[:3] == [3, 1, 0]
    ddb.delete_table(TableName=table)


def test_a_run_the_deletion_cap_cut_short_is_followed_by_one_deleting_the_rest_first(
    moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three runs' worth of items examined at once, two deletes a run: the items the cap left are the next
    run's first (they had waited for the walk to come round again)."""
    from chalicelib.local import moto_ttl

    ddb, _, _ = _clients(moto_server.url)
    table = _ttl_table(ddb)
    past, future = str(int(time.time()) - 60), str(int(time.time()) + 3600)
    for n in range(6):  # k0..k4 expired, k5 live: one examined window of 6
        expires = future if n == 5 else past
        ddb.put_item(TableName=table, Item={"pk": {"S": f"k{n}"}, "expires_at": {"N": expires}})
    monkeypatch.setattr(moto_ttl, "EXAMINED_PER_TABLE", 6)
    monkeypatch.setattr(moto_ttl, "DELETED_PER_RUN", 2)
    monkeypatch.setattr(moto_ttl, "sweeper", moto_ttl.TtlSweeper())  # no other table's place kept

    def left() -> list[str]:
        return sorted(i["pk"]["S"] for i in ddb.scan(TableName=table, ConsistentRead=True)["Items"])

    counts = []
    while len(counts) < 3 and moto_server.sweep_expired():
        counts.append(len(left()))
    assert counts == [4, 2, 1]  # two, two, then the last expired one: no run wasted on the wrap-around
    assert left() == ["k5"]
    ddb.delete_table(TableName=table)


def test_a_sweep_that_fails_does_not_stop_the_next(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The server's sweeper thread: an error in one sweep is logged with its traceback and the next runs."""
    import threading
    from types import SimpleNamespace

    from chalicelib.local import moto_server, moto_ttl

    stopped = threading.Event()
    calls: list[str] = []

    def sweep_expired(region: str) -> int:
        calls.append(region)
        if len(calls) == 1:
            raise RuntimeError("a table went away mid-sweep")
        stopped.set()
        return 3

    monkeypatch.setattr(moto_ttl, "SWEEP_SECONDS", 0.01)
    server = SimpleNamespace(app=SimpleNamespace(sweep_expired=sweep_expired))
    with caplog.at_level("INFO", logger=moto_server.__name__):
        moto_server._sweep_until(server, "us-east-1", stopped)  # type: ignore[arg-type]
    assert calls == ["us-east-1", "us-east-1"]
    failed = [r for r in caplog.records if r.exc_info]
    assert len(failed) == 1 and "a table went away mid-sweep" in caplog.text
    assert "deleted 3 DynamoDB item(s)" in caplog.text


def test_an_incremental_save_reads_only_the_objects_written_since_the_last(
    moto_server: MotoServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, s3, _ = _clients(moto_server.url)
    bucket = f"objs-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    for n in range(60):
        s3.put_object(Bucket=bucket, Key=f"k/{n:03d}", Body=b"x")
    snapshot = MotoSnapshot(tmp_path, moto_server.url)
    assert snapshot.save().full

    calls: list[str] = []
    make_client = MotoSnapshot._client

    def counting_client(self: MotoSnapshot, service: str) -> Any:
        client = make_client(self, service)
        client.meta.events.register("before-call.s3", lambda model, **_: calls.append(model.name))
        return client

    monkeypatch.setattr(MotoSnapshot, "_client", counting_client)
    unchanged = snapshot.save()
    assert not unchanged.full and unchanged.objects == 0
    assert [c for c in calls if c != "ListBuckets"] == []  # no listing, no read of the 60 objects

    s3.put_object(Bucket=bucket, Key="k/new", Body=b"new")
    s3.copy_object(Bucket=bucket, Key="k/copy", CopySource={"Bucket": bucket, "Key": "k/000"})
    s3.delete_object(Bucket=bucket, Key="k/001")
    calls.clear()
    changed = snapshot.save()
    assert sorted(c for c in calls if c != "ListBuckets") == ["GetObject"] * 3  # two read, one gone
    with sqlite3.connect(tmp_path / "state.sqlite") as db:
        keys = {k for (k,) in db.execute("SELECT key FROM objects WHERE bucket = ?", (bucket,))}
    assert changed.objects == 3 and len(keys) == 61 and {"k/new", "k/copy"} <= keys and "k/001" not in keys
    monkeypatch.undo()
    for key in keys:
        s3.delete_object(Bucket=bucket, Key=key)
    s3.delete_bucket(Bucket=bucket)
