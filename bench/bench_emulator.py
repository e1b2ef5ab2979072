"""Issue 27: the local emulator's per-call cost as its tables grow, ours against moto as it ships.

A table shaped like the chunks table (partition = document, sort = chunk, a GSI by knowledge base) grows to
each of `--sizes` items; at each size the median CPU time (this process: client and server thread) of a
DynamoDB call through the moto server (HTTP,
boto3, as the stack calls it) is taken with the local stack's patches (`moto_dynamodb`) and with moto's
own methods put back, in the same process and run:

- Query of one document's chunks (a partition of ~100 items), Query on the GSI (one KB's documents),
- GetItem, UpdateItem, a TransactWriteItems of two items;

then the snapshot: one save after 200 changed items (incremental, what `up` does every interval) against a
full save (every table read, what it did before), at the same size.

    .venv/bin/python bench/bench_emulator.py [--sizes 2000,10000,40000] [--calls 15]
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


def _fill(backend: Any, start: int, end: int) -> None:
    """Items straight into moto's backend (the same objects the server answers from): fast to load."""
    for n in range(start, end):
        document, chunk = divmod(n, PER_DOCUMENT)
        backend.put_item(
            TABLE,
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


def run(sizes: list[int], calls: int) -> dict[str, Any]:
    import boto3
    import pytest
    from moto.dynamodb.models import dynamodb_backends

    from chalicelib.local import moto_dynamodb
    from chalicelib.local.moto_server import ACCOUNT_ID, MotoServer
    from chalicelib.local.snapshot import MotoSnapshot

    server = MotoServer(port=0).start()
    ddb = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=server.url)
    ddb.create_table(
        TableName=TABLE,
        KeySchema=[
            {"AttributeName": "knowledge_id", "KeyType": "HASH"},
            {"AttributeName": "chunk_id", "KeyType": "RANGE"},
        ],
        AttributeDefinitions=[
            {"AttributeName": "knowledge_id", "AttributeType": "S"},
            {"AttributeName": "chunk_id", "AttributeType": "S"},
            {"AttributeName": "kb_id", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by_kb",
                "KeySchema": [
                    {"AttributeName": "kb_id", "KeyType": "HASH"},
                    {"AttributeName": "chunk_id", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    backend = dynamodb_backends[ACCOUNT_ID]["us-east-1"]
    rows = []
    loaded = 0
    state = Path(tempfile.mkdtemp(prefix="bench-emulator-"))
    incremental = MotoSnapshot(state / "incremental", server.url)
    incremental.save()
    try:
        for size in sizes:
            _fill(backend, loaded, size)
            loaded = size
            documents = size // PER_DOCUMENT
            row: dict[str, Any] = {"items": size}
            for name, call in _calls(ddb, documents).items():
                ours = _median_ms(call, calls)
                with pytest.MonkeyPatch.context() as m:
                    for (cls, attr), original in moto_dynamodb.ORIGINALS.items():
                        m.setattr(cls, attr, original)
                    shipped = _median_ms(call, max(3, calls // 3))
                moto_dynamodb.forget_index_maps(backend.tables[TABLE])  # writes meanwhile went around them
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
    finally:
        server.stop()
    return {"load": [round(x, 1) for x in os.getloadavg()], "calls": calls, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="2000,10000,40000")
    parser.add_argument("--calls", type=int, default=15)
    args = parser.parse_args()
    result = run([int(s) for s in args.sizes.split(",")], args.calls)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
