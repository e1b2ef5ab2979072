"""Local state that survives a restart of `weknora-ingest up` (`make run`).

moto keeps tables, buckets and queues in memory only. This module saves what the stack owns there into the
state directory and puts it back into a fresh moto server on the next start:

- every DynamoDB table's items;
- every S3 object (content-addressed blobs, written once), restored with the bucket's notifications paused,
  so a restored upload is not announced to the uploads queue again;
- every SQS queue's messages, visible, delayed and in flight (an FAQ import's or a lifecycle task's next
  step, a wiki or webhook job, a dead letter), read inside the moto server without receiving them
  (`moto_queues`) and put back with their ids, attributes, timestamps, receive counts and timers. What a
  queue holds at a save is what is put back: a message deleted before it is not, one processed between the
  save and a crash runs again (at least once, as on AWS). Queues whose messages did not change since the
  last save are not written again.

Running Step Functions executions are not saved: on start, housekeeping (`recovery.recover_after_restart`)
starts every document that was in flight over at a new attempt (its restored stage messages belong to the
old attempt and are dropped as stale).

**Incremental** (issue 27): the snapshot is a SQLite database (`state.sqlite`, one row per item, object
and dead letter). Each periodic save writes only the items written since the last one: the moto server
keeps a change log of the keys written (`moto_changes`) and hands over those items, one consistent cut
across all tables, and the S3 keys put or deleted, so a save's cost follows what changed in the interval,
not everything ever stored (no bucket is listed), and a crash (kill -9) loses at most one interval
whatever the size. Each save is one SQLite transaction: a
crash mid-save keeps the previous snapshot. The first save of a process, and every save on a moto the
change log is not patched into, reads every table and lists every bucket instead (a full save). On a moto
without the patches, queues are not readable in place: only the dead-letter queues are saved, by
receiving their letters (which counts a receive on each).

Why not moto's recorder: it logs every request (the pollers' long polls included) and replays them, so
receipts, task tokens and executions would be re-run against a different server, and the log only grows.

A `state.json` from before (format 1, the whole state in one file) is still restored; the first save after
it writes the database and removes the file.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import logging
import os
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import requests
from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.local.moto_changes import CHANGES_PATH
from chalicelib.local.moto_queues import QUEUES_PATH
from chalicelib.local.snapshot_unpatched import dead_letters_by_receiving, send_messages

log = logging.getLogger(__name__)

FORMAT = 2
#: tables read first in a full save (see `_full_tables`), by name suffix
READ_FIRST = ("-knowledge",)

#: items are a kilobyte or two (chunks, cached vectors): a rowid table keeps them out of the key's B-tree
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (tbl TEXT NOT NULL, k TEXT NOT NULL, item TEXT NOT NULL,
    PRIMARY KEY (tbl, k));
CREATE TABLE IF NOT EXISTS objects (bucket TEXT NOT NULL, key TEXT NOT NULL, etag TEXT NOT NULL,
    blob TEXT NOT NULL, content_type TEXT NOT NULL, metadata TEXT NOT NULL,
    PRIMARY KEY (bucket, key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dead_letters (queue TEXT NOT NULL, body TEXT NOT NULL, attributes TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS messages (queue TEXT NOT NULL, seq INTEGER NOT NULL, message TEXT NOT NULL,
    PRIMARY KEY (queue, seq));
CREATE TABLE IF NOT EXISTS queues (queue TEXT PRIMARY KEY, digest TEXT NOT NULL);
"""
# dead_letters: the DLQs' letters as saves before `messages` kept them (still restored; a save empties it)


def snapshot_exists(directory: str | os.PathLike[str]) -> bool:
    """A saved state (this format or the one before) is in `directory`."""
    path = Path(directory)
    return _database_committed(path / "state.sqlite") or (path / "state.json").is_file()


def _database_committed(database: Path) -> bool:
    """The database holds a save that committed: its format row is written in each save's transaction, so a
    file whose first save failed or was killed (only its empty schema) is not a snapshot."""
    if not database.is_file():
        return False
    connection = sqlite3.connect(f"{database.as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        return connection.execute("SELECT 1 FROM meta WHERE name = 'format'").fetchone() is not None
    except sqlite3.OperationalError:  # no meta table: created, never saved into
        return False
    finally:
        connection.close()


# ---------------------------------------------------------------- DynamoDB JSON <-> boto3's values


def _to_wire(value: dict[str, Any]) -> dict[str, Any]:
    """A boto3 AttributeValue (bytes for B/BS) in DynamoDB's JSON (base64 strings)."""
    (kind, inner), = value.items()  # fmt: skip
    if kind == "B":
        return {"B": base64.b64encode(bytes(inner)).decode("ascii")}
    if kind == "BS":
        return {"BS": [base64.b64encode(bytes(b)).decode("ascii") for b in inner]}
    if kind == "M":
        return {"M": {k: _to_wire(v) for k, v in inner.items()}}
    if kind == "L":
        return {"L": [_to_wire(v) for v in inner]}
    return {kind: inner}


def _from_wire(value: dict[str, Any]) -> dict[str, Any]:
    (kind, inner), = value.items()  # fmt: skip
    if kind == "B":
        return {"B": base64.b64decode(inner)}
    if kind == "BS":
        return {"BS": [base64.b64decode(b) for b in inner]}
    if kind == "M":
        return {"M": {k: _from_wire(v) for k, v in inner.items()}}
    if kind == "L":
        return {"L": [_from_wire(v) for v in inner]}
    return {kind: inner}


def _legacy_decode(value: Any) -> Any:
    """Format 1 kept bytes as {"__b64__": ...} inside boto3's values."""
    if isinstance(value, dict):
        if set(value) == {"__b64__"}:
            return base64.b64decode(value["__b64__"])
        return {k: _legacy_decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_legacy_decode(v) for v in value]
    return value


def _row_key(key: dict[str, Any]) -> str:
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


@dataclass
class SnapshotCounts:
    items: int = 0
    objects: int = 0
    #: queued messages of every queue (the dead letters among them); in a save, of the queues written
    messages: int = 0
    dead_letters: int = 0
    tables: dict[str, int] = field(default_factory=dict)
    full: bool = False

    def line(self) -> str:
        return (
            f"{self.items} item(s), {self.objects} object(s), {self.messages} queued message(s) "
            f"({self.dead_letters} dead letter(s))"
        )


class MotoSnapshot:
    def __init__(
        self, directory: str | os.PathLike[str], endpoint_url: str, region: str = "us-east-1"
    ) -> None:
        self.dir = Path(directory)
        self.endpoint_url = endpoint_url
        self.region = region
        #: the database holds exactly what the server held at the last save (or restore)
        self._in_step = False
        #: the server's last batch of changes was written (else it owes the same keys again)
        self._last_batch_saved = True

    @property
    def database(self) -> Path:
        return self.dir / "state.sqlite"

    @property
    def state_file(self) -> Path:
        """Format 1's single file (restored if there is no database yet)."""
        return self.dir / "state.json"

    @property
    def blobs(self) -> Path:
        return self.dir / "blobs"

    def exists(self) -> bool:
        return snapshot_exists(self.dir)

    def _client(self, service: str) -> Any:
        make: Any = boto3.client  # the stubs only accept literal service names
        return make(service, region_name=self.region, endpoint_url=self.endpoint_url)

    @contextlib.contextmanager
    def _db(self) -> Iterator[sqlite3.Connection]:
        self.dir.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.database, timeout=30)
        try:
            connection.execute("PRAGMA journal_mode=WAL")  # a reader never waits; a kill -9 keeps commits
            connection.executescript(_SCHEMA)
            yield connection
        finally:
            connection.close()

    # ---- save --------------------------------------------------------------------------------------------

    def save_while_running(self) -> SnapshotCounts | None:
        """A periodic save: one that fails (the server busy or gone, the disk full) is reported and the
        stack goes on; the next interval tries again, and the last good snapshot stays in place."""
        try:
            return self.save()
        except (BotoCoreError, ClientError, OSError, sqlite3.Error, requests.RequestException) as error:
            log.warning(
                "the periodic snapshot failed (%s: %s); retrying at the next interval",
                type(error).__name__,
                error,
            )
            return None

    def save(self) -> SnapshotCounts:
        """Writes what changed since the last save (all of it on the first save of this snapshot object)."""
        counts = SnapshotCounts()
        previous_saved = self._last_batch_saved
        # the batch the server hands over now is owed again until this save commits (a reply lost on the
        # way, a database that cannot be opened, a failed write: each leaves it unsaved)
        self._last_batch_saved = False
        changes = self._take_changes(previous_saved)  # before any read: later writes are the next batch
        with self._db() as db:
            try:
                if changes is None or not self._in_step:
                    counts.full = True
                    self._full_tables(db, counts)
                    dropped = self._save_buckets(db, counts)
                else:
                    self._changed_tables(db, changes, counts)
                    dropped = self._changed_objects(db, changes, counts)
                self._save_queues(db, counts)
                db.execute("INSERT OR REPLACE INTO meta VALUES ('format', ?)", (str(FORMAT),))
                db.commit()
            except BaseException:
                db.rollback()
                raise
            if dropped:  # only blobs no committed row names: a failed save must leave its snapshot whole
                self._prune_blobs(db)
        self._last_batch_saved = True
        self._in_step = changes is not None
        self.state_file.unlink(missing_ok=True)  # format 1's file: the database has all of it now
        return counts

    def _take_changes(self, previous_saved: bool) -> dict[str, Any] | None:
        """The server's batch of changed items; None when the server keeps no change log (another moto)."""
        saved = "1" if previous_saved else "0"
        reply = requests.post(
            f"{self.endpoint_url}{CHANGES_PATH}?saved={saved}&region={self.region}", timeout=120
        )
        if reply.status_code != 200 or not reply.headers.get("Content-Type", "").startswith(
            "application/json"
        ):
            return None  # moto as it ships answers this path with an error page: a full save is right
        return dict(reply.json())

    def _changed_tables(
        self, db: sqlite3.Connection, changes: dict[str, Any], counts: SnapshotCounts
    ) -> None:
        names = self._table_names()
        self._drop_tables_not_in(db, names)
        for name, change in changes["tables"].items():
            if change["cleared"]:
                db.execute("DELETE FROM items WHERE tbl = ?", (name,))
            key_names = self._key_names(name) if change["put"] else []
            db.executemany(
                "INSERT OR REPLACE INTO items VALUES (?, ?, ?)",
                [
                    (name, _row_key({k: item[k] for k in key_names}), json.dumps(item, separators=(",", ":")))
                    for item in change["put"]
                ],
            )
            db.executemany(
                "DELETE FROM items WHERE tbl = ? AND k = ?",
                [(name, _row_key(key)) for key in change["delete"]],
            )
            counts.items += len(change["put"]) + len(change["delete"])
            counts.tables[name] = len(change["put"]) + len(change["delete"])

    def _table_names(self) -> list[str]:
        ddb = self._client("dynamodb")
        return [n for page in ddb.get_paginator("list_tables").paginate() for n in page["TableNames"]]

    def _key_names(self, table: str) -> list[str]:
        cached: dict[str, list[str]] = self.__dict__.setdefault("_key_names_of", {})
        if table not in cached:
            schema = self._client("dynamodb").describe_table(TableName=table)["Table"]["KeySchema"]
            cached[table] = [k["AttributeName"] for k in schema]
        return cached[table]

    @staticmethod
    def _drop_tables_not_in(db: sqlite3.Connection, names: list[str]) -> None:
        saved = {row[0] for row in db.execute("SELECT DISTINCT tbl FROM items")}
        for gone in saved - set(names):
            db.execute("DELETE FROM items WHERE tbl = ?", (gone,))

    def _full_tables(self, db: sqlite3.Connection, counts: SnapshotCounts) -> None:
        """Every table read through the API. The knowledge table first: a row never claims chunks or index
        entries the snapshot lacks (this path has no single cut across tables)."""
        ddb = self._client("dynamodb")
        names = sorted(self._table_names(), key=lambda n: (not n.endswith(READ_FIRST), n))
        self._drop_tables_not_in(db, names)
        for name in names:
            try:
                key_names = self._key_names(name)
                items = [
                    {k: _to_wire(v) for k, v in item.items()}
                    for page in ddb.get_paginator("scan").paginate(TableName=name, ConsistentRead=True)
                    for item in page["Items"]
                ]
            except ddb.exceptions.ResourceNotFoundException:
                continue  # deleted between the listing and the scan
            db.execute("DELETE FROM items WHERE tbl = ?", (name,))
            db.executemany(
                "INSERT OR REPLACE INTO items VALUES (?, ?, ?)",
                [
                    (name, _row_key({k: i[k] for k in key_names}), json.dumps(i, separators=(",", ":")))
                    for i in items
                ],
            )
            counts.items += len(items)
            counts.tables[name] = len(items)

    def _save_buckets(self, db: sqlite3.Connection, counts: SnapshotCounts) -> bool:
        """Objects are listed and read only when new or changed (by ETag). True when a row that named a
        blob was dropped or replaced (the caller prunes blobs once the save has committed)."""
        s3 = self._client("s3")
        self.blobs.mkdir(parents=True, exist_ok=True)
        names = self._bucket_names(db, s3)
        return any([self._save_bucket(db, s3, name, counts) for name in names])

    def _bucket_names(self, db: sqlite3.Connection, s3: Any) -> list[str]:
        """The server's buckets; the saved objects of buckets it no longer has are dropped."""
        names = [b["Name"] for b in s3.list_buckets().get("Buckets", [])]
        for gone in {r[0] for r in db.execute("SELECT DISTINCT bucket FROM objects")} - set(names):
            db.execute("DELETE FROM objects WHERE bucket = ?", (gone,))
        return names

    def _save_bucket(self, db: sqlite3.Connection, s3: Any, name: str, counts: SnapshotCounts) -> bool:
        known = {
            key: (etag, blob)
            for key, etag, blob in db.execute("SELECT key, etag, blob FROM objects WHERE bucket = ?", (name,))
        }
        listed: set[str] = set()
        dropped = False
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
            for entry in page.get("Contents", []):
                key, etag = entry["Key"], entry.get("ETag", "")
                listed.add(key)
                before = known.get(key)
                if before is not None and before[0] == etag and (self.blobs / before[1]).is_file():
                    continue  # unchanged since the last snapshot: not read again
                if not self._save_object(db, s3, name, key):
                    listed.discard(key)  # deleted between the listing and the read
                    continue
                dropped = dropped or before is not None
        gone = [(name, key) for key in known.keys() - listed]
        db.executemany("DELETE FROM objects WHERE bucket = ? AND key = ?", gone)
        counts.objects += len(listed)
        return dropped or bool(gone)

    def _changed_objects(
        self, db: sqlite3.Connection, changes: dict[str, Any], counts: SnapshotCounts
    ) -> bool:
        """Only the keys the server's change log names are read (a key gone now is dropped); a bucket
        emptied behind the API's back is listed whole. True when a row that named a blob went."""
        s3 = self._client("s3")
        self.blobs.mkdir(parents=True, exist_ok=True)
        names = set(self._bucket_names(db, s3))
        dropped = False
        for name in changes.get("buckets_listed", []):
            if name in names:
                dropped = self._save_bucket(db, s3, name, counts) or dropped
        for name, keys in changes.get("objects", {}).items():
            if name not in names or name in changes.get("buckets_listed", []):
                continue
            for key in keys:
                had = db.execute("SELECT 1 FROM objects WHERE bucket = ? AND key = ?", (name, key)).fetchone()
                if not self._save_object(db, s3, name, key):
                    db.execute("DELETE FROM objects WHERE bucket = ? AND key = ?", (name, key))
                dropped = dropped or had is not None
                counts.objects += 1
        return dropped

    def _save_object(self, db: sqlite3.Connection, s3: Any, bucket: str, key: str) -> bool:
        """Reads one object into its blob and row; False when it does not exist (any more)."""
        try:
            got = s3.get_object(Bucket=bucket, Key=key)
        except s3.exceptions.NoSuchKey:
            return False
        data = got["Body"].read()
        digest = hashlib.sha256(data).hexdigest()
        blob = self.blobs / digest
        if not blob.exists():
            tmp = blob.with_suffix(".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, blob)
        db.execute(
            "INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?, ?, ?)",
            (
                bucket,
                key,
                got.get("ETag", ""),
                digest,
                got.get("ContentType", "binary/octet-stream"),
                json.dumps(got.get("Metadata", {})),
            ),
        )
        return True

    def _prune_blobs(self, db: sqlite3.Connection) -> None:
        wanted = {row[0] for row in db.execute("SELECT DISTINCT blob FROM objects")}
        for blob in self.blobs.iterdir():
            if blob.name not in wanted:
                blob.unlink(missing_ok=True)

    def _save_queues(self, db: sqlite3.Connection, counts: SnapshotCounts) -> None:
        """Every queue's messages, read inside the server without receiving them (`moto_queues`); a queue
        whose digest matches the saved one is left as saved (a full save, `counts.full`, rewrites every queue)."""
        known = {} if counts.full else dict(db.execute("SELECT queue, digest FROM queues").fetchall())
        reply = requests.post(
            f"{self.endpoint_url}{QUEUES_PATH}?region={self.region}", json={"known": known}, timeout=120
        )
        db.execute("DELETE FROM dead_letters")  # an older save's letters: `messages` has them from now on
        if reply.status_code != 200 or not reply.headers.get("Content-Type", "").startswith(
            "application/json"
        ):
            for name, letters in dead_letters_by_receiving(self._client("sqs"), db).items():
                self._write_messages(db, name, letters, counts)  # moto as it ships
            db.execute("DELETE FROM queues")
            return
        queues: dict[str, Any] = reply.json()["queues"]
        for name, queue in queues.items():
            if queue["messages"] is None:
                continue  # unchanged since the save that wrote it
            self._write_messages(db, name, queue["messages"], counts)
            db.execute("INSERT OR REPLACE INTO queues VALUES (?, ?)", (name, queue["digest"]))
        saved = db.execute("SELECT queue FROM queues UNION SELECT DISTINCT queue FROM messages").fetchall()
        for (gone,) in saved:
            if gone not in queues:  # deleted from the server
                db.execute("DELETE FROM queues WHERE queue = ?", (gone,))
                db.execute("DELETE FROM messages WHERE queue = ?", (gone,))

    @staticmethod
    def _write_messages(
        db: sqlite3.Connection, queue: str, records: list[dict[str, Any]], counts: SnapshotCounts
    ) -> None:
        db.execute("DELETE FROM messages WHERE queue = ?", (queue,))
        db.executemany(
            "INSERT INTO messages VALUES (?, ?, ?)",
            [(queue, seq, json.dumps(r, separators=(",", ":"))) for seq, r in enumerate(records)],
        )
        counts.messages += len(records)
        if queue.endswith("-dlq"):
            counts.dead_letters += len(records)

    # ---- restore -----------------------------------------------------------------------------------------

    def restore(self) -> SnapshotCounts:
        """Puts the snapshot into the (freshly provisioned, empty) server. Tables, buckets and queues must
        exist already: the template creates them; ones the template no longer has are skipped."""
        counts = SnapshotCounts()
        if _database_committed(self.database):
            with self._db() as db:
                version = db.execute("SELECT value FROM meta WHERE name = 'format'").fetchone()
                if version is not None and version[0] != str(FORMAT):
                    raise ValueError(f"{self.database} has snapshot format {version[0]}, not {FORMAT}")
                tables: dict[str, list[dict[str, Any]]] = {}
                for tbl, item in db.execute("SELECT tbl, item FROM items ORDER BY tbl, k"):
                    wire = json.loads(item)
                    tables.setdefault(tbl, []).append({k: _from_wire(v) for k, v in wire.items()})
                buckets: dict[str, list[dict[str, Any]]] = {}
                for bucket, key, etag, blob, content_type, metadata in db.execute(
                    "SELECT bucket, key, etag, blob, content_type, metadata FROM objects ORDER BY bucket, key"
                ):
                    buckets.setdefault(bucket, []).append(
                        {
                            "key": key,
                            "etag": etag,
                            "blob": blob,
                            "content_type": content_type,
                            "metadata": json.loads(metadata),
                        }
                    )
                messages: dict[str, list[dict[str, Any]]] = {}
                for queue, message in db.execute("SELECT queue, message FROM messages ORDER BY queue, seq"):
                    messages.setdefault(queue, []).append(json.loads(message))
                for queue, body, attributes in db.execute("SELECT queue, body, attributes FROM dead_letters"):
                    messages.setdefault(queue, []).append(
                        {"body": body, "attributes": json.loads(attributes)}
                    )
            in_step = True
        else:
            state = json.loads(self.state_file.read_text(encoding="utf-8"))
            if state.get("format") != 1:
                raise ValueError(f"{self.state_file} has snapshot format {state.get('format')}, not 1")
            tables = {name: [_legacy_decode(i) for i in items] for name, items in state["tables"].items()}
            buckets, messages = state["buckets"], state["dead_letters"]
            in_step = False  # the first save writes everything into the database
        self._restore_tables(tables, counts)
        self._restore_buckets(buckets, counts)
        self._restore_messages(messages, counts)
        self._in_step = in_step and self._forget_changes()
        return counts

    def _forget_changes(self) -> bool:
        """The restore's own writes are the snapshot already: the server's change log starts empty."""
        reply = requests.post(f"{self.endpoint_url}{CHANGES_PATH}?forget=1", timeout=60)
        return reply.status_code != 404 and reply.ok

    def _restore_tables(self, tables: dict[str, list[Any]], counts: SnapshotCounts) -> None:
        ddb = self._client("dynamodb")
        existing = set(self._table_names())
        for name, items in tables.items():
            if name not in existing:
                log.warning("snapshot table %s is not in the template any more; skipped", name)
                continue
            for start in range(0, len(items), 25):
                batch = [{"PutRequest": {"Item": i}} for i in items[start : start + 25]]
                pending: dict[str, Any] = {name: batch}
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

    def _restore_messages(self, saved: dict[str, list[dict[str, Any]]], counts: SnapshotCounts) -> None:
        """Each queue's messages put back as they were (ids, timestamps, receive counts, timers) inside the
        server; on a moto without the patches, sent again through the API (received 0 times, sent now)."""
        if not saved:
            return
        reply = requests.post(
            f"{self.endpoint_url}{QUEUES_PATH}?restore=1&region={self.region}",
            json={"queues": saved},
            timeout=300,
        )
        if reply.status_code == 200 and reply.headers.get("Content-Type", "").startswith("application/json"):
            answer = reply.json()
            for name in answer["missing"]:
                log.warning("snapshot queue %s is not in the template any more; skipped", name)
            for name, restored in answer["restored"].items():
                counts.messages += restored
                if name.endswith("-dlq"):
                    counts.dead_letters += restored
            return
        for name, sent in send_messages(self._client("sqs"), saved).items():
            counts.messages += sent
            if name.endswith("-dlq"):
                counts.dead_letters += sent
