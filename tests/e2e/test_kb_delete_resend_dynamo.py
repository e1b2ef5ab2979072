"""Tasks whose lifecycle message was lost, through the real path (DynamoDB with its sparse `open-index`, SQS,
the housekeeping schedule's handler): the DELETE of a knowledge base repeated answers the same task and sends
it again; housekeeping sends again, once per threshold, every open task of any kind that saved no progress (a
knowledge base's delete, a tag's delete), and fails one sent 3 times without progress."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from chalicelib.adapters.dynamo import tasks as dynamo_tasks
from chalicelib.bootstrap import Services
from chalicelib.domain.clock import to_iso
from chalicelib.domain.types import Task, TaskKind, TaskStatus
from chalicelib.local.runtime import LocalRuntime
from chalicelib.stages.housekeeping import MAX_TASK_RESENDS

from .conftest import V1, Api

MINUTE = timedelta(minutes=1)


def _delete(api: Api, path: str) -> Any:
    return api.client.http.delete(f"{V1}{path}", headers={"X-API-Key": api.api_key})


def _lose_lifecycle_messages() -> None:
    """Every message waiting on the lifecycle queue, taken off it (one PurgeQueue a minute at most)."""
    sqs = boto3.client("sqs")
    url = sqs.get_queue_url(QueueName="weknora-lifecycle")["QueueUrl"]
    while messages := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", []):
        for message in messages:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


class Sweeps:
    """The housekeeping schedule fired by the runtime, with every open task past the threshold."""

    def __init__(self, runtime: LocalRuntime, services: Services) -> None:
        self.runtime, self.services, self.at = runtime, services, datetime.now(UTC)

    def fire(self) -> None:
        settings = self.services.settings
        self.services.settings = replace(settings, stale_after_seconds=-60)
        self.at += timedelta(minutes=6)
        try:
            fired = self.runtime.tick(self.at)
        finally:
            self.services.settings = settings
        assert [f.name for f in fired] == ["housekeeping"] and fired[0].error is None


@pytest.fixture
def sweeps(runtime: LocalRuntime, services: Services) -> Iterator[Sweeps]:
    yield Sweeps(runtime, services)


def test_lost_task_messages_of_two_kinds_are_sent_again_by_housekeeping(
    api: Api, runtime: LocalRuntime, services: Services, sweeps: Sweeps
) -> None:
    repeated, left = api.create_kb(), api.create_kb()
    for kb in (repeated, left):
        assert api.upload(kb["id"], "notes.md", b"# notes\n\nsome text").status_code < 300
    runtime.drain(timeout=120)
    tag = api.post(f"/knowledge-bases/{repeated['id']}/tags", {"name": "red"}).json_body["data"]
    untag = _delete(api, f"/knowledge-bases/{repeated['id']}/tags/{tag['id']}")
    assert untag.status_code == 202
    first = {kb["id"]: _delete(api, f"/knowledge-bases/{kb['id']}") for kb in (repeated, left)}
    assert {r.status_code for r in first.values()} == {202}
    _lose_lifecycle_messages()

    again = _delete(
        api, f"/knowledge-bases/{repeated['id']}"
    )  # was 409 kb_deleting, nothing left to drive it
    assert again.status_code == 202
    assert again.json_body["data"]["task_id"] == first[repeated["id"]].json_body["data"]["task_id"]
    runtime.drain(timeout=120)
    assert api.get(f"/knowledge-bases/{repeated['id']}").status_code == 404
    assert api.get(f"/knowledge-bases/{left['id']}").json_body["error"]["code"] == "kb_deleting"
    untag_id = untag.json_body["data"]["task_id"]
    assert services.tasks.get(untag_id).status == TaskStatus.QUEUED  # type: ignore[union-attr]

    # nobody repeats the others: a threshold later (here: at once) the schedule sends them again
    sweeps.fire()
    runtime.drain(timeout=120)
    assert api.get(f"/knowledge-bases/{left['id']}").status_code == 404
    left_task = services.tasks.get(first[left["id"]].json_body["data"]["task_id"])
    assert left_task is not None and left_task.status == TaskStatus.COMPLETED
    # the tag's delete ran too (its knowledge base's delete took its tag already: nothing left to untag)
    assert services.tasks.get(untag_id).status == TaskStatus.COMPLETED  # type: ignore[union-attr]
    assert services.tasks.stale_open(to_iso(sweeps.at + timedelta(days=1)), 100) == []


def _old_task(services: Services, kind: TaskKind = TaskKind.RETRY_FAILED, **fields: Any) -> Task:
    then = datetime.now(UTC) - timedelta(hours=3)
    task = Task(
        id=f"t-{kind.value}-{then.timestamp()}-{len(fields)}",
        tenant_id="a-tenant",
        kind=kind,
        kb_id="a-kb",
        created_at=then,
        updated_at=then,
        **fields,
    )
    services.tasks.put(task)
    return task


def test_the_open_index_lists_open_tasks_only_and_claims_them_once(
    runtime: LocalRuntime, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dynamo_tasks, "ITEMS_PER_PAGE", 2)  # its full pages are items of their own
    tasks = services.tasks
    paged = _old_task(services, items=[f"k{i}" for i in range(5)])
    finished = _old_task(services, TaskKind.DELETE_TAG, status=TaskStatus.COMPLETED)
    now = to_iso(datetime.now(UTC))
    stale = tasks.stale_open(now, 10)
    assert [t.id for t in stale] == [paged.id] and stale[0].items == paged.items

    assert tasks.claim_stale(paged.id, now, now) == 1
    assert tasks.claim_stale(paged.id, now, now) is None  # a second sweep that read it before the claim
    assert tasks.stale_open(now, 10) == []  # its wait restarted
    later = to_iso(datetime.now(UTC) + timedelta(hours=3))
    (again,) = tasks.stale_open(later, 10)
    # the claim restarted its wait, not its progress (GET /tasks, a re-embed's hold read that)
    assert (
        to_iso(again.updated_at) == to_iso(paged.updated_at)
        and tasks.claim_stale(again.id, later, later) == 2
    )

    # progress: the count starts again; finished: out of the index
    (read,) = tasks.stale_open(to_iso(datetime.now(UTC) + timedelta(hours=6)), 10)
    read.done, read.status, read.updated_at = 1, TaskStatus.RUNNING, datetime.now(UTC)
    assert tasks.save_progress(read)
    soon = to_iso(datetime.now(UTC) + MINUTE)
    (running,) = tasks.stale_open(soon, 10)
    assert running.status == TaskStatus.RUNNING and tasks.claim_stale(running.id, soon, soon) == 1
    running.status = TaskStatus.COMPLETED
    running.updated_at = datetime.now(UTC)
    assert tasks.save_progress(running)
    assert tasks.stale_open(to_iso(datetime.now(UTC) + timedelta(days=1)), 10) == []
    assert tasks.get(finished.id) is not None


def test_a_task_sent_its_most_times_without_progress_is_failed(
    runtime: LocalRuntime, services: Services, sweeps: Sweeps
) -> None:
    task = _old_task(services, TaskKind.DELETE_TAG, params={"tag_id": "a-tag"})
    for _ in range(MAX_TASK_RESENDS):
        sweeps.fire()
        _lose_lifecycle_messages()  # each re-send lost again
    sweeps.fire()
    failed = services.tasks.get(task.id)
    assert failed is not None and failed.status == TaskStatus.FAILED
    assert f"no progress after {MAX_TASK_RESENDS} re-sends" in failed.errors["task"]


def test_a_re_send_restarts_the_wait_and_leaves_the_tasks_progress(
    runtime: LocalRuntime, services: Services, sweeps: Sweeps
) -> None:
    """rev_alo2 1: the claim wrote its time over the task's updated_at (its progress: GET /tasks shows it,
    a re-embed holds its knowledge base by it) in the item the task is read from."""
    task = _old_task(services, TaskKind.DELETE_TAG, params={"tag_id": "a-tag"})
    sweeps.fire()
    _lose_lifecycle_messages()
    resent = services.tasks.get(task.id)
    assert resent is not None and resent.status == TaskStatus.QUEUED
    assert to_iso(resent.updated_at) == to_iso(task.updated_at)
    # its wait restarted: not stale at a cutoff between its progress and the re-send
    assert services.tasks.stale_open(to_iso(datetime.now(UTC) - MINUTE), 10) == []
