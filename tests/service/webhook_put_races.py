"""Two PUTs of one webhook at once (rev_events #1), through the operation: run on the in-memory fakes
(tests/service/test_webhook_put_races.py) and on DynamoDB through moto (tests/e2e/test_webhook_put_races_dynamo.py).
Each PUT writes only its own fields: one that read the webhook before another wrote re-applies them on a
fresh read (neither is undone), and one overtaken every time answers 409 `webhook_write_conflict`."""

from __future__ import annotations

from typing import Any

import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.errors import Conflict
from chalicelib.operations import webhooks
from chalicelib.operations.webhooks import CreateWebhookRequest, UpdateWebhookRequest

OLD = "https://old.example.com/hook"
NEW = "https://new.example.com/hook"
NEVER = 10**10  # a probe time that never comes


def _create(deps: Services, tenant_id: str, kb_id: str) -> str:
    body = CreateWebhookRequest(url=OLD, event_types=["Knowledge Completed"], description="first")
    return str(webhooks.create_webhook(deps, tenant_id, kb_id, body)["id"])


def _put(deps: Services, tenant_id: str, kb_id: str, hook_id: str, **fields: Any) -> dict[str, Any]:
    return webhooks.update_webhook(deps, tenant_id, kb_id, hook_id, UpdateWebhookRequest(**fields))


def a_url_change_is_not_undone_by_a_description_change_that_read_before_it(
    deps: Services, tenant_id: str, kb_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PUT B (description) read the paused webhook; PUT A (the URL: resumes it) is answered 200 before B
    writes. B writes again on a fresh read: the stored webhook has A's URL, unpaused, and B's description."""
    hook_id = _create(deps, tenant_id, kb_id)
    assert deps.webhooks.count_failure(kb_id, hook_id, 1, NEVER).paused
    write = deps.webhooks.update
    writes = 0

    def overtaken_once(webhook: Any, **kwargs: Any) -> Any:
        nonlocal writes
        writes += 1
        if writes == 1:
            monkeypatch.setattr(deps.webhooks, "update", write)
            answer_a = _put(deps, tenant_id, kb_id, hook_id, url=NEW)
            assert (answer_a["url"], answer_a["delivery_status"]) == (NEW, "active")
            monkeypatch.setattr(deps.webhooks, "update", overtaken_once)
        return write(webhook, **kwargs)

    monkeypatch.setattr(deps.webhooks, "update", overtaken_once)
    answer_b = _put(deps, tenant_id, kb_id, hook_id, description="renamed")
    monkeypatch.setattr(deps.webhooks, "update", write)
    stored = deps.webhooks.get(kb_id, hook_id)
    assert stored is not None
    assert (stored.url, stored.description, stored.paused_at, stored.failures_in_a_row) == (
        NEW,
        "renamed",
        "",
        0,
    )
    shown = (answer_b["url"], answer_b["description"], answer_b["delivery_status"])
    assert shown == (NEW, "renamed", "active")
    assert writes == 2  # B's second write, on the read after A's


def a_switch_off_is_not_undone_by_an_event_types_change_that_read_before_it(
    deps: Services, tenant_id: str, kb_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook_id = _create(deps, tenant_id, kb_id)
    write = deps.webhooks.update
    writes = 0

    def overtaken_once(webhook: Any, **kwargs: Any) -> Any:
        nonlocal writes
        writes += 1
        if writes == 1:
            monkeypatch.setattr(deps.webhooks, "update", write)
            assert _put(deps, tenant_id, kb_id, hook_id, enabled=False)["enabled"] is False
            monkeypatch.setattr(deps.webhooks, "update", overtaken_once)
        return write(webhook, **kwargs)

    monkeypatch.setattr(deps.webhooks, "update", overtaken_once)
    answer = _put(deps, tenant_id, kb_id, hook_id, event_types=["Knowledge Failed"])
    monkeypatch.setattr(deps.webhooks, "update", write)
    stored = deps.webhooks.get(kb_id, hook_id)
    assert stored is not None and (stored.enabled, stored.event_types) == (False, ["Knowledge Failed"])
    assert (answer["enabled"], answer["event_types"]) == (False, ["Knowledge Failed"])


def a_put_overtaken_every_time_is_a_409_and_writes_none_of_its_fields(
    deps: Services, tenant_id: str, kb_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    hook_id = _create(deps, tenant_id, kb_id)
    write = deps.webhooks.update
    landed: list[str] = []

    def always_overtaken(webhook: Any, **kwargs: Any) -> Any:
        monkeypatch.setattr(deps.webhooks, "update", write)
        landed.append(
            _put(deps, tenant_id, kb_id, hook_id, description=f"other {len(landed)}")["description"]
        )
        monkeypatch.setattr(deps.webhooks, "update", always_overtaken)
        return write(webhook, **kwargs)

    monkeypatch.setattr(deps.webhooks, "update", always_overtaken)
    with pytest.raises(Conflict) as lost:
        _put(deps, tenant_id, kb_id, hook_id, url=NEW)
    monkeypatch.setattr(deps.webhooks, "update", write)
    assert (lost.value.code, lost.value.status) == ("webhook_write_conflict", 409)
    assert len(landed) == webhooks.UPDATE_TRIES  # a few tries, not a loop
    stored = deps.webhooks.get(kb_id, hook_id)
    assert stored is not None and (stored.url, stored.description) == (OLD, landed[-1])


def the_breakers_writes_between_a_puts_read_and_write_neither_fail_it_nor_are_lost(
    deps: Services, tenant_id: str, kb_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stage counts failures (and pauses) while a PUT that does not resume writes: one write, the
    breaker's state kept."""
    hook_id = _create(deps, tenant_id, kb_id)
    write = deps.webhooks.update
    writes = 0

    def failing_meanwhile(webhook: Any, **kwargs: Any) -> Any:
        nonlocal writes
        writes += 1
        for _ in range(2):
            deps.webhooks.count_failure(kb_id, hook_id, 2, NEVER)
        return write(webhook, **kwargs)

    monkeypatch.setattr(deps.webhooks, "update", failing_meanwhile)
    _put(deps, tenant_id, kb_id, hook_id, description="renamed")
    monkeypatch.setattr(deps.webhooks, "update", write)
    assert writes == 1
    stored = deps.webhooks.get(kb_id, hook_id)
    assert stored is not None and stored.description == "renamed" and stored.paused_at
    assert (stored.failures_in_a_row, stored.failure_score) == (2, 2)
