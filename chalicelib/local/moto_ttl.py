"""DynamoDB's Time to Live inside the moto server's process: moto records a table's TTL setting but never
deletes an expired item, so the embedding cache, finished tasks, grants and the like grew without bound
locally and every snapshot kept them. Private internals of moto, run only on the version it pins.

A sweep deletes the items whose TTL attribute (the table's `TimeToLiveSpecification`) is a number of epoch
seconds in the past, as DynamoDB would (a value more than five years old is not taken for an expiry, as
there), through moto's own `Table.delete_item`: the write hooks see each delete, so the snapshot's change log
records it and the next save drops the item. The server runs a sweep every `SWEEP_SECONDS`, under its
DynamoDB lock (one cut between whole requests); each run examines at most `EXAMINED_PER_TABLE` items of a
table, resuming where the last run stopped, and deletes at most `DELETED_PER_RUN` (a run the cap cut short
resumes at the first expired item it left, not after everything it examined).
"""

from __future__ import annotations

import itertools
import time
from typing import Any

from chalicelib.local.moto_items import SpilledItems, key_bytes

#: the moto server's path that runs a sweep now (tests; not an AWS API)
SWEEP_PATH = "/_weknora/ttl-sweep"
SWEEP_SECONDS = 600
EXAMINED_PER_TABLE = 20_000
DELETED_PER_RUN = 5_000
#: DynamoDB ignores a TTL value older than this (a value in milliseconds, say, is far in the future anyway)
_OLDEST_EXPIRY_SECONDS = 5 * 365 * 24 * 3600


def _expiry(item: Any, attribute: str) -> float | None:
    value = item.attrs.get(attribute)
    if value is None or value.type != "N":
        return None
    try:
        return float(value.value)
    except ValueError:
        return None


class TtlSweeper:
    def __init__(self) -> None:
        #: table name -> the key the next run starts from (a spilled table is walked in key order)
        self._resume: dict[str, tuple[bytes, bytes]] = {}

    def _next_items(self, name: str, table: Any) -> list[Any]:
        items = table.items
        if not isinstance(items, SpilledItems):  # not reached on the pinned moto; small tables only
            return list(itertools.islice(table.all_items(), EXAMINED_PER_TABLE))
        start = self._resume.pop(name, (b"", b""))
        examined = list(itertools.islice(items.ordered_from(*start), EXAMINED_PER_TABLE))
        if len(examined) == EXAMINED_PER_TABLE:  # more to walk: the next run goes on from here
            self._resume_at(name, table, examined[-1])
        return examined

    def _resume_at(self, name: str, table: Any, item: Any) -> None:
        """The next run over `table` starts at `item` (inclusive); an unspilled table is walked whole."""
        if isinstance(table.items, SpilledItems):
            ranged = table.items.ranged
            self._resume[name] = (key_bytes(item.hash_key), key_bytes(item.range_key) if ranged else b"")

    def sweep(self, backend: Any, now: float | None = None) -> int:
        """Deletes expired items; returns how many. The caller holds the server's DynamoDB lock."""
        now = time.time() if now is None else now
        deleted = 0
        for name, table in list(backend.tables.items()):
            ttl = table.ttl
            if ttl.get("TimeToLiveStatus") != "ENABLED" or not ttl.get("AttributeName"):
                continue
            expired = [
                item
                for item in self._next_items(name, table)
                if (at := _expiry(item, ttl["AttributeName"])) is not None
                and now - _OLDEST_EXPIRY_SECONDS <= at < now
            ]
            allowed = DELETED_PER_RUN - deleted
            for item in expired[:allowed]:
                table.delete_item(item.hash_key, item.range_key)
                deleted += 1
            if len(expired) > allowed:  # the cap cut this table short: its next run starts at what is left
                self._resume_at(name, table, expired[allowed])
            if deleted >= DELETED_PER_RUN:
                break
        return deleted


sweeper = TtlSweeper()


def sweep(account: str, region: str) -> int:
    from moto.dynamodb.models import dynamodb_backends

    return sweeper.sweep(dynamodb_backends[account][region])
