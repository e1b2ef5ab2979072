"""Which DynamoDB items changed since the last snapshot, kept inside the moto server's process (issue 27).

`moto_dynamodb` calls `ChangeLog.touched` after every write of an item (put, update, delete, a transaction's
rollback); the snapshot asks the server for the items behind those keys (`moto_server` answers
`POST /_weknora/dynamodb-changes` under the same lock as every DynamoDB request, so the answer is one
consistent cut across all tables) and writes only them. A batch handed out stays owed until the next call
says it was saved (`saved=1`): a snapshot that failed to write gets the same keys again, with their values
of then.

S3 alike (`ObjectChangeLog`; both keep their keys in a `KeyLog`): the keys put (a PUT, a copy, a completed multipart upload) or deleted since
the last saved batch, so a save reads only those objects instead of listing every bucket. S3 requests are
not serialised, so this half is no cut: a key written while the snapshot reads is read now or next time.
"""

from __future__ import annotations

import json
import threading
from typing import Any, Generic, TypeVar

from chalicelib.local.moto_dynamodb import PrimaryKey

K = TypeVar("K")

#: the moto server's path for the change log (not an AWS API)
CHANGES_PATH = "/_weknora/dynamodb-changes"


def _wire(value: object) -> str:
    import base64

    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not in a DynamoDB item")


class KeyLog(Generic[K]):
    """The keys written since the last saved batch, by container (a table, a bucket), and the containers to
    read whole (deleted or emptied behind the API's back). A batch handed out stays owed until the next one
    is asked for with `previous_saved=True`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._dirty: dict[str, set[K]] = {}
        self._cleared: set[str] = set()
        self._handed_out: dict[str, set[K]] = {}
        self._handed_out_cleared: set[str] = set()
        #: off until a snapshot first asks (whose first save reads everything): a server nobody snapshots
        #: (a bench, `up --snapshot-interval 0`) keeps no key it will never hand out
        self._on = False

    def touched(self, name: str, key: K) -> None:
        if not self._on:
            return
        with self._lock:
            self._dirty.setdefault(name, set()).add(key)

    def cleared(self, name: str) -> None:
        if not self._on:
            return
        with self._lock:
            self._dirty.pop(name, None)
            self._cleared.add(name)

    def hand_out(self, *, previous_saved: bool) -> tuple[dict[str, set[K]], set[str]]:
        """The keys by container and the containers cleared since the last batch that was saved (a set
        handed out is never changed afterwards)."""
        with self._lock:
            self._on = True
            if not previous_saved:  # the last batch was not written: owe it again
                for name, keys in self._handed_out.items():
                    self._dirty.setdefault(name, set()).update(keys)
                self._cleared |= self._handed_out_cleared
            self._handed_out, self._dirty = self._dirty, {}
            self._handed_out_cleared, self._cleared = self._cleared, set()
            return self._handed_out, self._handed_out_cleared

    def forget(self) -> None:
        """Everything written so far is in the snapshot already (it was just restored from it)."""
        with self._lock:
            self._on = True
            self._dirty, self._cleared = {}, set()
            self._handed_out, self._handed_out_cleared = {}, set()


class ChangeLog:
    """Which DynamoDB items were written, by table."""

    def __init__(self) -> None:
        self._keys: KeyLog[PrimaryKey] = KeyLog()

    def touched(self, table: Any, pk: PrimaryKey) -> None:
        self._keys.touched(table.name, pk)

    def cleared(self, table: Any) -> None:
        self._keys.cleared(table.name)

    def take(self, backend: Any, *, previous_saved: bool) -> dict[str, Any]:
        """{"tables": {name: {"cleared": bool, "put": [item], "delete": [key]}}} for every key written since
        the last batch that was saved; keys are the items' key attributes, both in DynamoDB's JSON."""
        batch, cleared = self._keys.hand_out(previous_saved=previous_saved)
        tables: dict[str, Any] = {}
        for name in set(batch) | cleared:
            table = backend.tables.get(name)
            if table is None:
                continue  # deleted since: the snapshot drops tables that are gone
            put, delete = [], []
            for hash_value, range_value in batch.get(name, ()):
                key = {table.hash_key_attr: hash_value.to_json()}
                if table.range_key_attr and range_value is not None:
                    key[table.range_key_attr] = range_value.to_json()
                item = _current(table, (hash_value, range_value))
                if item is None:
                    delete.append(key)
                else:
                    put.append(item.to_json()["Attributes"])
            tables[name] = {"cleared": name in cleared, "put": put, "delete": delete}
        return {"tables": tables}

    def forget(self) -> None:
        self._keys.forget()


class ObjectChangeLog(KeyLog[str]):
    """Which S3 keys were written or deleted, by bucket (`cleared`: the bucket was deleted or emptied behind
    the API's back, so the snapshot lists it again)."""

    def take(self, *, previous_saved: bool) -> dict[str, Any]:
        """{"objects": {bucket: [key]}, "buckets_listed": [bucket]}: the keys to read again (each is put or
        gone now) and the buckets to list whole."""
        batch, cleared = self.hand_out(previous_saved=previous_saved)
        return {
            "objects": {bucket: sorted(keys) for bucket, keys in batch.items()},
            "buckets_listed": sorted(cleared),
        }


def _current(table: Any, pk: PrimaryKey) -> Any:
    from chalicelib.local.moto_dynamodb import _current as current_item

    return current_item(table, pk)


change_log = ChangeLog()
object_log = ObjectChangeLog()


def answer(query: str, account: str) -> bytes:
    """The body of the server's reply to CHANGES_PATH?<query> (`region=...`; `saved=1`; `forget=1`)."""
    from urllib.parse import parse_qs

    from moto.dynamodb.models import dynamodb_backends

    params = parse_qs(query)
    if params.get("forget") == ["1"]:
        change_log.forget()
        object_log.forget()
        return b"{}"
    backend = dynamodb_backends[account][params.get("region", ["us-east-1"])[0]]
    saved = params.get("saved") == ["1"]
    batch = change_log.take(backend, previous_saved=saved) | object_log.take(previous_saved=saved)
    return json.dumps(batch, default=_wire).encode()


_installed = False


def install() -> None:
    """Once per process, with `moto_dynamodb` (the caller has checked the moto version)."""
    global _installed
    if _installed:
        return
    from moto.s3.models import S3Backend

    from chalicelib.local import moto_dynamodb

    moto_dynamodb.WRITE_LISTENERS.append(change_log.touched)
    S3Backend.put_object = _logs_put(S3Backend.put_object)  # type: ignore[method-assign]
    S3Backend.delete_object = _logs_delete(S3Backend.delete_object)  # type: ignore[method-assign]
    S3Backend.delete_bucket = _logs_bucket_delete(S3Backend.delete_bucket)  # type: ignore[method-assign]
    _installed = True


# A copy and a completed multipart upload end in `put_object`, a DeleteObjects in `delete_object`.


def _logs_put(put_object: Any) -> Any:
    def put_and_log(self: Any, bucket_name: str, key_name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return put_object(self, bucket_name, key_name, *args, **kwargs)
        finally:  # a write that failed half-way is read again: the snapshot finds what is there
            object_log.touched(bucket_name, key_name)

    return put_and_log


def _logs_delete(delete_object: Any) -> Any:
    def delete_and_log(self: Any, bucket_name: str, key_name: str, *args: Any, **kwargs: Any) -> Any:
        try:
            return delete_object(self, bucket_name, key_name, *args, **kwargs)
        finally:
            object_log.touched(bucket_name, key_name)

    return delete_and_log


def _logs_bucket_delete(delete_bucket: Any) -> Any:
    def delete_bucket_and_log(self: Any, bucket_name: str) -> Any:
        try:
            return delete_bucket(self, bucket_name)
        finally:
            object_log.cleared(bucket_name)

    return delete_bucket_and_log
