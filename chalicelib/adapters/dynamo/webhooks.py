"""WebhookRepo on DynamoDB (PynamoDB): one table `{prefix}-webhooks`, partition = knowledge base, sort key
`hook#<webhook id>` (the webhook) or `log#<webhook id>#<time>#<delivery id>#<attempt>` (one try of one
delivery, kept DELIVERY_LOG_DAYS by TTL). A webhook's log is one Query on its prefix, newest first.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from pynamodb.attributes import JSONAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist, PutError
from pynamodb.models import Model

from chalicelib.ports import DeliveryRecord, Webhook
from chalicelib.settings import Settings

HOOK = "hook#"
LOG = "log#"
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
        hooks = [
            _hook(kb_id, item.body)
            for item in self.model.query(kb_id, self.model.key.startswith(HOOK), consistent_read=True)
        ]
        return sorted(hooks, key=lambda h: (h.created_at, h.id))

    def delete(self, kb_id: str, webhook_id: str) -> bool:
        existed = self.get(kb_id, webhook_id) is not None
        self.model(kb_id, f"{HOOK}{webhook_id}").delete()
        # its log goes with it (the items expire anyway; a partial sweep leaves only what TTL takes)
        with self.model.batch_write() as batch:
            for item in self.model.query(kb_id, self.model.key.startswith(f"{LOG}{webhook_id}#")):
                batch.delete(item)
        return existed

    def log_delivery(self, kb_id: str, record: DeliveryRecord) -> None:
        key = f"{LOG}{record.webhook_id}#{record.at}#{record.delivery_id}#{record.attempt:03d}"
        body = {name: value for name, value in asdict(record).items() if name != "extra"}
        expires = int(time.time()) + DELIVERY_LOG_DAYS * 86400
        self.model(kb_id, key, body=body, expires_at=expires).save()

    def deliveries(self, kb_id: str, webhook_id: str, limit: int = 50) -> list[DeliveryRecord]:
        items = self.model.query(
            kb_id,
            self.model.key.startswith(f"{LOG}{webhook_id}#"),
            scan_index_forward=False,
            limit=limit,
            consistent_read=True,
        )
        return [_record(item.body) for item in items]
