"""moto's DynamoDB items kept on disk, a bounded number in memory (issue 27): private internals of moto,
applied only through `moto_patches.speed_up_moto` on the moto version it pins.

moto 5.2.5 holds every item of every table as Python objects (an `Item`, a dict, a `DynamoType` per
attribute): about 3 KB an item over the pipeline's tables, so the emulator's memory grew by ~0.25 MB a
document for as long as the stack ran. Here a table's `items` is a mapping over one SQLite file of the
moto process (a temporary file: what survives a restart is still the snapshot's job, `snapshot.py`),
with the most recently used `LIVE_ITEMS` items kept as moto's objects:

- reads come from the live objects, else from the file (one row per item: its key and a pickle of its
  attributes); a write puts the new object among the live ones and marks it dirty;
- moto changes an item in place on UpdateItem: the write hooks (`mark_written`) mark that key dirty;
- dirty items are written to the file before anything reads several rows (a partition, an index key, the
  whole table) and at the end of every DynamoDB request (`end_of_request`, under the server's DynamoDB
  lock), which then forgets the least recently used clean objects beyond `LIVE_ITEMS`. Nothing is
  forgotten within a request, so an object moto holds and changes is the one that gets written.
- the items under each secondary index's hash key are rows of the file too (kept for the indexes a Query
  has used), so an index Query reads only its matches and memory holds no per-item index entry.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import sqlite3
import tempfile
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator, MutableMapping
from decimal import Decimal
from typing import Any

#: items kept as moto's objects between requests (the rest are read from the file when asked for): ~4 KB
#: each; the pipeline's working set (six documents in flight, ~55 items each) is a few hundred
LIVE_ITEMS = 2_000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS items (t INTEGER, h BLOB, r BLOB, body BLOB, PRIMARY KEY (t, h, r)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS index_keys (t INTEGER, ix TEXT, k BLOB, rk BLOB, h BLOB, r BLOB,
    PRIMARY KEY (t, ix, k, rk, h, r)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS index_keys_of_item ON index_keys (t, ix, h, r);
CREATE TABLE IF NOT EXISTS kept (k INTEGER PRIMARY KEY, body BLOB);
"""


def key_bytes(value: Any) -> bytes:
    """A DynamoDB key value as bytes that are equal when moto's `DynamoType`s are equal; for strings (every
    key of the pipeline's tables) the byte order is moto's order too."""
    if value is None:
        return b""
    kind = value.type
    if kind == "S":
        return b"S" + value.value.encode("utf-8")
    if kind == "N":
        return b"N" + str(Decimal(value.value).normalize()).encode("ascii")
    raw = value.value
    return b"B" + (raw if isinstance(raw, bytes | bytearray) else str(raw).encode("utf-8"))


def _encode(item: Any) -> bytes:
    return pickle.dumps((item.hash_key, item.range_key, dict(item.attrs)), protocol=pickle.HIGHEST_PROTOCOL)


def _decode(body: bytes) -> Any:
    from moto.dynamodb.models.dynamo_type import Item, LimitedSizeDict

    hash_key, range_key, attrs = pickle.loads(body)
    item: Any = Item.__new__(Item)
    item.hash_key, item.range_key = hash_key, range_key
    # as moto's own Item.__deepcopy__ does: the item passed the size check when it was written
    item.attrs = LimitedSizeDict.__new__(LimitedSizeDict)
    dict.update(item.attrs, attrs)
    return item


LiveKey = tuple[int, bytes, bytes]
IndexShape = tuple[tuple[str, ...], str | None]
#: an index row's sort value when the item lacks the attribute (every real one starts with its type letter)
NO_SORT_VALUE = b""


class ItemFile:
    """The process's one file of items and the live objects over it (every table's)."""

    def __init__(self, path: str | None = None) -> None:
        if path is None:
            handle, path = tempfile.mkstemp(prefix="weknora-moto-items-", suffix=".sqlite")
            os.close(handle)
            temporary = True
        else:
            temporary = False
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; " + _SCHEMA)
        if temporary and os.name == "posix":
            # the open connection keeps the file (one connection, no journal): nothing is left behind when
            # the process ends, however it ends
            os.unlink(path)
        self.lock = threading.RLock()
        #: (table id, hash, range) -> (the table's mapping, the item), least recently used first
        self.live: OrderedDict[LiveKey, tuple[SpilledItems, Any]] = OrderedDict()
        #: the live items changed since they were last written (an ordered set)
        self.dirty: dict[LiveKey, None] = {}
        self._ids = itertools.count(1)

    def size_bytes(self) -> int:
        with self.lock:
            pages = self.db.execute("PRAGMA page_count").fetchone()[0]
            return int(pages) * int(self.db.execute("PRAGMA page_size").fetchone()[0])

    def new_table_id(self) -> int:
        return next(self._ids)

    def end_of_request(self, limit: int | None = None) -> None:
        """Write what changed; forget the least recently used objects beyond `limit`."""
        limit = LIVE_ITEMS if limit is None else limit
        with self.lock:
            self.flush()
            while len(self.live) > limit:
                self.live.popitem(last=False)

    def flush(self, table_id: int | None = None) -> None:
        with self.lock:
            if not self.dirty:
                return
            dirty = [(key, self.live[key]) for key in self.dirty if table_id is None or key[0] == table_id]
            if not dirty:
                return
            self.db.execute("BEGIN")
            try:
                self.db.executemany(
                    "INSERT OR REPLACE INTO items VALUES (?, ?, ?, ?)",
                    [(t, h, r, _encode(entry[1])) for (t, h, r), entry in dirty],
                )
                for key, entry in dirty:
                    entry[0].index_rows(key[1], key[2], entry[1])
                    del self.dirty[key]
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise

    def keep(self, value: Any) -> int:
        """Any picklable value (a finished execution's history) put in the file; its key to read it back."""
        body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        with self.lock:
            cursor = self.db.execute("INSERT INTO kept (body) VALUES (?)", (body,))
            return int(cursor.lastrowid or 0)

    def kept(self, key: int) -> Any:
        with self.lock:
            row = self.db.execute("SELECT body FROM kept WHERE k = ?", (key,)).fetchone()
        if row is None:
            raise KeyError(key)
        return pickle.loads(row[0])

    def let_go(self, key: int) -> None:
        with self.lock:
            self.db.execute("DELETE FROM kept WHERE k = ?", (key,))

    def drop(self, table_id: int) -> None:
        with self.lock:
            for key in [k for k in self.live if k[0] == table_id]:
                del self.live[key]
                self.dirty.pop(key, None)
            self.db.execute("DELETE FROM items WHERE t = ?", (table_id,))
            self.db.execute("DELETE FROM index_keys WHERE t = ?", (table_id,))


_file: ItemFile | None = None
_file_lock = threading.Lock()


def item_file() -> ItemFile:
    global _file
    with _file_lock:
        if _file is None:
            _file = ItemFile()
        return _file


def end_of_request() -> None:
    if _file is not None:
        _file.end_of_request()


def _drop_quietly(file: ItemFile, table_id: int) -> None:
    with contextlib.suppress(sqlite3.Error):  # the process is ending and the file already closed
        file.drop(table_id)


class SpilledItems(MutableMapping[Any, Any]):
    """A moto `Table.items`: hash key -> `Item` (a table without a range key) or -> `Partition`."""

    def __init__(self, ranged: bool, file: ItemFile | None = None) -> None:
        self.file = file or item_file()
        self.ranged = ranged
        self.id = self.file.new_table_id()
        #: index name -> (its hash key attributes, the attribute its items sort by first), for the indexes
        #: whose rows are kept
        self.indexed: dict[str, IndexShape] = {}
        weakref.finalize(self, _drop_quietly, self.file, self.id)

    # ---------------------------------------------------------------- one item

    def get_item(self, h: bytes, r: bytes) -> Any | None:
        file = self.file
        with file.lock:
            entry = file.live.get((self.id, h, r))
            if entry is not None:
                file.live.move_to_end((self.id, h, r))
                return entry[1]
            row = file.db.execute(
                "SELECT body FROM items WHERE t = ? AND h = ? AND r = ?", (self.id, h, r)
            ).fetchone()
            if row is None:
                return None
            item = _decode(row[0])
            file.live[(self.id, h, r)] = (self, item)
            return item

    def put_item(self, item: Any) -> None:
        key = (self.id, key_bytes(item.hash_key), key_bytes(item.range_key) if self.ranged else b"")
        with self.file.lock:
            self.file.live[key] = (self, item)
            self.file.live.move_to_end(key)
            self.file.dirty[key] = None

    def delete_item(self, h: bytes, r: bytes) -> Any | None:
        with self.file.lock:
            item = self.get_item(h, r)
            self.file.live.pop((self.id, h, r), None)
            self.file.dirty.pop((self.id, h, r), None)
            self.file.db.execute("DELETE FROM items WHERE t = ? AND h = ? AND r = ?", (self.id, h, r))
            self.file.db.execute("DELETE FROM index_keys WHERE t = ? AND h = ? AND r = ?", (self.id, h, r))
            return item

    def mark_written(self, hash_value: Any, range_value: Any) -> None:
        """After moto changed an item in place (UpdateItem): write it with the next flush."""
        key = (self.id, key_bytes(hash_value), key_bytes(range_value) if self.ranged else b"")
        with self.file.lock:
            if key in self.file.live:
                self.file.dirty[key] = None

    # ---------------------------------------------------------------- several items

    def _rows(self, sql: str, args: tuple[Any, ...]) -> list[Any]:
        file = self.file
        with file.lock:
            file.flush(self.id)
            found = []
            for h, r, body in file.db.execute(sql, args):
                entry = file.live.get((self.id, h, r))
                if entry is None:
                    item = _decode(body)
                    file.live[(self.id, h, r)] = (self, item)
                else:
                    item = entry[1]
                    file.live.move_to_end((self.id, h, r))
                found.append(item)
            return found

    def partition_items(self, h: bytes) -> list[Any]:
        return self._rows("SELECT h, r, body FROM items WHERE t = ? AND h = ? ORDER BY r", (self.id, h))

    def every_item(self) -> list[Any]:
        return self._rows("SELECT h, r, body FROM items WHERE t = ? ORDER BY h, r", (self.id,))

    def ordered_from(self, h: bytes, r: bytes, batch: int = 100) -> Iterator[Any]:
        """Every item from key (h, r) on, in key order, read a batch at a time (a Scan's page stops early)."""
        rows = self._rows(
            # a row value, so SQLite seeks in the primary key (an OR of the two columns reads the table)
            "SELECT h, r, body FROM items WHERE t = ? AND (h, r) >= (?, ?) ORDER BY h, r LIMIT ?",
            (self.id, h, r, batch),
        )
        while rows:
            yield from rows
            if len(rows) < batch:
                return
            last = rows[-1]
            h = key_bytes(last.hash_key)
            r = key_bytes(last.range_key) if self.ranged else b""
            rows = self._rows(
                "SELECT h, r, body FROM items WHERE t = ? AND (h, r) > (?, ?) ORDER BY h, r LIMIT ?",
                (self.id, h, r, batch),
            )

    def count(self) -> int:
        with self.file.lock:
            self.file.flush(self.id)
            return int(
                self.file.db.execute("SELECT COUNT(*) FROM items WHERE t = ?", (self.id,)).fetchone()[0]
            )

    # ---------------------------------------------------------------- secondary indexes

    @staticmethod
    def _index_key(item: Any, hash_attrs: tuple[str, ...]) -> bytes | None:
        values = [item.attrs.get(name) for name in hash_attrs]
        if any(v is None for v in values):
            return None
        return b"\0".join(key_bytes(v) for v in values)

    def _index_row(self, name: str, shape: IndexShape, item: Any) -> tuple[Any, ...] | None:
        hash_attrs, sort_attr = shape
        key = self._index_key(item, hash_attrs)
        if key is None:
            return None
        sort_value = item.attrs.get(sort_attr) if sort_attr else None
        h = key_bytes(item.hash_key)
        r = key_bytes(item.range_key) if self.ranged else b""
        return (self.id, name, key, NO_SORT_VALUE if sort_value is None else key_bytes(sort_value), h, r)

    def index_rows(self, h: bytes, r: bytes, item: Any) -> None:
        """An item's rows under every kept index (called by the flush, inside its transaction)."""
        for name, shape in self.indexed.items():
            self.file.db.execute(
                "DELETE FROM index_keys WHERE t = ? AND ix = ? AND h = ? AND r = ?", (self.id, name, h, r)
            )
            row = self._index_row(name, shape, item)
            if row is not None:
                self.file.db.execute("INSERT INTO index_keys VALUES (?, ?, ?, ?, ?, ?)", row)

    def _kept_index(self, name: str, shape: IndexShape) -> None:
        """The index's rows, built on first use (and again if its shape changed)."""
        if self.indexed.get(name) == shape:
            return
        self.forget_index(name)
        self.file.flush(self.id)
        rows = [row for item in self.every_item() if (row := self._index_row(name, shape, item)) is not None]
        self.file.db.executemany("INSERT INTO index_keys VALUES (?, ?, ?, ?, ?, ?)", rows)
        self.indexed[name] = shape

    def index_matches(self, name: str, shape: IndexShape, values: tuple[Any, ...]) -> list[Any]:
        """The items whose index hash key attributes hold `values`."""
        with self.file.lock:
            self._kept_index(name, shape)
            key = b"\0".join(key_bytes(v) for v in values)
            return self._rows(
                "SELECT i.h, i.r, i.body FROM index_keys k JOIN items i ON i.t = k.t AND i.h = k.h AND i.r = k.r"
                " WHERE k.t = ? AND k.ix = ? AND k.k = ?",
                (self.id, name, key),
            )

    def index_ordered(
        self,
        name: str,
        shape: IndexShape,
        values: tuple[Any, ...],
        after: tuple[bytes, bytes, bytes] | None,
        forward: bool,
        batch: int = 100,
    ) -> Iterator[Any]:
        """The items under one index hash key in (sort attribute, hash, range) byte order, or the reverse,
        from just after `after` on, read a batch at a time; items without the sort attribute are left out."""
        with self.file.lock:
            self._kept_index(name, shape)
        sort_attr = shape[1]
        assert sort_attr is not None
        key = b"\0".join(key_bytes(v) for v in values)
        order, beyond = ("ASC", ">") if forward else ("DESC", "<")
        select = (
            "SELECT i.h, i.r, i.body FROM index_keys k JOIN items i ON i.t = k.t AND i.h = k.h AND i.r = k.r"
            " WHERE k.t = ? AND k.ix = ? AND k.k = ? AND k.rk != X''{where}"
            f" ORDER BY k.rk {order}, k.h {order}, k.r {order} LIMIT ?"
        )
        position = after
        while True:
            if position is None:
                rows = self._rows(select.format(where=""), (self.id, name, key, batch))
            else:
                rows = self._rows(
                    select.format(where=f" AND (k.rk, k.h, k.r) {beyond} (?, ?, ?)"),
                    (self.id, name, key, *position, batch),
                )
            yield from rows
            if len(rows) < batch:
                return
            last = rows[-1]
            position = (
                key_bytes(last.attrs[sort_attr]),
                key_bytes(last.hash_key),
                key_bytes(last.range_key) if self.ranged else b"",
            )

    def forget_index(self, name: str | None = None) -> None:
        with self.file.lock:
            if name is None:
                self.indexed.clear()
                self.file.db.execute("DELETE FROM index_keys WHERE t = ?", (self.id,))
            else:
                self.indexed.pop(name, None)
                self.file.db.execute("DELETE FROM index_keys WHERE t = ? AND ix = ?", (self.id, name))

    # ---------------------------------------------------------------- the mapping moto uses

    def __getitem__(self, hash_value: Any) -> Any:
        if self.ranged:
            return Partition(self, hash_value)  # as moto's defaultdict(dict) gives an empty one
        item = self.get_item(key_bytes(hash_value), b"")
        if item is None:
            raise KeyError(hash_value)
        return item

    def __setitem__(self, hash_value: Any, value: Any) -> None:
        if self.ranged:  # a whole partition (a copy put back)
            self.pop(hash_value, None)
            for item in dict(value).values():
                self.put_item(item)
        else:
            self.put_item(value)

    def __delitem__(self, hash_value: Any) -> None:
        h = key_bytes(hash_value)
        if self.ranged:
            for item in self.partition_items(h):
                self.delete_item(h, key_bytes(item.range_key))
        elif self.delete_item(h, b"") is None:
            raise KeyError(hash_value)

    def __contains__(self, hash_value: object) -> bool:
        if self.ranged:
            with self.file.lock:
                self.file.flush(self.id)
                h = key_bytes(hash_value)
                return (
                    self.file.db.execute(
                        "SELECT 1 FROM items WHERE t = ? AND h = ? LIMIT 1", (self.id, h)
                    ).fetchone()
                    is not None
                )
        return self.get_item(key_bytes(hash_value), b"") is not None

    def __iter__(self) -> Iterator[Any]:
        seen: list[Any] = []
        for item in self.every_item():
            if not seen or seen[-1] != item.hash_key:
                seen.append(item.hash_key)
        return iter(seen)

    def __len__(self) -> int:
        if not self.ranged:
            return self.count()
        with self.file.lock:
            self.file.flush(self.id)
            return int(
                self.file.db.execute(
                    "SELECT COUNT(DISTINCT h) FROM items WHERE t = ?", (self.id,)
                ).fetchone()[0]
            )

    def values(self) -> Any:
        """Items, or per partition a dict of its items (read once: moto only reads them)."""
        items = self.every_item()
        if not self.ranged:
            return items
        partitions: dict[bytes, dict[Any, Any]] = {}
        for item in items:
            partitions.setdefault(key_bytes(item.hash_key), {})[item.range_key] = item
        return list(partitions.values())

    def clear(self) -> None:
        with self.file.lock:
            self.file.drop(self.id)

    def __deepcopy__(self, memo: dict[int, Any]) -> SpilledItems:
        """moto's own transaction (put back by the tests) copies whole tables to roll back."""
        copied = SpilledItems(self.ranged, self.file)
        with self.file.lock:
            self.file.flush(self.id)
            self.file.db.execute(
                "INSERT INTO items SELECT ?, h, r, body FROM items WHERE t = ?", (copied.id, self.id)
            )
        return copied


class Partition(MutableMapping[Any, Any]):
    """The items of one hash key of a table with a range key: range key -> `Item`."""

    def __init__(self, table_items: SpilledItems, hash_value: Any) -> None:
        self.table_items = table_items
        self.h = key_bytes(hash_value)

    def __getitem__(self, range_value: Any) -> Any:
        item = self.table_items.get_item(self.h, key_bytes(range_value))
        if item is None:
            raise KeyError(range_value)
        return item

    def __setitem__(self, range_value: Any, item: Any) -> None:
        self.table_items.put_item(item)

    def __delitem__(self, range_value: Any) -> None:
        if self.table_items.delete_item(self.h, key_bytes(range_value)) is None:
            raise KeyError(range_value)

    def __iter__(self) -> Iterator[Any]:
        return iter([item.range_key for item in self.table_items.partition_items(self.h)])

    def __len__(self) -> int:
        with self.table_items.file.lock:
            self.table_items.file.flush(self.table_items.id)
            return int(
                self.table_items.file.db.execute(
                    "SELECT COUNT(*) FROM items WHERE t = ? AND h = ?", (self.table_items.id, self.h)
                ).fetchone()[0]
            )

    def values(self) -> Any:
        return self.table_items.partition_items(self.h)
