"""Issue 27: moto's memory stays bounded over a long local run, and what the API answers does not change:
a finished execution beyond the most recent few keeps its status and its history (the pipeline counts state
transitions from it) and its name stays taken; a queue remembers recent deleted receipts only."""

from __future__ import annotations

import json
import threading
import time
import uuid
from typing import Any

import boto3
import pytest

from chalicelib.local import moto_bounds
from chalicelib.local.moto_bounds import (
    FinishedExecutions,
    FinishedWorker,
    RecentReceipts,
    forget_finished_threads,
)
from chalicelib.local.moto_server import MotoServer

DEFINITION = json.dumps(
    {
        "StartAt": "First",
        "States": {
            "First": {"Type": "Pass", "Result": {"step": 1}, "Next": "Second"},
            "Second": {"Type": "Pass", "End": True},
        },
    }
)


def test_recent_receipts_forget_the_oldest_beyond_the_limit() -> None:
    receipts = RecentReceipts(limit=3)
    receipts.update(["a", "b", "c"])
    receipts.add("d")
    assert "a" not in receipts and all(h in receipts for h in "bcd") and len(receipts) == 3
    receipts.add("b")  # seen again: the most recent now
    receipts.add("e")
    assert "c" not in receipts and "b" in receipts


def test_a_queue_keeps_a_bounded_record_and_a_second_delete_still_succeeds(moto_server: MotoServer) -> None:
    from moto.sqs.models import sqs_backends

    sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=moto_server.url)
    url = sqs.create_queue(QueueName=f"bounds-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="m")
    handle = sqs.receive_message(QueueUrl=url)["Messages"][0]["ReceiptHandle"]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=handle)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=handle)  # at-least-once consumers delete twice
    queue = sqs_backends["123456789012"]["us-east-1"].queues[url.rsplit("/", 1)[-1]]
    assert isinstance(queue.deleted_messages, RecentReceipts) and handle in queue.deleted_messages
    sqs.delete_queue(QueueUrl=url)


def _finished(sfn: Any, arn: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        described = sfn.describe_execution(executionArn=arn)
        described.pop("ResponseMetadata")
        if described["status"] != "RUNNING":
            return dict(described)
        assert time.monotonic() < deadline, described
        time.sleep(0.1)


def _slimmed(execution: Any) -> None:
    """Waits for `execution` to be slimmed: the hook runs on an execution's thread after its status is set,
    so a later execution can be answered finished before an earlier one's hook has run."""
    deadline = time.monotonic() + 30
    while not isinstance(execution.exec_worker, FinishedWorker):
        assert time.monotonic() < deadline, execution.exec_worker
        time.sleep(0.05)


def _state_machine(moto_server: MotoServer, definition: str) -> tuple[Any, str]:
    """A Step Functions client on the server and a new state machine of `definition` (its ARN)."""
    sfn = boto3.client("stepfunctions", region_name="us-east-1", endpoint_url=moto_server.url)
    machine = sfn.create_state_machine(
        name=f"bounds-{uuid.uuid4().hex[:8]}",
        definition=definition,
        roleArn="arn:aws:iam::123456789012:role/sfn",
    )["stateMachineArn"]
    return sfn, machine


def test_an_older_finished_execution_keeps_what_the_api_answers(
    moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    # a list of its own: executions earlier tests left in the process's list would be slimmed first, on
    # doc-1's thread, after its status is already answered
    monkeypatch.setattr(moto_bounds, "finished_executions", FinishedExecutions(keep_full=2))
    sfn, machine = _state_machine(moto_server, DEFINITION)
    first = sfn.start_execution(stateMachineArn=machine, name="doc-1", input="{}")["executionArn"]
    first_described = _finished(sfn, first)
    history = sfn.get_execution_history(executionArn=first)["events"]
    machine_then = sfn.describe_state_machine_for_execution(executionArn=first)
    machine_then.pop("ResponseMetadata")
    assert sum(e["type"].endswith("StateEntered") for e in history) == 2
    for n in range(2, 6):
        _finished(
            sfn, sfn.start_execution(stateMachineArn=machine, name=f"doc-{n}", input="{}")["executionArn"]
        )

    backend = stepfunctions_parser_backends["123456789012"]["us-east-1"]
    executions = {e.name: e for sm in backend.state_machines if sm.arn == machine for e in sm.executions}
    _slimmed(executions["doc-1"])
    assert not isinstance(executions["doc-5"].exec_worker, FinishedWorker)  # among the most recent
    assert _finished(sfn, first) == first_described
    assert sfn.get_execution_history(executionArn=first)["events"] == history
    machine_now = sfn.describe_state_machine_for_execution(executionArn=first)
    machine_now.pop("ResponseMetadata")
    assert machine_now == machine_then
    assert executions["doc-1"].state_machine is executions["doc-2"].state_machine  # one copy per revision
    with pytest.raises(sfn.exceptions.ExecutionAlreadyExists):  # its name is still taken
        sfn.start_execution(stateMachineArn=machine, name="doc-1", input='{"other": 1}')
    sfn.delete_state_machine(stateMachineArn=machine)


def test_moto_does_not_keep_every_item_it_ever_made(moto_server: MotoServer) -> None:
    """moto tracks every model instance for its dashboard: every item copy a GetItem answered with stayed."""
    from moto.dynamodb.models.dynamo_type import Item
    from moto.s3.models import FakeKey

    ddb = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=moto_server.url)
    name = f"bounds-{uuid.uuid4().hex[:8]}"
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.put_item(TableName=name, Item={"pk": {"S": "a"}, "n": {"N": "0"}})
    tracked = len(Item.instances_tracked)  # type: ignore[attr-defined]
    for _ in range(20):
        assert ddb.get_item(TableName=name, Key={"pk": {"S": "a"}})["Item"]["pk"] == {"S": "a"}
        ddb.update_item(TableName=name, Key={"pk": {"S": "a"}}, UpdateExpression="SET n = n + :one",
                        ExpressionAttributeValues={":one": {"N": "1"}})  # fmt: skip
    assert ddb.get_item(TableName=name, Key={"pk": {"S": "a"}})["Item"]["n"] == {"N": "20"}
    assert len(Item.instances_tracked) == tracked  # type: ignore[attr-defined]
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=moto_server.url)
    s3.create_bucket(Bucket=name)
    before = len(FakeKey.instances_tracked)  # type: ignore[attr-defined]
    s3.put_object(Bucket=name, Key="k", Body=b"x")  # S3 keys stay tracked: moto's reset disposes of them
    assert len(FakeKey.instances_tracked) == before + 1  # type: ignore[attr-defined]
    s3.delete_object(Bucket=name, Key="k")
    s3.delete_bucket(Bucket=name)
    ddb.delete_table(TableName=name)


MAP_DEFINITION = json.dumps(
    {
        "StartAt": "Each",
        "States": {
            "Each": {
                "Type": "Map",
                "MaxConcurrency": 4,
                "ItemsPath": "$.items",
                "ItemProcessor": {
                    "ProcessorConfig": {"Mode": "INLINE"},
                    "StartAt": "One",
                    "States": {"One": {"Type": "Pass", "End": True}},
                },
                "End": True,
            }
        },
    }
)


def test_forgetting_finished_threads_keeps_the_running_ones() -> None:
    release = threading.Event()
    running = threading.Thread(target=release.wait, daemon=True)
    finished = threading.Thread(target=lambda: None)
    running.start()
    finished.start()
    finished.join()
    threads = [finished, running]
    same_list = threads
    forget_finished_threads(threads)
    assert same_list == [running]  # in place: moto's modules all hold this one list
    release.set()
    running.join()


def test_moto_keeps_no_thread_of_a_finished_execution(
    moto_server: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto puts every thread of every execution (the program, each Map worker...) in one list for ever."""
    from moto.stepfunctions.parser.utils import TMP_THREADS

    monkeypatch.setattr(moto_bounds, "finished_executions", FinishedExecutions())  # no earlier backlog
    sfn, machine = _state_machine(moto_server, MAP_DEFINITION)
    made = threading.Thread.__init__
    started = 0

    def counted(self: threading.Thread, *args: Any, **kwargs: Any) -> None:
        nonlocal started
        started += 1
        made(self, *args, **kwargs)

    threading.Thread.__init__ = counted  # type: ignore[method-assign]
    try:
        for n in range(6):
            arn = sfn.start_execution(
                stateMachineArn=machine, name=f"map-{n}", input=json.dumps({"items": [1, 2, 3, 4, 5]})
            )["executionArn"]
            assert _finished(sfn, arn)["status"] == "SUCCEEDED"
    finally:
        threading.Thread.__init__ = made  # type: ignore[method-assign]
    assert started >= 6 * 5  # each execution: its logic and program threads and four Map workers at least
    deadline = time.monotonic() + 30  # the last one's hook runs on its thread after its status is answered
    while len(finished_kept := [t for t in TMP_THREADS if not t.is_alive()]) > started // 6:
        assert time.monotonic() < deadline, len(finished_kept)  # at most what the last one had running
        time.sleep(0.05)
    sfn.delete_state_machine(stateMachineArn=machine)
