"""The WebhookRepo contract of the delivery lanes' score (stages/webhooks.py `failure_score`: one more per
failed or slow try counted, up to the cap; one less per delivered try, never below 0; written only when it
changes), run on the in-memory fake (tests/service/test_webhook_lanes.py) and on DynamoDB through moto
(tests/e2e/test_webhook_lanes_dynamo.py). Each test uses fresh ids."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from chalicelib.ports import WebhookRepo

from .webhook_repo_contract import make_hook, read_back


def _score(hooks: WebhookRepo, kb_id: str, hook_id: str) -> int:
    stored = hooks.get(kb_id, hook_id)
    assert stored is not None
    return stored.failure_score


class WebhookLaneContract:
    @pytest.fixture
    def hooks(self) -> WebhookRepo:
        raise NotImplementedError

    @pytest.fixture
    def kb_id(self) -> str:
        return f"kb-{uuid.uuid4()}"

    def test_failures_raise_the_score_up_to_the_cap_and_delivered_tries_lower_it_to_zero(
        self, hooks: WebhookRepo, kb_id: str
    ) -> None:
        hook = make_hook(kb_id)
        hooks.put(hook)
        for _ in range(4):
            hooks.count_failure(kb_id, hook.id, 100, 1000, score_cap=3)
        assert _score(hooks, kb_id, hook.id) == 3  # at the cap; the failures still counted
        stored = hooks.get(kb_id, hook.id)
        assert stored is not None and stored.failures_in_a_row == 4
        hooks.clear_failures(kb_id, hook.id)
        assert _score(hooks, kb_id, hook.id) == 2  # one less, while the breaker is cleared
        hooks.clear_failures(kb_id, hook.id)  # nothing of the breaker left: the score alone comes down
        hooks.clear_failures(kb_id, hook.id)
        assert _score(hooks, kb_id, hook.id) == 0
        assert hooks.clear_failures(kb_id, hook.id) is False
        assert _score(hooks, kb_id, hook.id) == 0  # never below 0

    def test_a_healthy_webhooks_delivered_try_changes_nothing(self, hooks: WebhookRepo, kb_id: str) -> None:
        hook = make_hook(kb_id)
        hooks.put(hook)
        hooks.count_failure(kb_id, hook.id, 100, 1000)
        hooks.clear_failures(kb_id, hook.id)  # back to 0
        healthy = hooks.get(kb_id, hook.id)
        assert healthy is not None and healthy.failure_score == 0
        for _ in range(3):
            assert hooks.clear_failures(kb_id, hook.id) is False
        assert hooks.get(kb_id, hook.id) == healthy

    def test_a_breaker_written_without_a_score_is_cleared_and_the_score_stays_at_zero(
        self, hooks: WebhookRepo, kb_id: str
    ) -> None:
        """A webhook whose breaker was written before the score was kept (or put so)."""
        hook = replace(make_hook(kb_id), failures_in_a_row=2)
        hooks.put(hook)
        assert hooks.clear_failures(kb_id, hook.id) is False
        cleared = hooks.get(kb_id, hook.id)
        assert cleared is not None and (cleared.failures_in_a_row, cleared.failure_score) == (0, 0)

    def test_a_settings_write_keeps_the_score_and_one_that_resumes_clears_it(
        self, hooks: WebhookRepo, kb_id: str
    ) -> None:
        hook = make_hook(kb_id)
        hooks.put(hook)
        for _ in range(4):
            hooks.count_failure(kb_id, hook.id, 100, 1000)
        hook.description = "changed"
        assert hooks.update(hook, read=read_back(hooks, hook)) == "written"
        assert _score(hooks, kb_id, hook.id) == 4
        hook.url = "https://93.184.216.35/fixed"
        assert hooks.update(hook, read=read_back(hooks, hook), resume=True) == "written"
        assert _score(hooks, kb_id, hook.id) == 0
