"""Durable tasks in DynamoDB (with a TTL once finished).

A task's item ids are paged: the record keeps the last, unfilled page and the keys of the full pages of
ITEMS_PER_PAGE ids, each an item of its own (`<task id>#items#<n>#<digest of its ids>`, written once). A
whole-knowledge-base task (a delete, a clone, a re-embed of thousands of documents) had outgrown DynamoDB's
400 KB item, and every save of its progress rewrote the whole list. Items are only ever appended, so a full
page never changes.

While a task is queued or running its record carries `open_shard` (one of OPEN_SHARDS, from its id) and
`wait_from` (its last save, or housekeeping's last re-send), so the sparse `open-index` lists the open
tasks by how long they have waited; a finished task, and a page, is not in it. A re-send restarts the wait
only: the task's own updated_at (in its body) stays its progress. Its `status` is kept beside the body too,
for the condition of every save: a task that ended is never written over."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from pynamodb.exceptions import (
    DoesNotExist,
    PutError,
    UpdateError,
)

from chalicelib.adapters.dynamo.tables import Models, _condition_failed
from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.types import (
    OPEN_TASK_STATUSES,
    Task,
    TaskKind,
    TaskStatus,
)
from chalicelib.ports import TaskExists

TASK_TTL_SECONDS = 30 * 24 * 3600
#: ids per page: ids are at most ~150 bytes (a prefix and a uuid), so a page stays far under 400 KB
ITEMS_PER_PAGE = 1000
#: the open index's partitions: every open task's save writes it, spread over a few keys
OPEN_SHARDS = 4
#: in the key of a page of a task's ids (`_pages`)
ITEM_PAGE_MARK = "#items#"


def open_shard(task: Task) -> str | None:
    """The task's key in the open index while it is queued or running; None (no entry) once finished."""
    if task.status not in OPEN_TASK_STATUSES:
        return None
    return _shard_of(task.id)


def _shard_of(task_id: str) -> str:
    return f"open#{int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16) % OPEN_SHARDS}"


def task_to_body(task: Task) -> dict[str, Any]:
    body = asdict(task)
    body["created_at"] = to_iso(task.created_at)
    body["updated_at"] = to_iso(task.updated_at)
    return body


def task_from_body(body: Mapping[str, Any]) -> Task:
    data = dict(body)
    data["kind"] = TaskKind(data["kind"])
    data["status"] = TaskStatus(data["status"])
    data["created_at"] = from_iso(data["created_at"])
    data["updated_at"] = from_iso(data["updated_at"])
    return Task(**data)


def _pages(task: Task) -> list[tuple[str, list[str]]]:
    """The task's full pages of ids, each under a key derived from its content: a worker behind another
    (a redelivery racing the first run) that pages its ids differently writes other pages, never over the
    ones the record names."""
    full = len(task.items) // ITEMS_PER_PAGE
    pages = []
    for page in range(full):
        ids = task.items[page * ITEMS_PER_PAGE : (page + 1) * ITEMS_PER_PAGE]
        digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:24]
        pages.append((f"{task.id}{ITEM_PAGE_MARK}{page}#{digest}", ids))
    return pages


class DynamoTaskRepo:
    def __init__(self, models: Models):
        self.model = models.task
        # pages this container knows are written (read or saved): a miss writes one again, which only costs
        # a write, since a page's key names its content
        self._written: set[str] = set()

    def _save_pages(self, task: Task) -> dict[str, Any]:
        """Writes the full pages not known to be written yet (before the record, so a record never names a
        page that is not there) and answers the record's body: the unfilled page's ids, the full pages' keys."""
        pages = _pages(task)
        expires_at = int(time.time()) + TASK_TTL_SECONDS
        for key, ids in pages:
            if key not in self._written:
                self.model(key, tenant_id=task.tenant_id, body={"items": ids}, expires_at=expires_at).save()
                self._written.add(key)
        body = task_to_body(task)
        body["items"] = task.items[len(pages) * ITEMS_PER_PAGE :]
        body["item_pages"] = [key for key, _ in pages]
        return body

    def put(self, task: Task) -> None:
        row = self.model(
            task.id,
            tenant_id=task.tenant_id,
            done=task.done,
            body=self._save_pages(task),
            status=task.status.value,
            expires_at=int(time.time()) + TASK_TTL_SECONDS,
            open_shard=open_shard(task),
            wait_from=to_iso(task.updated_at) if open_shard(task) else None,
        )
        try:
            row.save(condition=self.model.id.does_not_exist())
        except PutError as error:
            if _condition_failed(error):
                raise TaskExists(task.id) from error
            raise

    def get(self, task_id: str) -> Task | None:
        try:
            row = self.model.get(task_id, consistent_read=True)
        except DoesNotExist:
            return None
        body = dict(row.body)
        keys = [str(key) for key in body.pop("item_pages", [])]
        if keys:
            found = {item.id: item.body["items"] for item in self.model.batch_get(keys, consistent_read=True)}
            body["items"] = [*(i for key in keys for i in found[key]), *body["items"]]
            self._written.update(keys)
        return task_from_body(body)

    def save_progress(self, task: Task, *, only_from: frozenset[TaskStatus] = OPEN_TASK_STATUSES) -> bool:
        m = self.model
        body = self._save_pages(task)
        shard = open_shard(task)
        # a late delivery ─ the task finished, failed or given up meanwhile: its status is not in `only_from`,
        # nothing is written over it. An item saved before `status` was kept beside the body has none (its
        # status is inside the JSON body): taken as open, as every save did, until this save writes it.
        still = m.status.is_in(*sorted(s.value for s in only_from)) | m.status.does_not_exist()
        try:
            m(task.id).update(
                actions=[
                    m.done.set(task.done),
                    m.body.set(body),
                    m.status.set(task.status.value),
                    m.open_shard.set(shard) if shard else m.open_shard.remove(),
                    m.wait_from.set(to_iso(task.updated_at)) if shard else m.wait_from.remove(),
                    m.resends.remove(),  # progress: housekeeping counts its re-sends from here
                ],
                condition=m.id.exists() & (m.done <= task.done) & still,
            )
        except UpdateError as error:
            if _condition_failed(error):
                return False
            raise
        return True

    def stale_open(self, cutoff_iso: str, limit: int) -> list[Task]:
        found: list[tuple[str, str]] = []
        for shard in range(OPEN_SHARDS):
            query = self.model.open_index.query(
                f"open#{shard}", self.model.wait_from < cutoff_iso, limit=limit
            )
            found += [(str(key.wait_from), str(key.id)) for key in query]
        tasks = [self.get(task_id) for _, task_id in sorted(found)[:limit]]
        # the index lags its table: a task saved since it was read is not stale
        return [
            task
            for task in tasks
            if task is not None and task.status in OPEN_TASK_STATUSES and to_iso(task.updated_at) < cutoff_iso
        ]

    def claim_stale(self, task_id: str, cutoff_iso: str, now_iso: str) -> int | None:
        m = self.model
        row = m(task_id)
        try:
            row.update(
                actions=[m.wait_from.set(now_iso), m.resends.add(1)],
                condition=m.open_shard.exists() & (m.wait_from < cutoff_iso),
            )
        except UpdateError as error:
            if _condition_failed(error):
                return None
            raise
        return int(row.resends)

    def backfill_keys(self, after: str | None, page_items: int) -> tuple[int, str | None]:
        """One Scan request: the items without `status` (written before it was kept beside the body; a page
        of ids has none either and is passed over). Each task gets its body's status and, while open and
        not in the open index (written before it), `open_shard` and `wait_from` (its last progress, so
        housekeeping re-sends it once that is older than its threshold), on the item as read: a save
        (which writes `status`) or any change of its body since leaves it be."""
        m = self.model
        scan = m.scan(
            filter_condition=m.status.does_not_exist(),
            last_evaluated_key={"id": {"S": after}} if after else None,
            page_size=page_items,
        )
        pages = scan.page_iter
        page = next(pages)  # one request: the caller bounds what a sweep reads
        found = 0
        for raw in page["Items"]:
            item = m.from_raw_data(raw)
            if ITEM_PAGE_MARK in item.id or "status" not in item.body:
                continue
            found += 1
            status = TaskStatus(item.body["status"])
            actions: list[Any] = [m.status.set(status.value)]
            condition = m.status.does_not_exist() & (m.body == item.body)
            if status in OPEN_TASK_STATUSES and item.open_shard is None:
                actions += [
                    m.open_shard.set(_shard_of(item.id)),
                    m.wait_from.set(str(item.body["updated_at"])),
                ]
                condition &= m.open_shard.does_not_exist()
            try:
                m(item.id).update(actions=actions, condition=condition)
            except UpdateError as error:
                if not _condition_failed(error):
                    raise
        last = pages.last_evaluated_key
        return found, (str(last["id"]["S"]) if last else None)


# ---------------------------------------------------------------- graph
