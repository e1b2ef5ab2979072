"""A delivery waiting for its retry when its webhook is switched off, or stops taking the event's type, is
dropped at its next try and says so in the webhook's log (`dropped`, with the reason), instead of staying
`retrying` for good; an unsubscribed type is checked at delivery as `enabled` is, so it is not sent."""

from __future__ import annotations

from chalicelib.adapters.memory import MemoryTaskQueue
from chalicelib.bootstrap import Services
from chalicelib.domain.types import KnowledgeBase
from chalicelib.operations import webhooks
from chalicelib.operations.webhooks import UpdateWebhookRequest
from chalicelib.stages import webhooks as delivery

from .conftest import upload
from .test_webhooks import Receiver, drain_webhooks, hook_on


def _first_try_fails(deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue) -> tuple[Receiver, str]:
    receiver = Receiver(503, 204)
    deps.webhook_sender = receiver
    hook_id = str(hook_on(deps, kb, "Knowledge Created")["id"])
    upload(deps, kb)
    queue.deliver("webhooks", delivery.handle, deps)  # 503: its retry waits on the queue
    return receiver, hook_id


def _log(deps: Services, kb: KnowledgeBase, hook_id: str) -> list[tuple[int, str, str]]:
    entries = webhooks.list_deliveries(deps, kb.tenant_id, kb.id, hook_id)
    return sorted((e["attempt"], e["outcome"], e.get("reason", "")) for e in entries)


def test_a_webhook_switched_off_while_a_delivery_waits_logs_it_dropped(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    receiver, hook_id = _first_try_fails(deps, kb, queue)
    webhooks.update_webhook(deps, kb.tenant_id, kb.id, hook_id, UpdateWebhookRequest(enabled=False))
    drain_webhooks(deps)
    webhooks.update_webhook(deps, kb.tenant_id, kb.id, hook_id, UpdateWebhookRequest(enabled=True))
    drain_webhooks(deps)  # switching it on again brings nothing back

    assert len(receiver.posts) == 1
    assert _log(deps, kb, hook_id) == [(1, "retrying", ""), (2, "dropped", "the webhook was switched off")]
    assert not queue.dead_letters("webhooks")


def test_a_webhook_unsubscribed_from_the_type_while_a_delivery_waits_is_not_sent_it(
    deps: Services, kb: KnowledgeBase, queue: MemoryTaskQueue
) -> None:
    receiver, hook_id = _first_try_fails(deps, kb, queue)
    unsubscribed = UpdateWebhookRequest(event_types=["Knowledge Completed"])
    webhooks.update_webhook(deps, kb.tenant_id, kb.id, hook_id, unsubscribed)
    drain_webhooks(deps)

    assert len(receiver.posts) == 1
    assert _log(deps, kb, hook_id) == [
        (1, "retrying", ""),
        (2, "dropped", "the webhook no longer takes 'Knowledge Created' events"),
    ]
