"""WebhookRepo on DynamoDB (PynamoDB): one table `{prefix}-webhooks`, partition = knowledge base, sort key
`hook#<webhook id>` (the webhook), `log#<webhook id>#<time>#<delivery id>#<attempt>` (one try of one
delivery, kept DELIVERY_LOG_DAYS by TTL) or `try#<webhook id>#<delivery id>#<parked>#<attempt>` (the try's
claim, `#p<n>` after it for the attempt's n-th put-off while its webhook was paused: `status` running or
finished, `claimed_at` in epoch seconds, the first claim's time in the body; kept as long as the log, well
past the queue's 14 days of retention). A webhook's log is one Query on its
prefix, newest first.

The delivery breaker's state is four attributes of the webhook's item beside its `body` (`failures`,
`paused_at`, `probe_at`, `probes`), each written by one UpdateItem of its own (an atomic add, a conditional
pause, a conditional probe claim, a clear conditional on any of them being there), which the writes of the
body and secrets leave as they are, save a change of settings that resumes the webhook (its URL changed, or
switched on): that one removes them in the same UpdateItem. The delivery lane's `score` rides on the same
writes: the failure's add adds one to it too while it is under the cap (at the cap, a second add of the
failure alone), the delivered try's clear takes one off while it is above 0 (so a healthy webhook, score 0
and no breaker, is still not written), the resume removes it.

A webhook's secrets are attributes of their own beside its `body`: `secret` (the current one) and
`previous_secrets` (a JSON list of {"secret", "expires_at"}, newest first: those rotations replaced that
may still sign), so a rotation is one UpdateItem conditional on the secret it read. The current secret is
also kept in the body (key "secret", where code from before rotations reads it, so a rollback keeps
signing with it); the attribute wins when both are there, and a row from before rotations (no attribute)
is read from its body. The body is one JSON string, whose fields an UpdateItem cannot set one by one:
so a rotation writes the whole body as it read it with the new secret, and a change of settings writes
the body with the secret it read, each conditional on the body and secret being still the ones it read;
either tries again from a fresh read when the other came between. A change of settings whose fresh read
finds other settings than its caller read (another PUT landed) writes nothing and says so: the caller
re-applies its own fields on a new read, so of two PUTs at once neither undoes the other's fields.

The cap of webhooks per knowledge base is the item `meta` of its partition (`hook_count`), as the tags
table keeps its own: a create adds one in the same transaction as its put, only while under the cap; a
delete takes one off in the transaction that removes the webhook (conditional on it being there, so a
delete sent twice gives its place back once), and the last one's delete removes the item. No item means
"not counted": the knowledge base has no webhook, or only rows from before the count. The next create
then counts them (a consistent Query) and writes the count in its transaction, conditional on the item
still missing and on every webhook counted still being there; a delete while there is no item gives
nothing back, conditional on the item still missing. Either retries when the other came between, so the
count is exact.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from typing import Any

from pynamodb.attributes import JSONAttribute, NumberAttribute, UnicodeAttribute
from pynamodb.exceptions import DoesNotExist, PutError, PynamoDBException, TransactWriteError, UpdateError
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite

from chalicelib.adapters.aws_errors import is_transient
from chalicelib.adapters.dynamo.tables import _condition_failed, _transaction_conflict
from chalicelib.domain.clock import now_iso
from chalicelib.domain.errors import Conflict
from chalicelib.domain.webhooks import PreviousSecret
from chalicelib.ports import DeliveryRecord, ServiceUnreachable, Webhook
from chalicelib.ports.events import DeliveryTry, FailureCounted, TryClaim, WebhookUpdate
from chalicelib.settings import Settings

HOOK = "hook#"
LOG = "log#"
TRY = "try#"
#: the knowledge base's count of webhooks (`hook_count`): the cap's condition
META = "meta"
#: a first count's transaction: its webhooks' checks, the count and the put, within DynamoDB's 100 items
MAX_CAP = 98
DELIVERY_LOG_DAYS = 30
#: writes of a webhook tried again after a concurrent rotation or change of settings came between
WRITE_TRIES = 3


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
        #: a webhook only
        secret = UnicodeAttribute(null=True)
        previous_secrets = JSONAttribute(null=True)
        #: the `meta` item only
        hook_count = NumberAttribute(null=True)
        #: a webhook only: its delivery breaker (failed tries in a row; while paused, since when (ISO) and
        #: its next probe's time in epoch seconds)
        failures = NumberAttribute(null=True)
        paused_at = UnicodeAttribute(null=True)
        probe_at = NumberAttribute(null=True)
        #: probes claimed since the pause
        probes = NumberAttribute(null=True)
        #: the delivery lane's score (failed or slow tries up, delivered ones down, 0..the cap)
        score = NumberAttribute(null=True)

    return WebhookItem


def _hook_body(webhook: Webhook) -> dict[str, Any]:
    return {
        "id": webhook.id,
        "tenant_id": webhook.tenant_id,
        "url": webhook.url,
        "event_types": list(webhook.event_types),
        "secret": webhook.secret,  # for code from before rotations (the attribute wins)
        "enabled": webhook.enabled,
        "description": webhook.description,
        "created_at": webhook.created_at,
        "updated_at": webhook.updated_at,
    }


def _hook(item: Any) -> Webhook:
    body: dict[str, Any] = item.body
    return Webhook(
        id=str(body["id"]),
        tenant_id=str(body["tenant_id"]),
        kb_id=item.kb_id,
        url=str(body["url"]),
        event_types=[str(t) for t in body.get("event_types", [])],
        secret=_stored_secret(item),
        enabled=bool(body.get("enabled", True)),
        description=str(body.get("description", "")),
        created_at=str(body.get("created_at", "")),
        updated_at=str(body.get("updated_at", "")),
        previous_secrets=[
            PreviousSecret(str(p["secret"]), str(p["expires_at"])) for p in item.previous_secrets or []
        ],
        failures_in_a_row=int(item.failures or 0),
        paused_at=item.paused_at or "",
        probe_at=int(item.probe_at or 0),
        probes=int(item.probes or 0),
        failure_score=int(item.score or 0),
    )


def _stored_secret(item: Any) -> str:
    return str(item.secret or item.body["secret"])  # a row from before rotations: in its body only


def _previous(webhook: Webhook) -> list[dict[str, str]]:
    return [{"secret": p.secret, "expires_at": p.expires_at} for p in webhook.previous_secrets]


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
        reason=str(body.get("reason", "")),
    )


class DynamoWebhookRepo:
    def __init__(self, model: type[Any]):
        self.model = model

    def _hook_item(self, webhook: Webhook) -> Any:
        return self.model(
            webhook.kb_id,
            f"{HOOK}{webhook.id}",
            body=_hook_body(webhook),
            secret=webhook.secret,
            previous_secrets=_previous(webhook) or None,
            failures=webhook.failures_in_a_row or None,
            paused_at=webhook.paused_at or None,
            probe_at=webhook.probe_at or None,
            probes=webhook.probes or None,
            score=webhook.failure_score or None,
        )

    def put(self, webhook: Webhook) -> None:
        self._hook_item(webhook).save()

    def _count(self, kb_id: str) -> int | None:
        """The knowledge base's count of webhooks; None when not counted (none, or rows from before it)."""
        try:
            count = self.model.get(kb_id, META, consistent_read=True).hook_count
        except DoesNotExist:
            return None
        return None if count is None else int(count)

    def create(self, webhook: Webhook, cap: int) -> bool:
        if cap > MAX_CAP:
            raise ValueError(f"a cap of {cap} webhooks does not fit one transaction's checks")
        m, kb_id = self.model, webhook.kb_id
        for _ in range(WRITE_TRIES + 2):
            counted = self._count(kb_id)
            listed = [h.id for h in self.list_kb(kb_id)] if counted is None else []
            if (len(listed) if counted is None else counted) >= cap:
                return False
            try:
                with TransactWrite(connection=m._get_connection().connection) as tx:
                    if counted is None:  # counted once: the item still missing, each counted row still there
                        tx.update(
                            m(kb_id, META),
                            actions=[m.hook_count.set(len(listed) + 1)],
                            condition=m.hook_count.does_not_exist(),
                        )
                        for hook_id in listed:
                            tx.condition_check(m, kb_id, f"{HOOK}{hook_id}", condition=m.key.exists())
                    else:
                        tx.update(m(kb_id, META), actions=[m.hook_count.add(1)], condition=m.hook_count < cap)
                    tx.save(self._hook_item(webhook), condition=m.key.does_not_exist())
                return True
            except TransactWriteError as error:
                if _transaction_conflict(error):
                    time.sleep(0.05)
                elif not _condition_failed(error):
                    raise
            # another create or delete came between the read and the write: read again
        raise _crowded(kb_id)

    def update(self, webhook: Webhook, *, read: Webhook, resume: bool = False) -> WebhookUpdate:
        """Writes the settings with the secret stored, conditional on the body (and secret) as a fresh read
        finds them, while their settings are still the ones the caller read: a rotation between the read and
        the write (the body's secret changed) is written again from the next read; another change of
        settings is `changed`, for the caller to re-apply its own fields on."""
        m = self.model
        for _ in range(WRITE_TRIES):
            item = self._item(webhook.kb_id, webhook.id)
            if item is None:
                return "gone"
            if _hook(item).settings() != read.settings():
                return "changed"
            secret = _stored_secret(item)
            # a row from before rotations has no attribute: its body holds the secret read
            same_secret = m.secret == item.secret if item.secret else m.secret.does_not_exist()
            actions = [m.body.set(_hook_body(replace(webhook, secret=secret))), m.secret.set(secret)]
            try:
                m(webhook.kb_id, f"{HOOK}{webhook.id}").update(
                    actions=actions + ([*_clear_breaker(m), m.score.remove()] if resume else []),
                    condition=same_secret & (m.body == item.body),
                )
                return "written"
            except UpdateError as error:
                if not _condition_failed(error):
                    raise
            # a rotation, another change of settings or a delete came between: the next read tells
        raise _overtaken(webhook)

    def rotate_secret(self, webhook: Webhook, expected_secret: str) -> bool:
        m = self.model
        tries = 0
        while (item := self._item(webhook.kb_id, webhook.id)) is not None:
            if _stored_secret(item) != expected_secret:  # another rotation came first
                return False
            if tries == WRITE_TRIES:
                raise _overtaken(webhook)
            tries += 1
            previous = _previous(webhook)
            actions = [
                m.secret.set(webhook.secret),
                m.body.set({**item.body, "secret": webhook.secret}),
                m.previous_secrets.set(previous) if previous else m.previous_secrets.remove(),
            ]
            same_secret = m.secret == item.secret if item.secret else m.secret.does_not_exist()
            try:
                m(webhook.kb_id, f"{HOOK}{webhook.id}").update(
                    actions=actions, condition=same_secret & (m.body == item.body)
                )
                return True
            except UpdateError as error:
                if not _condition_failed(error):
                    raise
            # another rotation, a change of settings, or a delete: the next read tells
        return False

    def _item(self, kb_id: str, webhook_id: str) -> Any | None:
        try:
            return self.model.get(kb_id, f"{HOOK}{webhook_id}", consistent_read=True)
        except DoesNotExist:
            return None

    def get(self, kb_id: str, webhook_id: str) -> Webhook | None:
        item = self._item(kb_id, webhook_id)
        return None if item is None else _hook(item)

    def list_kb(self, kb_id: str) -> list[Webhook]:
        """Raises ServiceUnreachable when the table did not answer (throttled, a 5xx: every announcement
        reads it, and an announcement must not fail the work it announces); a refusal surfaces as it is."""
        try:
            hooks = [
                _hook(item)
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
        existed = self._remove(kb_id, webhook_id)
        # its log goes with it (the items expire anyway; a partial sweep leaves only what TTL takes)
        with self.model.batch_write() as batch:
            for prefix in (LOG, TRY):
                for item in self.model.query(kb_id, self.model.key.startswith(f"{prefix}{webhook_id}#")):
                    batch.delete(item)
        return existed

    def _remove(self, kb_id: str, webhook_id: str) -> bool:
        """The webhook and its place in the count, in one transaction; False when it was already gone."""
        m = self.model
        for _ in range(WRITE_TRIES + 2):
            counted = self._count(kb_id)
            try:
                with TransactWrite(connection=m._get_connection().connection) as tx:
                    tx.delete(m(kb_id, f"{HOOK}{webhook_id}"), condition=m.key.exists())
                    if counted is None:  # not counted: nothing to give back, unless a create counts it now
                        tx.condition_check(m, kb_id, META, condition=m.hook_count.does_not_exist())
                    elif counted <= 1:  # the last one: no item left behind (a deleted knowledge base's)
                        tx.delete(m(kb_id, META), condition=m.hook_count == counted)
                    else:
                        tx.update(m(kb_id, META), actions=[m.hook_count.add(-1)], condition=m.hook_count > 1)
                return True
            except TransactWriteError as error:
                if _transaction_conflict(error):
                    time.sleep(0.05)
                elif not _condition_failed(error):
                    raise
            if self._item(kb_id, webhook_id) is None:
                return False  # another delete removed it, and gave its place back
        raise _crowded(kb_id)

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

    def count_failure(
        self,
        kb_id: str,
        webhook_id: str,
        pause_after: int,
        probe_at: int,
        score_cap: int = 10,
        score_read: int = 0,
    ) -> FailureCounted:
        m = self.model
        item = m(kb_id, f"{HOOK}{webhook_id}")
        under_cap = m.score.does_not_exist() | (m.score < score_cap)
        # read at the cap: the failure alone (a refused conditional write is billed too); else both, and the
        # failure alone when the score reached the cap meanwhile
        raised = score_read < score_cap
        try:  # answers the item as written
            if raised:
                try:
                    item.update(
                        actions=[m.failures.add(1), m.score.add(1)], condition=m.key.exists() & under_cap
                    )
                except UpdateError as error:
                    if not _condition_failed(error):
                        raise
                    raised = False
            if not raised:
                item.update(actions=[m.failures.add(1)], condition=m.key.exists())
        except UpdateError as error:
            if not _condition_failed(error):
                raise
            return FailureCounted(False, 0, False)  # deleted
        counted = FailureCounted(False, int(item.score or 0), raised)
        if int(item.failures or 0) < pause_after or item.paused_at:
            return counted
        try:  # only while still failing (no delivered try cleared it since) and not paused by another worker
            item.update(
                actions=[m.paused_at.set(now_iso()), m.probe_at.set(probe_at)],
                condition=m.key.exists() & m.paused_at.does_not_exist() & (m.failures >= pause_after),
            )
        except UpdateError as error:
            if not _condition_failed(error):
                raise
            return counted
        return FailureCounted(True, counted.score, raised)

    def clear_failures(self, kb_id: str, webhook_id: str) -> bool:
        m = self.model
        # only while there is something to clear (a gone webhook has nothing); Model.update does not pass
        # ReturnValues, and the old values tell whether this write resumed the webhook
        breaker = m.failures.exists() | m.paused_at.exists() | m.probe_at.exists() | m.probes.exists()
        # the score one less: from above 0, or from none on a breaker written without it (a webhook from
        # before the score, or put so): to 0. A breaker beside a score of 0 is never written (each failure
        # counted adds to the score, and the clear that brings it to 0 removes the breaker in the same write)
        lower = (m.score > 0) | (breaker & m.score.does_not_exist())
        try:
            answer = m._get_connection().update_item(
                kb_id,
                range_key=f"{HOOK}{webhook_id}",
                actions=[*_clear_breaker(m), m.score.set((m.score | 1) - 1)],
                condition=lower,
                return_values="UPDATED_OLD",
            )
        except UpdateError as error:
            if not _condition_failed(error):
                raise
            return False
        # not `answer.get(...)`: the IAM derivation (tests/infra/port_map.py) reads a `.get` as a GetItem
        old = answer["Attributes"] if "Attributes" in answer else {}  # noqa: SIM401  (what it replaced)
        return "paused_at" in old

    def claim_probe(self, kb_id: str, webhook_id: str, now: int, next_probe_at: int) -> bool:
        m = self.model
        try:
            m(kb_id, f"{HOOK}{webhook_id}").update(
                actions=[m.probe_at.set(next_probe_at), m.probes.add(1)],
                condition=m.paused_at.exists() & (m.probe_at <= now),
            )
        except UpdateError as error:
            if not _condition_failed(error):
                raise
            return False
        return True


def _clear_breaker(m: Any) -> list[Any]:
    return [m.failures.remove(), m.paused_at.remove(), m.probe_at.remove(), m.probes.remove()]


def _overtaken(webhook: Webhook) -> Conflict:
    return Conflict(
        f"webhook {webhook.id} was changed by other requests while this one wrote it; send it again",
        code="webhook_write_conflict",
    )


def _crowded(kb_id: str) -> Conflict:
    return Conflict(
        f"knowledge base {kb_id}'s webhooks were changed by other requests while this one wrote; send it "
        "again",
        code="webhook_write_conflict",
    )


def _try_key(delivery_try: DeliveryTry) -> str:
    t = delivery_try
    put_off = f"#p{t.paused}" if t.paused else ""  # a try of its own each time it is put off while paused
    return f"{TRY}{t.webhook_id}#{t.delivery_id}#{t.parked:03d}#{t.attempt:03d}{put_off}"


def _expiry() -> int:
    return int(time.time()) + DELIVERY_LOG_DAYS * 86400
