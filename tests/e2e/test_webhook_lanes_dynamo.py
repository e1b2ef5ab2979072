"""The delivery lanes' score on the DynamoDB adapter (the webhooks table on moto, provisioned from the
template): up per failure to the cap, down per delivered try to 0, no write for a healthy webhook."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest
from pynamodb.connection.base import Connection
from service.webhook_lane_contract import WebhookLaneContract
from service.webhook_repo_contract import make_hook

from chalicelib.bootstrap import Services
from chalicelib.ports import WebhookRepo


class TestDynamoWebhookLanes(WebhookLaneContract):
    @pytest.fixture
    def hooks(self, module_services: Services) -> WebhookRepo:
        return module_services.webhooks


def test_a_failure_counted_at_the_cap_costs_one_update(
    module_services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A receiver failing most of its tries sits at the cap: its failure is one UpdateItem (it was two, the
    first refused by its `score < cap` condition, and a refused conditional write is billed too; found by a
    review), the caller having read the score at the cap."""
    hooks = module_services.webhooks
    kb_id = f"kb-{uuid.uuid4()}"
    hook = make_hook(kb_id)
    hooks.put(hook)
    for _ in range(10):
        hooks.count_failure(kb_id, hook.id, 100, 1000, score_cap=10)  # at the cap now
    calls: Counter[str] = Counter()
    real = Connection._make_api_call

    def counting(self: Any, operation_name: str, operation_kwargs: dict[str, Any], **kw: Any) -> Any:
        calls[operation_name] += 1
        return real(self, operation_name, operation_kwargs, **kw)

    monkeypatch.setattr(Connection, "_make_api_call", counting)
    counted = hooks.count_failure(kb_id, hook.id, 100, 1000, score_cap=10, score_read=10)
    assert calls["UpdateItem"] == 1
    assert counted.score == 10 and not counted.raised and not counted.paused
    stored = hooks.get(kb_id, hook.id)
    assert stored is not None and stored.failures_in_a_row == 11
