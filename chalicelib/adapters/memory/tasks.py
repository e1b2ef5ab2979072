"""Durable tasks, in memory."""

from __future__ import annotations

import copy
import threading

from chalicelib.domain.types import Task
from chalicelib.ports import TaskExists


class MemoryTaskRepo:
    def __init__(self) -> None:
        self._rows: dict[str, Task] = {}
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
            return True
