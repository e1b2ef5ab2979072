"""The moto server in a process of its own (`make run`, the benches): the same atomic server, reached over
HTTP, reset over its API (no in-place emptying: its backends are not this process's), and gone on stop."""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest

from chalicelib.local.moto_server import MotoServer


@pytest.fixture
def child() -> Iterator[MotoServer]:
    saved_env = dict(os.environ)  # start() points this process's SDKs at the child
    server = MotoServer(separate_process=True).start()
    try:
        yield server
    finally:
        server.stop()
        os.environ.clear()
        os.environ.update(saved_env)


def _table(server: MotoServer) -> object:
    dynamodb = boto3.resource("dynamodb", endpoint_url=server.url, region_name=server.region)
    return dynamodb.create_table(
        TableName="counters",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )


def test_a_child_process_serves_atomic_writes_and_resets_over_http(child: MotoServer) -> None:
    assert child.running and child.footprint() is None  # nothing to empty in place from here
    table = _table(child)
    table.put_item(Item={"id": "c", "n": 0})

    def claim(i: int) -> bool:  # conditional writes racing on the server's threads: one winner per value
        client = boto3.client("dynamodb", endpoint_url=child.url, region_name=child.region)
        try:
            client.update_item(
                TableName="counters",
                Key={"id": {"S": "c"}},
                UpdateExpression="SET n = :next",
                ConditionExpression="n = :zero",
                ExpressionAttributeValues={":next": {"N": str(i + 1)}, ":zero": {"N": "0"}},
            )
        except client.exceptions.ConditionalCheckFailedException:
            return False
        return True

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(claim, range(16))) == 1

    child.reset()
    client = boto3.client("dynamodb", endpoint_url=child.url, region_name=child.region)
    assert client.list_tables()["TableNames"] == []


def test_stop_ends_the_child_process(child: MotoServer) -> None:
    process = child._process
    assert process is not None and process.poll() is None
    child.stop()
    assert process.poll() is not None and not child.running


def test_the_child_stops_when_its_parent_is_gone() -> None:
    """A parent killed outright never calls stop(): the child sees its stdin close and exits."""
    import subprocess
    import sys
    import time

    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from chalicelib.local.moto_server import MotoServer; import time; "
            "s = MotoServer(separate_process=True).start(); print(s._process.pid, flush=True); time.sleep(600)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert parent.stdout is not None
    child_pid = int(parent.stdout.readline())
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 20
    while _alive(child_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child_pid)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"  # a zombie has exited (init reaps it)
    except FileNotFoundError:
        return False
