"""The WebhookRepo contract of the delivery breaker (stages/webhooks.py: failures in a row, the pause, one
probe per interval), run on the in-memory fake (tests/service/test_webhook_pause.py) and on DynamoDB through
moto (tests/e2e/test_webhook_pause_dynamo.py). Each test uses fresh ids."""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from chalicelib.ports import WebhookRepo

from .webhook_repo_contract import make_hook, read_back


class WebhookPauseContract:
    @pytest.fixture
    def hooks(self) -> WebhookRepo:
        raise NotImplementedError

    @pytest.fixture
    def kb_id(self) -> str:
        return f"kb-{uuid.uuid4()}"

    def test_failures_in_a_row_pause_the_webhook_once_and_a_delivered_try_resumes_it(
        self, hooks: WebhookRepo, kb_id: str
    ) -> None:
        hook = make_hook(kb_id)
        hooks.put(hook)
        assert [hooks.count_failure(kb_id, hook.id, 3, 1000).paused for _ in range(4)] == [
            False,
            False,
            True,
            False,
        ]
        paused = hooks.get(kb_id, hook.id)
        assert paused is not None
        assert (paused.failures_in_a_row, paused.probe_at) == (4, 1000) and paused.paused_at
        hooks.clear_failures(kb_id, hook.id)
        resumed = hooks.get(kb_id, hook.id)
        assert resumed is not None
        assert (resumed.failures_in_a_row, resumed.paused_at, resumed.probe_at) == (0, "", 0)
        assert not hooks.count_failure(kb_id, hook.id, 3, 1000).paused  # counting starts again from none

    def test_one_probe_per_interval_and_none_while_not_paused(self, hooks: WebhookRepo, kb_id: str) -> None:
        hook = make_hook(kb_id)
        hooks.put(hook)
        assert not hooks.claim_probe(kb_id, hook.id, 5000, 6000)  # not paused: no probe to claim
        assert hooks.count_failure(kb_id, hook.id, 1, 1000).paused
        assert not hooks.claim_probe(kb_id, hook.id, 999, 2000)  # its time has not come
        assert hooks.claim_probe(kb_id, hook.id, 1000, 2000)
        assert not hooks.claim_probe(kb_id, hook.id, 1000, 2000)  # another worker at the same time
        assert not hooks.claim_probe(kb_id, hook.id, 1999, 3000)
        assert hooks.claim_probe(kb_id, hook.id, 2000, 3000)
        stored = hooks.get(kb_id, hook.id)
        assert stored is not None and stored.probe_at == 3000

    def test_a_settings_change_keeps_the_breaker_and_a_gone_webhook_is_not_brought_back(
        self, hooks: WebhookRepo, kb_id: str
    ) -> None:
        hook = make_hook(kb_id)
        hooks.put(hook)
        assert hooks.count_failure(kb_id, hook.id, 1, 1000).paused
        hook.description = "changed"  # a PUT that read the webhook before it was paused
        assert hooks.update(hook, read=read_back(hooks, hook)) == "written"
        stored = hooks.get(kb_id, hook.id)
        assert stored is not None and stored.description == "changed"
        assert (stored.failures_in_a_row, stored.probe_at) == (1, 1000) and stored.paused_at
        assert hooks.delete(kb_id, hook.id)
        assert not hooks.count_failure(kb_id, hook.id, 1, 1000).paused
        hooks.clear_failures(kb_id, hook.id)
        assert not hooks.claim_probe(kb_id, hook.id, 5000, 6000)
        assert hooks.get(kb_id, hook.id) is None and hooks.list_kb(kb_id) == []

    def test_a_delivered_try_clears_in_one_conditional_write_and_says_whether_it_resumed(
        self, hooks: WebhookRepo, kb_id: str
    ) -> None:
        """rev_hooks2 #1: every delivered try clears, conditional on there being something to clear; the
        answer (from the old values) is what the stage's `webhook resumed` line reads."""
        hook = make_hook(kb_id)
        hooks.put(hook)
        assert hooks.clear_failures(kb_id, hook.id) is False  # healthy: nothing to clear, nothing written
        assert hooks.get(kb_id, hook.id) == hook
        assert not hooks.count_failure(kb_id, hook.id, 3, 1000).paused
        assert hooks.clear_failures(kb_id, hook.id) is False  # failures, not paused: cleared, not resumed
        cleared = hooks.get(kb_id, hook.id)
        assert cleared is not None and cleared.failures_in_a_row == 0
        assert hooks.count_failure(kb_id, hook.id, 1, 1000).paused
        assert hooks.clear_failures(kb_id, hook.id) is True  # it was paused: this write resumed it
        assert hooks.get(kb_id, hook.id) == hook
        assert hooks.clear_failures(kb_id, hook.id) is False

    def test_each_probe_claimed_is_counted_and_the_count_goes_with_the_failures(
        self, hooks: WebhookRepo, kb_id: str
    ) -> None:
        """rev_hooks2 #2: the probe interval doubles per probe claimed, not per failure counted (the tries
        other workers had in flight at the pause add failures, not probes)."""
        hook = make_hook(kb_id)
        hooks.put(hook)
        assert [hooks.count_failure(kb_id, hook.id, 1, 1000).paused for _ in range(5)] == [True] + [False] * 4
        assert hooks.claim_probe(kb_id, hook.id, 1000, 1030)
        assert not hooks.claim_probe(kb_id, hook.id, 1000, 1030)  # lost: not counted
        assert hooks.claim_probe(kb_id, hook.id, 1030, 1090)
        stored = hooks.get(kb_id, hook.id)
        assert stored is not None and (stored.failures_in_a_row, stored.probes) == (5, 2)
        assert hooks.clear_failures(kb_id, hook.id)
        # probes gone with the rest; the lane's score one less (stages/webhooks.py)
        assert hooks.get(kb_id, hook.id) == replace(hook, failure_score=4)

    def test_a_settings_write_that_resumes_clears_the_breaker_in_the_same_write(
        self, hooks: WebhookRepo, kb_id: str
    ) -> None:
        """rev_hooks2 #4: a PUT that changes the URL or switches the webhook on resumes it."""
        hook = make_hook(kb_id)
        hooks.put(hook)
        assert hooks.count_failure(kb_id, hook.id, 1, 1000).paused
        assert hooks.claim_probe(kb_id, hook.id, 1000, 1030)
        hook.url = "https://93.184.216.35/fixed"
        assert hooks.update(hook, read=read_back(hooks, hook), resume=True) == "written"
        stored = hooks.get(kb_id, hook.id)
        assert stored is not None and stored.url == "https://93.184.216.35/fixed"
        assert (stored.failures_in_a_row, stored.paused_at, stored.probe_at, stored.probes) == (0, "", 0, 0)
        assert hooks.delete(kb_id, hook.id)
        assert hooks.update(hook, read=hook, resume=True) == "gone" and hooks.get(kb_id, hook.id) is None
