"""A move from a knowledge base on `lab` (its own S3-compatible endpoint) into one on the stack's bucket
dies at the row's commit, after the copies; the document is deleted through the API before the move comes
back: neither bucket keeps anything of it (tasks/move_across.py records the copies before writing them)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from chalicelib.bootstrap import Services
from chalicelib.local.moto_server import MotoServer
from chalicelib.local.runtime import LocalRuntime
from chalicelib.tasks.move_clone import move_one

from .conftest import Api
from .stored import stored_keys
from .test_storage_backends_api import TEXT, _lab_keys, backends, lab_endpoint  # noqa: F401  (the fixtures)


class Crash(Exception):
    """The delivery ran out of time before the commit."""


def test_a_document_deleted_after_a_move_died_at_its_commit_leaves_nothing_on_either_bucket(
    api: Api,
    runtime: LocalRuntime,
    backends: Services,  # noqa: F811
    lab_endpoint: MotoServer,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lab_kb = api.create_kb(storage_backend="lab")
    plain_kb = api.create_kb()
    created = api.upload(lab_kb["id"], "tides.md", TEXT).json_body["data"]
    runtime.drain(timeout=180)
    assert api.knowledge(created["id"])["parse_status"] == "completed"
    document = f"{created['tenant_id']}/{created['id']}/"
    on_lab = _lab_keys(lab_endpoint, document)
    assert f"{document}parsed/attempt-1.md" in on_lab

    started = api.post(
        "/knowledge/move",
        {"source_kb_id": lab_kb["id"], "target_kb_id": plain_kb["id"], "ids": [created["id"]]},
    )
    assert started.status_code == 202, started.json_body
    sqs = boto3.client("sqs")
    queue = sqs.get_queue_url(QueueName="weknora-lifecycle")["QueueUrl"]
    [message] = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10)["Messages"]
    sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])  # back after the delete
    task = backends.tasks.get(started.json_body["data"]["task_id"])
    assert task is not None
    real = backends.knowledge.update_fields

    def dies_at_commit(knowledge_id: str, fields: dict[str, Any], **kwargs: Any) -> Any:
        if "storage_backend" in fields:
            raise Crash
        return real(knowledge_id, fields, **kwargs)

    monkeypatch.setattr(backends.knowledge, "update_fields", dies_at_commit)
    with pytest.raises(Crash):
        move_one(backends, task, created["id"])  # the task's first delivery
    monkeypatch.undo()
    assert stored_keys(backends.inbox, document) == on_lab  # copied to the stack's bucket, named by no row

    deleted = api.client.http.delete(f"/api/v1/knowledge/{created['id']}", headers={"X-API-Key": api.api_key})
    assert deleted.status_code in (200, 202)
    runtime.drain(timeout=180)  # the delete
    assert backends.knowledge.get(created["id"]) is None
    sqs.send_message(QueueUrl=queue, MessageBody=message["Body"])  # the move's message comes back
    runtime.drain(timeout=180)
    done = api.get(f"/tasks/{task.id}").json_body["data"]
    assert done["status"] != "running" and done["failed"] == 1, done
    assert _lab_keys(lab_endpoint, document) == []
    assert stored_keys(backends.inbox, document) == []
    assert stored_keys(backends.inbox, f"move-across/{created['id']}") == []
