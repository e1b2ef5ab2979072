"""WebhookRepo on DynamoDB (PynamoDB): one table `{prefix}-webhooks`, partition = knowledge base, sort key
`hook#<webhook id>` (the webhook), `log#<webhook id>#<time>#<delivery id>#<attempt>` (one try of one
delivery, kept DELIVERY_LOG_DAYS by TTL) or `try#<webhook id>#<delivery id>#<parked>#<attempt>` (the try's
claim: `status` running or finished, `claimed_at` in epoch seconds, the first claim's time in the body; kept
as long as the log, well past the queue's 14 days of retention). A webhook's log is one Query on its
prefix, newest first.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from pynamodb.attributes import JSONAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist, PutError, PynamoDBException, UpdateError
from pynamodb.models import Model

from chalicelib.adapters.aws_errors import is_transient
from chalicelib.adapters.dynamo.tables import _condition_failed
from chalicelib.domain.clock import now_iso
from chalicelib.ports import DeliveryRecord, ServiceUnreachable, Webhook
from chalicelib.ports.events import DeliveryTry, TryClaim
from chalicelib.settings import Settings

HOOK = "hook#"
LOG = "log#"
TRY = "try#"
DELIVERY_LOG_DAYS = 30


def build_webhook_model(settings: Settings) -> type[Any]:
    class WebhookItem(Model):
        class Meta:
            table_name = settings.table("webhooks")
            region = settings.region

        kb_id = UnicodeAttribute(hash_key=True)
        key = UnicodeAttribute(range_key=True)
        body = JSONAttribute(default=dict)
        expires_at = NumberAttribute(null=True)
        #: a try's claim only
        status = UnicodeAttribute(null=True)
        claimed_at = NumberAttribute(null=True)

    return WebhookItem


def _hook_body(webhook: Webhook) -> dict[str, Any]:
    return {
        "id": webhook.id,
        "tenant_id": webhook.tenant_id,
        "url": webhook.url,
        "event_types": list(webhook.event_types),
        "secret": webhook.secret,
        "enabled": webhook.enabled,
        "description": webhook.description,
        "created_at": webhook.created_at,
        "updated_at": webhook.updated_at,
    }


def _hook(kb_id: str, body: dict[str, Any]) -> Webhook:
    return Webhook(
        id=str(body["id"]),
        tenant_id=str(body["tenant_id"]),
        kb_id=kb_id,
        url=str(body["url"]),
        event_types=[str(t) for t in body.get("event_types", [])],
        secret=str(body["secret"]),
        enabled=bool(body.get("enabled", True)),
        description=str(body.get("description", "")),
        created_at=str(body.get("created_at", "")),
        updated_at=str(body.get("updated_at", "")),
    )


def _record(body: dict[str, Any]) -> DeliveryRecord:
    return DeliveryRecord(
        webhook_id=str(body["webhook_id"]),
        delivery_id=str(body["delivery_id"]),
        event_id=str(body["event_id"]),
        event_type=str(body["event_type"]),
        attempt=int(body["attempt"]),
        outcome=str(body["outcome"]),
        status_class=str(body["status_class"]),
        duration_ms=int(body["duration_ms"]),
        at=str(body["at"]),
    )


class DynamoWebhookRepo:
    def __init__(self, model: type[Any]):
        self.model = model

    def put(self, webhook: Webhook) -> None:
        self.model(webhook.kb_id, f"{HOOK}{webhook.id}", body=_hook_body(webhook)).save()

    def update(self, webhook: Webhook) -> bool:
        item = self.model(webhook.kb_id, f"{HOOK}{webhook.id}", body=_hook_body(webhook))
        try:
            item.save(condition=self.model.key.exists())
        except PutError as error:
            if error.cause_response_code == "ConditionalCheckFailedException":
                return False
            raise
        return True

    def get(self, kb_id: str, webhook_id: str) -> Webhook | None:
        try:
            item = self.model.get(kb_id, f"{HOOK}{webhook_id}", consistent_read=True)
        except DoesNotExist:
            return None
        return _hook(kb_id, item.body)

    def list_kb(self, kb_id: str) -> list[Webhook]:
        """Raises ServiceUnreachable when the table did not answer (throttled, a 5xx: every announcement
        reads it, and an announcement must not fail the work it announces); a refusal surfaces as it is."""
        try:
            hooks = [
                _hook(kb_id, item.body)
                for item in self.model.query(kb_id, self.model.key.startswith(HOOK), consistent_read=True)
            ]
        except PynamoDBException as error:
            if error.cause is not None and is_transient(error.cause):
                raise ServiceUnreachable(
                    f"DynamoDB (webhooks) did not answer ({type(error).__name__})"
                ) from None
            raise
        return sorted(hooks, key=lambda h: (h.created_at, h.id))

    def delete(self, kb_id: str, webhook_id: str) -> bool:
        existed = self.get(kb_id, webhook_id) is not None
        self.model(kb_id, f"{HOOK}{webhook_id}").delete()
        # its log goes with it (the items expire anyway; a partial sweep leaves only what TTL takes)
        with self.model.batch_write() as batch:
            for prefix in (LOG, TRY):
                for item in self.model.query(kb_id, self.model.key.startswith(f"{prefix}{webhook_id}#")):
                    batch.delete(item)
        return existed

    def log_delivery(self, kb_id: str, record: DeliveryRecord) -> None:
        key = f"{LOG}{record.webhook_id}#{record.at}#{record.delivery_id}#{record.attempt:03d}"
        body = {name: value for name, value in asdict(record).items() if name != "extra"}
        self.model(kb_id, key, body=body, expires_at=_expiry()).save()

    def deliveries(self, kb_id: str, webhook_id: str, limit: int = 50) -> list[DeliveryRecord]:
        items = self.model.query(
            kb_id,
            self.model.key.startswith(f"{LOG}{webhook_id}#"),
            scan_index_forward=False,
            limit=limit,
            consistent_read=True,
        )
        return [_record(item.body) for item in items]

    def claim_try(self, kb_id: str, delivery_try: DeliveryTry, stale_after_seconds: int) -> TryClaim:
        m = self.model
        now = int(time.time())
        key = _try_key(delivery_try)
        at = now_iso()
        fresh = m(kb_id, key, body={"at": at}, status="running", claimed_at=now, expires_at=_expiry())
        try:
            fresh.save(condition=m.key.does_not_exist())
            return TryClaim("claimed", at)
        except PutError as error:
            if not _condition_failed(error):
                raise
        try:
            held = m.get(kb_id, key, consistent_read=True)
        except DoesNotExist:  # its webhook was deleted in between: nothing left to deliver to
            return TryClaim("finished", at)
        first = str(held.body.get("at", at))
        if held.status == "finished":
            return TryClaim("finished", first)
        if held.claimed_at > now - stale_after_seconds:
            return TryClaim("busy", first)
        try:  # its holder died: take it over, unless another worker did (or it finished) since the read
            held.update(
                actions=[m.claimed_at.set(now)],
                condition=(m.status == "running") & (m.claimed_at == held.claimed_at),
            )
        except UpdateError as error:
            if not _condition_failed(error):
                raise
            return TryClaim("busy", first)
        return TryClaim("claimed", first)

    def finish_try(self, kb_id: str, delivery_try: DeliveryTry) -> None:
        m = self.model
        try:  # never writes a claim that is gone (its webhook was deleted)
            m(kb_id, _try_key(delivery_try)).update(
                actions=[m.status.set("finished")], condition=m.key.exists()
            )
        except UpdateError as error:
            if not _condition_failed(error):
                raise


def _try_key(delivery_try: DeliveryTry) -> str:
    t = delivery_try
    return f"{TRY}{t.webhook_id}#{t.delivery_id}#{t.parked:03d}#{t.attempt:03d}"


def _expiry() -> int:
    return int(time.time()) + DELIVERY_LOG_DAYS * 86400
