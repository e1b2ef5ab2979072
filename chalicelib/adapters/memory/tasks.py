"""Durable tasks, in memory."""

from __future__ import annotations

import copy
import threading

from chalicelib.domain.clock import to_iso
from chalicelib.domain.types import OPEN_TASK_STATUSES, Task, TaskStatus
from chalicelib.ports import TaskExists


class MemoryTaskRepo:
    def __init__(self) -> None:
        self._rows: dict[str, Task] = {}
        #: housekeeping's re-sends since the task's last saved progress (the DynamoDB item's `resends`)
        self._resends: dict[str, int] = {}
        #: housekeeping's last re-send since the task's last save, when its wait restarted (`wait_from`)
        self._claimed_at: dict[str, str] = {}
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

    def save_progress(self, task: Task, *, only_from: frozenset[TaskStatus] = OPEN_TASK_STATUSES) -> bool:
        with self._lock:
            row = self._rows.get(task.id)
            # only forward, and only while the stored task is open (or queued), as the DynamoDB condition
            if row is None or row.done > task.done or row.status not in only_from:
                return False
            self._rows[task.id] = copy.deepcopy(task)
            self._resends.pop(task.id, None)
            self._claimed_at.pop(task.id, None)  # its wait restarts at its save
            return True

    def stale_open(self, cutoff_iso: str, limit: int) -> list[Task]:
        with self._lock:
            stale = [
                (self._wait_from(row), row)
                for row in self._rows.values()
                if row.status in OPEN_TASK_STATUSES and self._wait_from(row) < cutoff_iso
            ]
            stale.sort(key=lambda waiting: (waiting[0], waiting[1].id))
            return [copy.deepcopy(row) for _, row in stale[:limit]]

    def claim_stale(self, task_id: str, cutoff_iso: str, now_iso: str) -> int | None:
        with self._lock:
            row = self._rows.get(task_id)
            if row is None or row.status not in OPEN_TASK_STATUSES:
                return None
            if self._wait_from(row) >= cutoff_iso:  # saved, or claimed, since it was read
                return None
            self._claimed_at[task_id] = now_iso
            self._resends[task_id] = self._resends.get(task_id, 0) + 1
            return self._resends[task_id]

    def backfill_keys(self, after: str | None, page_items: int) -> tuple[int, str | None]:
        """Every task here is listed as it is: nothing written before to key."""
        return 0, None

    def _wait_from(self, row: Task) -> str:
        """Since when the task waits: housekeeping's last re-send, else its last save (its own updated_at)."""
        return self._claimed_at.get(row.id) or to_iso(row.updated_at)
