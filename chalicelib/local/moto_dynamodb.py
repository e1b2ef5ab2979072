"""moto's DynamoDB at a cost that does not grow with the table (issue 27): private internals of moto, applied
only through `moto_patches.speed_up_moto` on the moto version it pins.

moto 5.2.5 answers every `Query` by sorting the whole table (`Table.all_items`) and then keeping the
partition's items (or, on an index, the items whose index keys match), and copies every table a
`TransactWriteItems` names before it starts, to roll back. With 70,000 items that is most of the local
stack's CPU, and it grows with everything ever stored. Here:

- a table's items live in a file with a bounded number in memory (`moto_items`);
- a Query on the table reads only its partition, and a Query on a secondary index only the items whose
  index hash key matches (the file keeps those keys per index, built on the index's first Query). moto's
  own query then runs on exactly the items its filter would have kept, in the order its sort gives them,
  so ordering, pagination, filters, projections and counts are moto's (tests compare the two);
- a Query on a secondary index whose keys are strings reads the index's rows in moto's order from its
  ExclusiveStartKey and stops after the page (`paged_index_query`: moto's loop over a lazy, ordered
  sequence), so it costs the page, not the items under the key;
- a Scan of a table whose keys are strings reads the file in moto's order from its ExclusiveStartKey and
  stops where moto's page stops, instead of sorting the whole table for every page;
- a transaction saves, before each of its writes, the one item the write touches, and a rollback puts back
  those items instead of whole-table copies.
"""

from __future__ import annotations

import contextlib
import copy
import threading
from collections.abc import Callable, Iterable
from typing import Any

from chalicelib.local.moto_items import IndexShape, SpilledItems, key_bytes

PrimaryKey = tuple[Any, Any]  # (hash DynamoType, range DynamoType | None)

_narrowed = threading.local()


def _table_order(item: Any) -> Any:
    """moto's `Table.all_items` sort key, so the candidates come in the order moto would list them."""
    return (item.hash_key, item.range_key) if item.range_key else item.hash_key


def _current(table: Any, pk: PrimaryKey) -> Any | None:
    hash_value, range_value = pk
    if table.range_key_attr:
        partition = table.items.get(hash_value)
        return partition.get(range_value) if partition is not None else None
    return table.items.get(hash_value)


#: called with (table, primary key) after every write of an item (the snapshot's change log listens)
WRITE_LISTENERS: list[Callable[[Any, PrimaryKey], None]] = []


def written(table: Any, pk: PrimaryKey) -> None:
    if isinstance(table.items, SpilledItems):
        table.items.mark_written(*pk)
    for listener in WRITE_LISTENERS:
        listener(table, pk)


def forget_index_maps(table: Any) -> None:
    """After a change not made item by item (a table emptied): the index keys are built again on the next
    Query."""
    if isinstance(table.items, SpilledItems):
        table.items.forget_index()


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
    shape = _index_shape(table, index)
    hash_attrs = shape[0]
    if not hash_attrs or any(name not in conditions for name in hash_attrs):
        return None
    if not isinstance(table.items, SpilledItems):
        return None
    found = table.items.index_matches(index.name, shape, tuple(conditions[name] for name in hash_attrs))
    return sorted(found, key=_table_order)


def _index_shape(table: Any, index: Any) -> IndexShape:
    """An index's hash key attributes and the attribute moto sorts its items by first (its range key; without
    one, the table's range key on a GSI, else the table's hash key: moto's `_generate_attr_to_sort_by`)."""
    hash_attrs = tuple(k["AttributeName"] for k in index.schema if k["KeyType"] == "HASH")
    ranges = [k["AttributeName"] for k in index.schema if k["KeyType"] == "RANGE"]
    if len(ranges) > 1:
        return hash_attrs, None
    if ranges:
        return hash_attrs, ranges[0]
    if index in (table.global_indexes or []) and table.range_key_attr:
        return hash_attrs, table.range_key_attr
    return hash_attrs, table.hash_key_attr


def _attribute_type(table: Any, name: str | None) -> str | None:
    return next((a["AttributeType"] for a in table.attr if a["AttributeName"] == name), None)


def paged_index_query(
    table: Any,
    index_name: str,
    range_comparison: Any,
    range_objs: Any,
    limit: Any,
    exclusive_start_key: dict[str, Any] | None,
    scan_index_forward: Any,
    projection_expressions: Any,
    consistent_read: Any = False,
    filter_expression: Any = None,
    hash_key_conditions: Any = None,
    range_key_conditions: Any = None,
    **filter_kwargs: Any,
) -> tuple[list[Any], int, dict[str, Any] | None] | None:
    """moto's Query on a secondary index with its cost following the page, not the items under the key: the
    index's rows in the file come in moto's sort order from the ExclusiveStartKey on, and the loop below is
    moto's (limit, 1 MB, range condition, then the index's projection, the filter, the projection).
    None: a case this does not cover (keys that are not strings, several range attributes, the old
    KeyConditions filters, anything moto refuses): moto's own query answers it."""
    import copy as copying

    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import RESULT_SIZE_LIMIT

    items = table.items
    index = next((i for i in table.all_indexes() if i.name == index_name), None)
    if not isinstance(items, SpilledItems) or index is None or filter_kwargs:
        return None
    if consistent_read and index in (table.global_indexes or []):
        return None  # moto refuses it
    hash_attrs, sort_attr = _index_shape(table, index)
    conditions = dict(hash_key_conditions or [])
    has_range_key = any(k["KeyType"] == "RANGE" for k in index.schema)
    if (
        sort_attr is None
        or not hash_attrs
        or any(name not in conditions for name in hash_attrs)
        or len(range_key_conditions or []) > 1
        or (range_comparison and not has_range_key)
        or table.hash_key_type != "S"
        or (table.range_key_attr and table.range_key_type != "S")
        or _attribute_type(table, sort_attr) != "S"
    ):
        return None
    after = None
    if exclusive_start_key:
        names = [sort_attr, table.hash_key_attr] + ([table.range_key_attr] if table.range_key_attr else [])
        if any(name not in exclusive_start_key for name in names):
            return None
        after = (
            key_bytes(DynamoType(exclusive_start_key[sort_attr])),
            key_bytes(DynamoType(exclusive_start_key[table.hash_key_attr])),
            key_bytes(DynamoType(exclusive_start_key[table.range_key_attr])) if table.range_key_attr else b"",
        )
    compared = range_key_conditions[-1][0] if range_key_conditions else sort_attr
    values = tuple(conditions[name] for name in hash_attrs)
    results: list[Any] = []
    result_size = scanned_count = 0
    last_evaluated_key = None
    batch = min(100, limit + 1) if limit else 100  # a page and the item that says there is more
    ordered = items.index_ordered(
        index_name, (hash_attrs, sort_attr), values, after, scan_index_forward, batch
    )
    for item in ordered:
        if len(results) == limit or result_size + item.size() > RESULT_SIZE_LIMIT:
            last_evaluated_key = table._get_last_evaluated_key(results[-1], index_name)
            break
        if range_comparison:
            value = item.attrs.get(compared)
            if not (value and value.compare(range_comparison, range_objs)):
                continue
        results.append(item)
        result_size += item.size()
        scanned_count += 1
    results = [index.project(r) for r in copying.deepcopy(results)]
    if filter_expression is not None:
        results = [r for r in results if filter_expression.expr(r)]
    if projection_expressions:
        results = [r.project(projection_expressions) for r in results]
    return results, scanned_count, last_evaluated_key


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
        if index_name:
            answer = paged_index_query(
                self,
                index_name,
                range_comparison,
                range_objs,
                limit,
                exclusive_start_key,
                scan_index_forward,
                projection_expressions,
                *args,
                **kwargs,
            )
            if answer is not None:
                return answer
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


def narrowed_all_items(all_items: Callable[[Any], list[Any]]) -> Callable[[Any], Iterable[Any]]:
    def all_or_narrowed(self: Any) -> Iterable[Any]:
        if getattr(_narrowed, "table", None) is self:
            return list(_narrowed.items)
        spilled = self.items
        if getattr(_scanned, "table", None) is self and isinstance(spilled, SpilledItems):
            return spilled.ordered_from(*_scanned.start)
        return all_items(self)

    return all_or_narrowed


_scanned = threading.local()


def _start_key(table: Any, exclusive_start_key: dict[str, Any] | None) -> tuple[bytes, bytes] | None:
    """Where moto's Scan would start, as the file's keys; None: the table's keys are not strings."""
    if table.hash_key_type != "S" or (table.range_key_attr and table.range_key_type != "S"):
        return None
    if not exclusive_start_key:
        return b"", b""
    from moto.dynamodb.models.dynamo_type import DynamoType

    hash_value = exclusive_start_key.get(table.hash_key_attr)
    range_value = exclusive_start_key.get(table.range_key_attr) if table.range_key_attr else None
    if hash_value is None or (table.range_key_attr and range_value is None):
        return None  # moto says what is wrong with it
    return (
        key_bytes(DynamoType(hash_value)),
        key_bytes(DynamoType(range_value)) if range_value is not None else b"",
    )


def paged_scan(scan: Callable[..., Any]) -> Callable[..., Any]:
    """moto's Scan walks the table in its sorted order and stops after a page: given the items lazily in that
    order from the ExclusiveStartKey on, a page costs its own size. Strings only: the file's byte order is
    moto's order for them (an index or a table keyed by numbers goes moto's way)."""

    def scan_a_page(
        self: Any,
        filters: Any,
        limit: Any,
        exclusive_start_key: Any,
        filter_expression: Any = None,
        index_name: str | None = None,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        start = None
        if not index_name and isinstance(self.items, SpilledItems):
            start = _start_key(self, exclusive_start_key)
        if start is not None:
            _scanned.table, _scanned.start = self, start
        try:
            return scan(
                self, filters, limit, exclusive_start_key, filter_expression, index_name, *args, **kwargs
            )
        finally:
            _scanned.table, _scanned.start = None, None

    return scan_a_page


def spilled_items(init: Callable[..., None]) -> Callable[..., None]:
    def init_then_spill(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.items = SpilledItems(ranged=self.range_key_attr is not None)

    return init_then_spill


def counted_len(length: Callable[[Any], int]) -> Callable[[Any], int]:
    """DescribeTable's ItemCount: a count in the file, not every item read."""

    def item_count(self: Any) -> int:
        if isinstance(self.items, SpilledItems):
            return self.items.count()
        return length(self)

    return item_count


def marks_updated(update_item: Callable[..., Any]) -> Callable[..., Any]:
    """moto's UpdateItem changes the stored object in place: the file must write it again. Kept under moto's
    own method too (the tests put moto's methods back around this)."""

    def update_and_mark(self: Any, table_name: str, key: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return update_item(self, table_name, key, *args, **kwargs)
        finally:
            table = self.tables.get(table_name)
            if table is not None and isinstance(table.items, SpilledItems) and isinstance(key, dict):
                from moto.dynamodb.exceptions import MockValidationException

                with contextlib.suppress(MockValidationException):  # a key moto refused: nothing written
                    table.items.mark_written(*self.get_keys_value(table, key))

    return update_and_mark


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

    # the items' home first, below what the tests put back as "moto's own methods"
    Table.__init__ = spilled_items(Table.__init__)  # type: ignore[method-assign]
    Table.__len__ = counted_len(Table.__len__)  # type: ignore[method-assign]
    DynamoDBBackend.update_item = marks_updated(DynamoDBBackend.update_item)  # type: ignore[method-assign]
    for cls, name in (
        (Table, "query"),
        (Table, "scan"),
        (Table, "all_items"),
        (Table, "put_item"),
        (Table, "delete_item"),
        (DynamoDBBackend, "update_item"),
        (DynamoDBBackend, "transact_write_items"),
    ):
        ORIGINALS[(cls, name)] = getattr(cls, name)

    Table.query = narrowed_query(Table.query)  # type: ignore[method-assign]
    Table.scan = paged_scan(Table.scan)  # type: ignore[method-assign]
    Table.all_items = narrowed_all_items(Table.all_items)  # type: ignore[method-assign,assignment]
    Table.put_item = indexed_put(Table.put_item)  # type: ignore[method-assign]
    Table.delete_item = indexed_delete(Table.delete_item)  # type: ignore[method-assign]
    DynamoDBBackend.update_item = indexed_update(DynamoDBBackend.update_item)  # type: ignore[method-assign]
    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    _installed = True
