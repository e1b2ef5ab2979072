"""Local state that survives a restart of `weknora-ingest up` (`make run`).

moto keeps tables, buckets and queues in memory only. This module saves what the stack owns there into the
state directory and puts it back into a fresh moto server on the next start:

- every DynamoDB table's items (read first: the knowledge table, so a row never claims chunks or index
  entries the snapshot lacks; the embedded index and local files live on disk in the state dir anyway);
- every S3 object (content-addressed blobs, so a periodic snapshot writes only new objects), restored with
  the bucket's notifications paused, so a restored upload is not announced to the uploads queue again;
- the messages waiting in the dead-letter queues (the operator's record of what failed).

Queued stage messages and running Step Functions executions are not saved: on start, housekeeping
(`recovery.recover_after_restart`) starts every row that was in flight over at a new attempt.

Why not moto's recorder: it logs every request (the pollers' long polls included) and replays them, so
receipts, task tokens and executions would be re-run against a different server, and the log only grows.

`state.json` is written to a temporary file and renamed, so a crash mid-save keeps the previous snapshot.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import BotoCoreError, ClientError

log = logging.getLogger(__name__)

FORMAT = 1
#: tables read first (see the module docstring), by name suffix
READ_FIRST = ("-knowledge",)
#: a DLQ message is held out of sight this long while the snapshot reads the queue
DLQ_HOLD_SECONDS = 30


def _encode(value: Any) -> Any:
    """DynamoDB's typed JSON with bytes (B, BS) as {"__b64__": ...}."""
    if isinstance(value, bytes | bytearray):
        return {"__b64__": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, dict):
        return {k: _encode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__b64__"}:
            return base64.b64decode(value["__b64__"])
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


@dataclass
class SnapshotCounts:
    items: int = 0
    objects: int = 0
    dead_letters: int = 0
    tables: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.items} item(s), {self.objects} object(s), {self.dead_letters} dead letter(s)"


class MotoSnapshot:
    def __init__(
        self, directory: str | os.PathLike[str], endpoint_url: str, region: str = "us-east-1"
    ) -> None:
        self.dir = Path(directory)
        self.endpoint_url = endpoint_url
        self.region = region

    @property
    def state_file(self) -> Path:
        return self.dir / "state.json"

    @property
    def blobs(self) -> Path:
        return self.dir / "blobs"

    def exists(self) -> bool:
        return self.state_file.is_file()

    def _client(self, service: str) -> Any:
        make: Any = boto3.client  # the stubs only accept literal service names
        return make(service, region_name=self.region, endpoint_url=self.endpoint_url)

    # ---- save --------------------------------------------------------------------------------------------

    def save_while_running(self) -> SnapshotCounts | None:
        """A periodic save: one that fails (the server busy or gone, the disk full) is reported and the
        stack goes on; the next interval tries again, and the last good snapshot stays in place."""
        try:
            return self.save()
        except (BotoCoreError, ClientError, OSError) as error:
            log.warning(
                "the periodic snapshot failed (%s: %s); retrying at the next interval",
                type(error).__name__,
                error,
            )
            return None

    def save(self) -> SnapshotCounts:
        counts = SnapshotCounts()
        state = {
            "format": FORMAT,
            "tables": self._save_tables(counts),
            "buckets": self._save_buckets(counts),
            "dead_letters": self._save_dead_letters(counts),
        }
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state), encoding="utf-8")
        os.replace(tmp, self.state_file)
        self._prune_blobs(state)
        return counts

    def _save_tables(self, counts: SnapshotCounts) -> dict[str, list[Any]]:
        ddb = self._client("dynamodb")
        names = [n for page in ddb.get_paginator("list_tables").paginate() for n in page["TableNames"]]
        names.sort(key=lambda n: (not n.endswith(READ_FIRST), n))
        tables: dict[str, list[Any]] = {}
        for name in names:
            try:
                items = [
                    _encode(item)
                    for page in ddb.get_paginator("scan").paginate(TableName=name, ConsistentRead=True)
                    for item in page["Items"]
                ]
            except ddb.exceptions.ResourceNotFoundException:
                continue  # deleted between the listing and the scan
            tables[name] = items
            counts.items += len(items)
            counts.tables[name] = len(items)
        return tables

    def _save_buckets(self, counts: SnapshotCounts) -> dict[str, list[dict[str, Any]]]:
        s3 = self._client("s3")
        self.blobs.mkdir(parents=True, exist_ok=True)
        previous = self._previous_objects()
        buckets: dict[str, list[dict[str, Any]]] = {}
        for bucket in s3.list_buckets().get("Buckets", []):
            name = bucket["Name"]
            objects = []
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
                for entry in page.get("Contents", []):
                    known = previous.get((name, entry["Key"], entry.get("ETag", "")))
                    if known is not None and (self.blobs / known["blob"]).is_file():
                        objects.append(known)  # unchanged since the last snapshot: not read again
                        continue
                    try:
                        got = s3.get_object(Bucket=name, Key=entry["Key"])
                    except s3.exceptions.NoSuchKey:
                        continue  # deleted between the listing and the read: not part of the state any more
                    data = got["Body"].read()
                    digest = hashlib.sha256(data).hexdigest()
                    blob = self.blobs / digest
                    if not blob.exists():
                        tmp = blob.with_suffix(".tmp")
                        tmp.write_bytes(data)
                        os.replace(tmp, blob)
                    objects.append(
                        {
                            "key": entry["Key"],
                            "etag": entry.get("ETag", ""),
                            "blob": digest,
                            "content_type": got.get("ContentType", "binary/octet-stream"),
                            "metadata": got.get("Metadata", {}),
                        }
                    )
            buckets[name] = objects
            counts.objects += len(objects)
        return buckets

    def _previous_objects(self) -> dict[tuple[str, str, str], dict[str, Any]]:
        if not self.exists():
            return {}
        try:
            state = json.loads(self.state_file.read_text(encoding="utf-8"))
        except ValueError:
            return {}
        return {
            (bucket, o["key"], o.get("etag", "")): o
            for bucket, objects in state.get("buckets", {}).items()
            for o in objects
        }

    def _save_dead_letters(self, counts: SnapshotCounts) -> dict[str, list[dict[str, Any]]]:
        sqs = self._client("sqs")
        saved: dict[str, list[dict[str, Any]]] = {}
        for url in sqs.list_queues().get("QueueUrls", []):
            name = url.rsplit("/", 1)[-1]
            if not name.endswith("-dlq"):
                continue
            messages: list[dict[str, Any]] = []
            handles: list[str] = []
            while True:
                reply = sqs.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=10,
                    VisibilityTimeout=DLQ_HOLD_SECONDS,
                    WaitTimeSeconds=0,
                    MessageAttributeNames=["All"],
                )
                batch = reply.get("Messages", [])
                if not batch:
                    break
                for m in batch:
                    handles.append(m["ReceiptHandle"])
                    messages.append({"body": m["Body"], "attributes": m.get("MessageAttributes", {})})
            for handle in handles:  # back in sight at once: a snapshot changes nothing
                with contextlib.suppress(sqs.exceptions.ReceiptHandleIsInvalid):  # redriven meanwhile
                    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handle, VisibilityTimeout=0)
            if messages:
                saved[name] = messages
                counts.dead_letters += len(messages)
        return saved

    def _prune_blobs(self, state: dict[str, Any]) -> None:
        wanted = {o["blob"] for objects in state["buckets"].values() for o in objects}
        for blob in self.blobs.iterdir():
            if blob.name not in wanted:
                blob.unlink(missing_ok=True)

    # ---- restore -----------------------------------------------------------------------------------------

    def restore(self) -> SnapshotCounts:
        """Puts the snapshot into the (freshly provisioned, empty) server. Tables, buckets and queues must
        exist already: the template creates them; ones the template no longer has are skipped."""
        state = json.loads(self.state_file.read_text(encoding="utf-8"))
        if state.get("format") != FORMAT:
            raise ValueError(f"{self.state_file} has snapshot format {state.get('format')}, not {FORMAT}")
        counts = SnapshotCounts()
        self._restore_tables(state["tables"], counts)
        self._restore_buckets(state["buckets"], counts)
        self._restore_dead_letters(state["dead_letters"], counts)
        return counts

    def _restore_tables(self, tables: dict[str, list[Any]], counts: SnapshotCounts) -> None:
        ddb = self._client("dynamodb")
        existing = {n for page in ddb.get_paginator("list_tables").paginate() for n in page["TableNames"]}
        for name, items in tables.items():
            if name not in existing:
                log.warning("snapshot table %s is not in the template any more; skipped", name)
                continue
            for start in range(0, len(items), 25):
                requests = [{"PutRequest": {"Item": _decode(i)}} for i in items[start : start + 25]]
                pending: dict[str, Any] = {name: requests}
                while pending:
                    pending = ddb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
            counts.items += len(items)
            counts.tables[name] = len(items)

    def _restore_buckets(self, buckets: dict[str, list[dict[str, Any]]], counts: SnapshotCounts) -> None:
        s3 = self._client("s3")
        existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
        for name, objects in buckets.items():
            if name not in existing:
                log.warning("snapshot bucket %s is not in the template any more; skipped", name)
                continue
            notifications = s3.get_bucket_notification_configuration(Bucket=name)
            notifications.pop("ResponseMetadata", None)
            s3.put_bucket_notification_configuration(Bucket=name, NotificationConfiguration={})
            try:
                for o in objects:
                    s3.put_object(
                        Bucket=name,
                        Key=o["key"],
                        Body=(self.blobs / o["blob"]).read_bytes(),
                        ContentType=o["content_type"],
                        Metadata=o["metadata"],
                    )
                    counts.objects += 1
            finally:
                s3.put_bucket_notification_configuration(Bucket=name, NotificationConfiguration=notifications)

    def _restore_dead_letters(self, saved: dict[str, list[dict[str, Any]]], counts: SnapshotCounts) -> None:
        sqs = self._client("sqs")
        for name, messages in saved.items():
            try:
                url = sqs.get_queue_url(QueueName=name)["QueueUrl"]
            except sqs.exceptions.QueueDoesNotExist:
                log.warning("snapshot queue %s is not in the template any more; skipped", name)
                continue
            for m in messages:
                kwargs: dict[str, Any] = {"QueueUrl": url, "MessageBody": m["body"]}
                if m["attributes"]:
                    kwargs["MessageAttributes"] = m["attributes"]
                sqs.send_message(**kwargs)
                counts.dead_letters += 1
