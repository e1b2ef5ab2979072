"""Issue 27: the local emulator's per-call cost as its tables grow, ours against moto as it ships.

A table shaped like the chunks table (partition = document, sort = chunk, a GSI by knowledge base) grows to
each of `--sizes` items; at each size the median CPU time (this process: client and server thread) of a
DynamoDB call through the moto server (HTTP,
boto3, as the stack calls it) is taken with the local stack's patches (`moto_dynamodb`) and with moto's
own methods put back, in the same process and run:

- Query of one document's chunks (a partition of ~100 items), Query on the GSI (one KB's documents),
- a Scan page (Limit 100) from an ExclusiveStartKey in the table's middle,
- GetItem, UpdateItem, a TransactWriteItems of two items;

then the snapshot: one save after 200 changed items (incremental, what `up` does every interval) against a
full save (every table read, what it did before), at the same size; and the process's resident memory and
the size of moto's item file (`moto_items`) at each size.

Last, memory per item (`--memory-items`, 0: skipped): the same items put into a table as the stack keeps it
(a file, at most `LIVE_ITEMS` as objects) and into one as moto ships it (every item a Python object), in
this process, each measured as the growth of the interpreter's allocations (tracemalloc) after the fill.

    .venv/bin/python bench/bench_emulator.py [--sizes 2000,10000,40000] [--calls 15] [--memory-items 50000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PER_DOCUMENT = 100
TABLE = "bench-chunks"


def _median_ms(call: Callable[[int], Any], calls: int) -> float:
    """Median CPU milliseconds of this process (the server is a thread of it, the client too) per call: on
    a shared machine, wall time follows the other sessions' load; CPU time follows the work."""
    times = []
    for i in range(calls):
        started = time.process_time()
        call(i)
        times.append(time.process_time() - started)
    return round(statistics.median(times) * 1000, 2)


def _fill(backend: Any, start: int, end: int, table: str = TABLE) -> None:
    """Items straight into moto's backend (the same objects the server answers from): fast to load."""
    from chalicelib.local import moto_items

    for n in range(start, end):
        if n % 1000 == 0:
            moto_items.end_of_request()  # as the server does after every request
        document, chunk = divmod(n, PER_DOCUMENT)
        backend.put_item(
            table,
            {
                "knowledge_id": {"S": f"doc-{document:06d}"},
                "chunk_id": {"S": f"chunk-{chunk:04d}"},
                "kb_id": {"S": f"kb-{document % 50}"},
                "seq": {"N": str(chunk)},
                "content": {"S": f"chunk {chunk} of document {document}: " + "lorem ipsum " * 20},
            },
        )


def _calls(ddb: Any, documents: int) -> dict[str, Callable[[int], Any]]:
    def doc(i: int) -> str:
        return f"doc-{(i * 7919) % documents:06d}"

    return {
        "query_partition": lambda i: ddb.query(
            TableName=TABLE,
            KeyConditionExpression="knowledge_id = :k",
            ExpressionAttributeValues={":k": {"S": doc(i)}},
        ),
        "query_gsi": lambda i: ddb.query(
            TableName=TABLE,
            IndexName="by_kb",
            KeyConditionExpression="kb_id = :k",
            ExpressionAttributeValues={":k": {"S": f"kb-{i % 50}"}},
            Limit=20,
        ),
        "get_item": lambda i: ddb.get_item(
            TableName=TABLE, Key={"knowledge_id": {"S": doc(i)}, "chunk_id": {"S": "chunk-0001"}}
        ),
        "update_item": lambda i: ddb.update_item(
            TableName=TABLE,
            Key={"knowledge_id": {"S": doc(i)}, "chunk_id": {"S": "chunk-0002"}},
            UpdateExpression="SET seq = seq + :one",
            ExpressionAttributeValues={":one": {"N": "1"}},
        ),
        "scan_page": lambda i: ddb.scan(
            TableName=TABLE,
            Limit=100,
            ExclusiveStartKey={"knowledge_id": {"S": doc(i)}, "chunk_id": {"S": "chunk-0050"}},
        ),
        "transact_write": lambda i: ddb.transact_write_items(
            TransactItems=[
                {
                    "Update": {
                        "TableName": TABLE,
                        "Key": {"knowledge_id": {"S": doc(i)}, "chunk_id": {"S": "chunk-0003"}},
                        "UpdateExpression": "SET seq = seq + :one",
                        "ExpressionAttributeValues": {":one": {"N": "1"}},
                    }
                },
                {
                    "Put": {
                        "TableName": TABLE,
                        "Item": {
                            "knowledge_id": {"S": doc(i)},
                            "chunk_id": {"S": f"tx-{i}"},
                            "seq": {"N": "0"},
                        },
                    }
                },
            ]
        ),
    }


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _chunk_table(ddb: Any, name: str, *, by_kb: bool) -> None:
    """A chunks-shaped table (knowledge_id, chunk_id), with the `by_kb` index (kb_id, chunk_id) if asked."""
    attributes = [
        {"AttributeName": "knowledge_id", "AttributeType": "S"},
        {"AttributeName": "chunk_id", "AttributeType": "S"},
    ]
    extra: dict[str, Any] = {}
    if by_kb:
        attributes.append({"AttributeName": "kb_id", "AttributeType": "S"})
        extra["GlobalSecondaryIndexes"] = [
            {
                "IndexName": "by_kb",
                "KeySchema": [
                    {"AttributeName": "kb_id", "KeyType": "HASH"},
                    {"AttributeName": "chunk_id", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ]
    ddb.create_table(
        TableName=name,
        KeySchema=[
            {"AttributeName": "knowledge_id", "KeyType": "HASH"},
            {"AttributeName": "chunk_id", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=attributes,
        BillingMode="PAY_PER_REQUEST",
        **extra,
    )


def memory_per_item(ddb: Any, backend: Any, items: int) -> dict[str, Any]:
    """Bytes of Python allocations a stored item holds: the stack's table against moto's plain dict."""
    import gc
    import tracemalloc
    from collections import defaultdict

    from chalicelib.local import moto_items
    from chalicelib.local.moto_changes import change_log

    result: dict[str, Any] = {"items": items}
    for kind in ("ours", "moto"):
        name = f"bench-memory-{kind}"
        _chunk_table(ddb, name, by_kb=False)
        if kind == "moto":
            backend.tables[name].items = defaultdict(dict)  # as moto ships it
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        _fill(backend, 0, items, table=name)
        moto_items.end_of_request()  # what the server does after every request
        change_log.forget()  # what the next snapshot takes (`up` saves every interval)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        result[f"{kind}_held_mb"] = round(held / 2**20, 1)
        result[f"{kind}_bytes_per_item"] = round(held / items)
        ddb.delete_table(TableName=name)
    result["ratio"] = round(result["moto_bytes_per_item"] / max(1, result["ours_bytes_per_item"]), 1)
    return result


def run(sizes: list[int], calls: int, memory_items: int = 50_000) -> dict[str, Any]:
    import boto3
    import pytest
    from moto.dynamodb.models import dynamodb_backends

    from chalicelib.local import moto_dynamodb, moto_items
    from chalicelib.local.moto_server import ACCOUNT_ID, MotoServer
    from chalicelib.local.snapshot import MotoSnapshot

    server = MotoServer(port=0).start()
    ddb = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=server.url)
    _chunk_table(ddb, TABLE, by_kb=True)
    backend = dynamodb_backends[ACCOUNT_ID]["us-east-1"]
    rows = []
    loaded = 0
    state = Path(tempfile.mkdtemp(prefix="bench-emulator-"))
    incremental = MotoSnapshot(state / "incremental", server.url)
    incremental.save()
    try:
        for size in sizes:
            _fill(backend, loaded, size)
            moto_items.end_of_request()
            loaded = size
            documents = size // PER_DOCUMENT
            row: dict[str, Any] = {
                "items": size,
                "rss_mb": _rss_mb(),
                "item_file_mb": round(moto_items.item_file().size_bytes() / 2**20, 1),
                "live_items": len(moto_items.item_file().live),
            }
            for name, call in _calls(ddb, documents).items():
                ours = _median_ms(call, calls)
                with pytest.MonkeyPatch.context() as m:
                    for (cls, attr), original in moto_dynamodb.ORIGINALS.items():
                        m.setattr(cls, attr, original)
                    shipped = _median_ms(call, max(3, calls // 3))
                row[name] = {"ours_cpu_ms": ours, "moto_cpu_ms": shipped, "speedup": round(shipped / ours, 1)}
            for i in range(200):  # an interval's worth of changes
                ddb.update_item(
                    TableName=TABLE,
                    Key={
                        "knowledge_id": {"S": f"doc-{i % documents:06d}"},
                        "chunk_id": {"S": f"chunk-{i:04d}"},
                    },
                    UpdateExpression="SET seq = :s",
                    ExpressionAttributeValues={":s": {"N": str(i)}},
                )
            incremental.save()  # the loading itself (and the shipped runs) saved here, before the timed saves
            started = time.process_time()
            saved = incremental.save()
            row["snapshot_unchanged_cpu_s"] = round(time.process_time() - started, 3)
            for i in range(200):
                ddb.update_item(
                    TableName=TABLE,
                    Key={
                        "knowledge_id": {"S": f"doc-{i % documents:06d}"},
                        "chunk_id": {"S": f"chunk-{i:04d}"},
                    },
                    UpdateExpression="SET seq = :s",
                    ExpressionAttributeValues={":s": {"N": str(i + 1)}},
                )
            started = time.process_time()
            saved = incremental.save()
            row["snapshot_200_changed_cpu_s"] = round(time.process_time() - started, 3)
            assert not saved.full, "the incremental save read every table"
            full = MotoSnapshot(state / f"full-{size}", server.url)
            started = time.process_time()
            full.save()
            row["snapshot_full_cpu_s"] = round(time.process_time() - started, 3)
            print(json.dumps(row), flush=True)
            rows.append(row)
        memory = memory_per_item(ddb, backend, memory_items) if memory_items else None
        print(json.dumps({"memory": memory}), flush=True)
    finally:
        server.stop()
    return {"load": [round(x, 1) for x in os.getloadavg()], "calls": calls, "rows": rows, "memory": memory}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2000,10000,40000")
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument(
        "--memory-items",
        type=int,
        default=50_000,
        help="0: no memory figure (more than LIVE_ITEMS to mean much)",
    )
    args = parser.parse_args()
    result = run([int(s) for s in args.sizes.split(",")], args.calls, args.memory_items)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
