"""Durable tasks, in memory."""

from __future__ import annotations

import copy
import threading

from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.types import Task, TaskStatus
from chalicelib.ports import TaskExists

OPEN_STATUSES = (TaskStatus.QUEUED, TaskStatus.RUNNING)


class MemoryTaskRepo:
    def __init__(self) -> None:
        self._rows: dict[str, Task] = {}
        #: housekeeping's re-sends since the task's last saved progress (the DynamoDB item's `resends`)
        self._resends: dict[str, int] = {}
        self._lock = threading.Lock()

    def put(self, task: Task) -> None:
        with self._lock:
            if task.id in self._rows:
                raise TaskExists(task.id)
            self._rows[task.id] = copy.deepcopy(task)

    def get(self, task_id: str) -> Task | None:
        with self._lock:
            row = self._rows.get(task_id)
            return copy.deepcopy(row) if row else None

    def save_progress(self, task: Task) -> bool:
        with self._lock:
            row = self._rows.get(task.id)
            if row is None or row.done > task.done:  # only forward, as the DynamoDB condition
                return False
            self._rows[task.id] = copy.deepcopy(task)
            self._resends.pop(task.id, None)
            return True

    def stale_open(self, cutoff_iso: str, limit: int) -> list[Task]:
        with self._lock:
            stale = [
                row
                for row in self._rows.values()
                if row.status in OPEN_STATUSES and to_iso(row.updated_at) < cutoff_iso
            ]
            stale.sort(key=lambda row: (to_iso(row.updated_at), row.id))
            return [copy.deepcopy(row) for row in stale[:limit]]

    def claim_stale(self, task: Task, now_iso: str) -> int | None:
        with self._lock:
            row = self._rows.get(task.id)
            if row is None or row.status not in OPEN_STATUSES:
                return None
            if to_iso(row.updated_at) != to_iso(task.updated_at):  # saved, or claimed, since it was read
                return None
            row.updated_at = from_iso(now_iso)
            self._resends[task.id] = self._resends.get(task.id, 0) + 1
            return self._resends[task.id]
