"""The stages' turn books in DynamoDB: one item per stage, changed by a read and a write conditional on the
version read (a conflict is read again and retried)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pynamodb.exceptions import DoesNotExist, PutError

from chalicelib.adapters.dynamo.tables import Models
from chalicelib.ports import TurnBookBusy

R = TypeVar("R")
ATTEMPTS = 20


class DynamoTurnBook:
    def __init__(self, models: Models):
        assert models.turns is not None
        self.model = models.turns

    def change(
        self,
        stage: str,
        change: Callable[[dict[str, Any]], tuple[R, dict[str, Any]]],
        expires_at: int | None = None,
    ) -> R:
        m = self.model
        for attempt in range(ATTEMPTS):
            kept_expiry: int | None = None
            try:
                item = m.get(stage, consistent_read=True)
                book, version = dict(item.tenants or {}), int(item.version or 0)
                kept_expiry = None if item.expires_at is None else int(item.expires_at)
            except DoesNotExist:
                book, version = {}, 0
            result, changed = change(book)
            condition = (m.version == version) if version else m.stage.does_not_exist()
            expiry = kept_expiry if expires_at is None else expires_at
            try:
                m(stage, tenants=changed, version=version + 1, expires_at=expiry).save(condition=condition)
                return result
            except PutError as error:
                if error.cause_response_code != "ConditionalCheckFailedException":
                    raise
            time.sleep(random.uniform(0, 0.01 * (attempt + 1)))  # another worker changed it: read again
        raise TurnBookBusy(f"the turn book of {stage} kept changing under {ATTEMPTS} tries")
