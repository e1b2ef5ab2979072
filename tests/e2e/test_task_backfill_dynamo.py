"""Tasks written before the tasks table listed open ones (`open-index`) and kept their status beside the body
(helper alo3, item 3): housekeeping's backfill keys them, so one queued or running at the update whose
message was lost is sent again like any other; the housekeeping side (pages a sweep, passes, the end) is
tests/service/test_task_backfill.py."""

from __future__ import annotations

import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from chalicelib.adapters.dynamo.tasks import ITEMS_PER_PAGE, TASK_TTL_SECONDS, DynamoTaskRepo
from chalicelib.bootstrap import Services
from chalicelib.domain.clock import iso_before, to_iso
from chalicelib.domain.types import Task, TaskKind, TaskStatus
from chalicelib.stages.housekeeping import TASK_BACKFILL_BOOK, sweep

HOURS_AGO = datetime.now(UTC) - timedelta(hours=3)


def _legacy(tasks: DynamoTaskRepo, status: TaskStatus, items: int = 2) -> Task:
    """A task as the adapter wrote it before the open index: no `open_shard`, `wait_from` or `status`."""
    task = Task(
        id=str(uuid.uuid4()),
        tenant_id="t1",
        kind=TaskKind.DELETE_KB,
        kb_id="kb",
        items=[f"k{n}" for n in range(items)],
        status=status,
        updated_at=HOURS_AGO,
    )
    tasks.put(task)  # pages of ids written as before; the record then written again as it was
    stored = tasks.model.get(task.id, consistent_read=True)
    tasks.model(
        task.id,
        tenant_id=task.tenant_id,
        done=0,
        body=stored.body,
        expires_at=int(time.time()) + TASK_TTL_SECONDS,
    ).save()
    return task


def _backfill(tasks: DynamoTaskRepo) -> int:
    found, after = tasks.backfill_keys(None, 1000)
    while after is not None:
        more, after = tasks.backfill_keys(after, 1000)
        found += more
    return found


@pytest.fixture
def tasks(module_services: Services) -> DynamoTaskRepo:
    repo = module_services.tasks
    assert isinstance(repo, DynamoTaskRepo)
    return repo


def test_a_task_open_at_the_update_is_keyed_and_one_that_ended_only_gets_its_status(
    tasks: DynamoTaskRepo,
) -> None:
    running = _legacy(tasks, TaskStatus.RUNNING, items=ITEMS_PER_PAGE + 5)  # a page of ids beside it
    ended = _legacy(tasks, TaskStatus.COMPLETED)
    cutoff = iso_before(3600)
    assert running.id not in [t.id for t in tasks.stale_open(cutoff, 100)]  # not listed: never re-sent

    assert _backfill(tasks) >= 2
    item = tasks.model.get(running.id, consistent_read=True)
    assert (item.status, item.wait_from) == ("running", to_iso(HOURS_AGO)) and item.open_shard
    assert running.id in [t.id for t in tasks.stale_open(cutoff, 100)]
    item = tasks.model.get(ended.id, consistent_read=True)
    assert (item.status, item.open_shard, item.wait_from) == ("completed", None, None)
    stored = tasks.get(running.id)
    assert stored is not None and stored.items == running.items  # its page of ids left as it was
    assert _backfill(tasks) == 0  # none left: a second pass finds nothing to key


def test_a_save_between_the_backfills_read_and_its_write_wins(
    tasks: DynamoTaskRepo, monkeypatch: pytest.MonkeyPatch
) -> None:
    legacy = _legacy(tasks, TaskStatus.RUNNING)
    real, saved = tasks.model.from_raw_data, []

    def read_then_saved(data: Any) -> Any:
        item = real(data)
        if item.id == legacy.id and not saved:  # the task's worker finishes it meanwhile
            saved.append(item.id)
            done = replace(legacy, status=TaskStatus.COMPLETED, done=2, updated_at=datetime.now(UTC))
            assert tasks.save_progress(done)
        return item

    monkeypatch.setattr(tasks.model, "from_raw_data", read_then_saved)
    _backfill(tasks)
    item = tasks.model.get(legacy.id, consistent_read=True)
    assert (item.status, item.open_shard) == ("completed", None)  # not listed open again


def test_housekeeping_sends_again_a_task_whose_message_was_lost_before_the_update(
    module_services: Services, tasks: DynamoTaskRepo
) -> None:
    legacy = _legacy(tasks, TaskStatus.QUEUED)
    module_services.turns.change(TASK_BACKFILL_BOOK, lambda _: (None, {}))  # the backfill not begun
    first = sweep(module_services)
    assert first.tasks_keyed >= 1
    again = sweep(module_services)
    assert legacy.id in first.tasks_resent + again.tasks_resent
