"""Durable tasks in DynamoDB (with a TTL once finished)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from pynamodb.exceptions import (
    DoesNotExist,
    UpdateError,
)

from chalicelib.adapters.dynamo.tables import Models, _condition_failed
from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.types import (
    Task,
    TaskKind,
    TaskStatus,
)

TASK_TTL_SECONDS = 30 * 24 * 3600


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


class DynamoTaskRepo:
    def __init__(self, models: Models):
        self.model = models.task

    def put(self, task: Task) -> None:
        self.model(
            task.id,
            tenant_id=task.tenant_id,
            done=task.done,
            body=task_to_body(task),
            expires_at=int(time.time()) + TASK_TTL_SECONDS,
        ).save(condition=self.model.id.does_not_exist())

    def get(self, task_id: str) -> Task | None:
        try:
            return task_from_body(self.model.get(task_id, consistent_read=True).body)
        except DoesNotExist:
            return None

    def save_progress(self, task: Task) -> bool:
        m = self.model
        try:
            m(task.id).update(
                actions=[m.done.set(task.done), m.body.set(task_to_body(task))],
                condition=m.id.exists() & (m.done <= task.done),
            )
        except UpdateError as error:
            if _condition_failed(error):
                return False
            raise
        return True


# ---------------------------------------------------------------- graph
