"""moto's DynamoDB at a cost that does not grow with the table (issue 27): private internals of moto, applied
only through `moto_patches.speed_up_moto` on the moto version it pins.

moto 5.2.5 answers every `Query` by sorting the whole table (`Table.all_items`) and then keeping the
partition's items (or, on an index, the items whose index keys match), and copies every table a
`TransactWriteItems` names before it starts, to roll back. With 70,000 items that is most of the local
stack's CPU, and it grows with everything ever stored. Here:

- a Query on the table reads only its partition (`Table.items[hash]`), and a Query on a secondary index only
  the items whose index hash key matches, from a map per index kept up to date on every write
  (`put_item`, `delete_item`, `update_item`; built on the index's first Query). moto's own query then runs
  on exactly the items its filter would have kept, in the order its sort gives them, so ordering,
  pagination, filters, projections and counts are moto's (tests compare the two);
- a transaction saves, before each of its writes, the one item the write touches, and a rollback puts back
  those items instead of whole-table copies.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable, Iterable
from typing import Any

#: attribute a Table carries its index maps in (absent: none built yet)
_MAPS = "_weknora_index_maps"

PrimaryKey = tuple[Any, Any]  # (hash DynamoType, range DynamoType | None)

_narrowed = threading.local()


def _table_order(item: Any) -> Any:
    """moto's `Table.all_items` sort key, so the candidates come in the order moto would list them."""
    return (item.hash_key, item.range_key) if item.range_key else item.hash_key


class IndexMap:
    """The items of one table by the values of one secondary index's hash key attributes."""

    def __init__(self, hash_attrs: tuple[str, ...]) -> None:
        self.hash_attrs = hash_attrs
        self.buckets: dict[tuple[Any, ...], dict[PrimaryKey, Any]] = {}
        self.bucket_of: dict[PrimaryKey, tuple[Any, ...]] = {}

    def _key(self, item: Any) -> tuple[Any, ...] | None:
        values = tuple(item.attrs.get(name) for name in self.hash_attrs)
        return None if any(v is None for v in values) else values

    def place(self, pk: PrimaryKey, item: Any | None) -> None:
        old = self.bucket_of.pop(pk, None)
        if old is not None:
            bucket = self.buckets[old]
            bucket.pop(pk, None)
            if not bucket:
                del self.buckets[old]
        new = self._key(item) if item is not None else None
        if new is not None:
            self.buckets.setdefault(new, {})[pk] = item
            self.bucket_of[pk] = new

    def matching(self, values: tuple[Any, ...]) -> list[Any]:
        return sorted(self.buckets.get(values, {}).values(), key=_table_order)


def _every_item(table: Any) -> Iterable[Any]:
    for partition in list(table.items.values()):
        if table.range_key_attr:
            yield from list(partition.values())
        else:
            yield partition


def _current(table: Any, pk: PrimaryKey) -> Any | None:
    hash_value, range_value = pk
    if table.range_key_attr:
        partition = table.items.get(hash_value)
        return partition.get(range_value) if partition is not None else None
    return table.items.get(hash_value)


def _index_map(table: Any, index: Any) -> IndexMap:
    hash_attrs = tuple(k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH")
    maps: dict[str, IndexMap] = table.__dict__.setdefault(_MAPS, {})
    found = maps.get(index.name)
    if found is None or found.hash_attrs != hash_attrs:
        found = IndexMap(hash_attrs)
        for item in _every_item(table):
            found.place((item.hash_key, item.range_key), item)
        maps[index.name] = found
    return found


def reindex(table: Any, pk: PrimaryKey) -> None:
    """After a write of one item: its place in every index map built so far."""
    maps: dict[str, IndexMap] | None = table.__dict__.get(_MAPS)
    if maps:
        item = _current(table, pk)
        for index_map in maps.values():
            index_map.place(pk, item)


#: called with (table, primary key) after every write of an item (the snapshot's change log listens)
WRITE_LISTENERS: list[Callable[[Any, PrimaryKey], None]] = []


def written(table: Any, pk: PrimaryKey) -> None:
    reindex(table, pk)
    for listener in WRITE_LISTENERS:
        listener(table, pk)


def forget_index_maps(table: Any) -> None:
    """After a change not made item by item (a table emptied, a rollback): rebuilt on the next Query."""
    table.__dict__.pop(_MAPS, None)


def _candidates(table: Any, hash_key: Any, index_name: str | None, hash_conditions: Any) -> list[Any] | None:
    """The items moto's query would keep before sorting them, in moto's table order; None: let moto look."""
    if not index_name:
        if hash_key is None or hash_key not in table.items:
            return None if hash_key is None else []
        partition = table.items[hash_key]
        return sorted(partition.values(), key=_table_order) if table.range_key_attr else [partition]
    index = next((i for i in table.all_indexes() if i.name == index_name), None)
    if index is None:
        return None  # moto says which indexes there are
    conditions = dict(hash_conditions or [])
    index_map = _index_map(table, index)
    if not index_map.hash_attrs or any(name not in conditions for name in index_map.hash_attrs):
        return None
    return index_map.matching(tuple(conditions[name] for name in index_map.hash_attrs))


def narrowed_query(query: Callable[..., Any]) -> Callable[..., Any]:
    def query_one_partition(
        self: Any,
        hash_key: Any,
        range_comparison: Any,
        range_objs: Any,
        limit: Any,
        exclusive_start_key: Any,
        scan_index_forward: Any,
        projection_expressions: Any,
        index_name: str | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        found = _candidates(self, hash_key, index_name, kwargs.get("hash_key_conditions"))
        if found is not None:
            _narrowed.table, _narrowed.items = self, found
        try:
            return query(
                self,
                hash_key,
                range_comparison,
                range_objs,
                limit,
                exclusive_start_key,
                scan_index_forward,
                projection_expressions,
                index_name,
                *args,
                **kwargs,
            )
        finally:
            _narrowed.table, _narrowed.items = None, None

    return query_one_partition


def narrowed_all_items(all_items: Callable[[Any], list[Any]]) -> Callable[[Any], list[Any]]:
    def all_or_narrowed(self: Any) -> list[Any]:
        if getattr(_narrowed, "table", None) is self:
            return list(_narrowed.items)
        return all_items(self)

    return all_or_narrowed


def indexed_put(put_item: Callable[..., Any]) -> Callable[..., Any]:
    def put_and_index(self: Any, *args: Any, **kwargs: Any) -> Any:
        item = put_item(self, *args, **kwargs)
        written(self, (item.hash_key, item.range_key))
        return item

    return put_and_index


def indexed_delete(delete_item: Callable[..., Any]) -> Callable[..., Any]:
    def delete_and_index(self: Any, hash_key: Any, range_key: Any) -> Any:
        item = delete_item(self, hash_key, range_key)
        written(self, (hash_key, range_key))
        return item

    return delete_and_index


def indexed_update(update_item: Callable[..., Any]) -> Callable[..., Any]:
    """moto's UpdateItem changes the stored item in place (the table's `put_item` is not called again)."""

    def update_and_index(self: Any, table_name: str, key: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            item = update_item(self, table_name, key, *args, **kwargs)
        except Exception:
            # moto may have created or half-changed the item before it raised (a size check runs last)
            table = self.tables.get(table_name)
            if table is not None and isinstance(key, dict):
                from moto.dynamodb.exceptions import MockValidationException

                with contextlib.suppress(MockValidationException):  # a key moto refuses: nothing written
                    written(table, self.get_keys_value(table, key))
            raise
        written(self.get_table(table_name), (item.hash_key, item.range_key))
        return item

    return update_and_index


# ---------------------------------------------------------------- TransactWriteItems: undo, not copies


class _UndoLog:
    """The items a transaction's writes touch, as they were before the first of them."""

    def __init__(self) -> None:
        self.saved: dict[tuple[str, PrimaryKey], tuple[Any, Any | None]] = {}

    def save(self, table: Any, pk: PrimaryKey) -> None:
        if (table.name, pk) not in self.saved:
            self.saved[(table.name, pk)] = (table, copy.deepcopy(_current(table, pk)))

    def roll_back(self, backend: Any) -> None:
        for (_name, (hash_value, range_value)), (table, before) in self.saved.items():
            if backend.tables.get(table.name) is not table:
                continue  # the table itself went away meanwhile
            if table.range_key_attr:
                partition = table.items[hash_value]
                if before is None:
                    partition.pop(range_value, None)
                    if not partition:
                        del table.items[hash_value]
                else:
                    partition[range_value] = before
            elif before is None:
                table.items.pop(hash_value, None)
            else:
                table.items[hash_value] = before
            written(table, (hash_value, range_value))


def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
    """moto 5.2.5's `DynamoDBBackend.transact_write_items` with one change: the rollback puts back the items
    the transaction touched (saved one by one before each write) instead of deep copies of whole tables."""
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.dynamodb.exceptions import (
        ConditionalCheckFailed,
        MockValidationException,
        MultipleTransactionsException,
        TooManyTransactionsException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )

    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    undo = _UndoLog()
    target_items: set[tuple[str, str]] = set()

    def check_unicity(table_name: str, key: dict[str, Any]) -> None:
        item = (str(table_name), str(dict(sorted(key.items()))))
        if item in target_items:
            raise MultipleTransactionsException()
        target_items.add(item)

    errors: list[tuple[str, str, dict[str, Any]] | tuple[None, None, None]] = []
    for item in transact_items:
        original_item: dict[str, Any] | None = None
        if len(list(item.keys())) > 1:
            raise TransactWriteSingleOpException
        try:
            op_type, op = next(iter(item.items()))
            if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                raise ValueError("Unsupported transaction operation")
            table_name = op["TableName"]
            condition_expression = op.get("ConditionExpression")
            expression_attribute_names = op.get("ExpressionAttributeNames")
            expression_attribute_values = op.get("ExpressionAttributeValues")
            return_values_on_condition_check_failure = op.get("ReturnValuesOnConditionCheckFailure")
            if op_type == "Put":
                attrs = op["Item"]
                table = self.get_table(table_name)
                key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                if table.range_key_attr is not None:
                    key[table.range_key_attr] = attrs[table.range_key_attr]
            else:
                key = op["Key"]
            check_unicity(table_name, key)
            current = self.get_item(table_name, key)
            if condition_expression is not None:
                condition_op = get_filter_expression(
                    condition_expression, expression_attribute_names, expression_attribute_values
                )
                if not condition_op.expr(current):
                    if return_values_on_condition_check_failure == "ALL_OLD" and current:
                        original_item = current.to_json()["Attributes"]
                    raise ConditionalCheckFailed(item=original_item)
            if op_type != "ConditionCheck":
                table = self.get_table(table_name)
                undo.save(table, self.get_keys_value(table, key))
            if op_type == "Put":
                self.put_item(
                    table_name,
                    op["Item"],
                    condition_expression=condition_expression,
                    expression_attribute_names=expression_attribute_names,
                    expression_attribute_values=expression_attribute_values,
                )
            elif op_type == "Delete":
                self.delete_item(
                    table_name,
                    key,
                    condition_expression=condition_expression,
                    expression_attribute_names=expression_attribute_names,
                    expression_attribute_values=expression_attribute_values,
                )
            elif op_type == "Update":
                self.update_item(
                    table_name,
                    key,
                    update_expression=op["UpdateExpression"],
                    condition_expression=condition_expression,
                    expression_attribute_names=expression_attribute_names,
                    expression_attribute_values=expression_attribute_values,
                )
            errors.append((None, None, None))
        except (MultipleTransactionsException, MockValidationException):
            undo.roll_back(self)
            raise
        except ConditionalCheckFailed as e:
            errors.append(("ConditionalCheckFailed", str(e.message), original_item))  # type: ignore[arg-type]
        except Exception as e:
            errors.append((type(e).__name__, str(e), original_item))  # type: ignore[arg-type]
    if any(code is not None for code, _, _ in errors):
        undo.roll_back(self)
        raise TransactionCanceledException(errors)


_installed = False
#: moto's own methods, as they were before `install` (the tests compare answers with and without)
ORIGINALS: dict[tuple[type, str], Any] = {}


def install() -> None:
    """Once per process (the caller has checked the moto version)."""
    global _installed
    if _installed:
        return
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import Table

    for cls, name in (
        (Table, "query"),
        (Table, "all_items"),
        (Table, "put_item"),
        (Table, "delete_item"),
        (DynamoDBBackend, "update_item"),
        (DynamoDBBackend, "transact_write_items"),
    ):
        ORIGINALS[(cls, name)] = getattr(cls, name)

    Table.query = narrowed_query(Table.query)  # type: ignore[method-assign]
    Table.all_items = narrowed_all_items(Table.all_items)  # type: ignore[method-assign,assignment]
    Table.put_item = indexed_put(Table.put_item)  # type: ignore[method-assign]
    Table.delete_item = indexed_delete(Table.delete_item)  # type: ignore[method-assign]
    DynamoDBBackend.update_item = indexed_update(DynamoDBBackend.update_item)  # type: ignore[method-assign]
    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    _installed = True
