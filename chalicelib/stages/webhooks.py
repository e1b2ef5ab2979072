"""webhooks queue: one message per (event, webhook), put there by services/events.announce; the handler
signs the event's detail and posts it to the webhook's URL through the SSRF-safe client.

When the webhooks table did not answer the announcement, the queue carries the event's fan-out instead
(`{"fan_out": "Knowledge Created", ...}`): the handler reads the knowledge base's webhooks and sends the
deliveries announce would have sent, under the same delivery ids (`fanned_out`). A read or send that fails
fails the message, which SQS brings back (the deliveries sent before are sent again and claimed once) and,
after the queue's tries, keeps in the DLQ for redrive from /admin/dlq.

Each try is signed with the secrets the webhook has when it is sent (domain.webhooks.signing_secrets):
its own, and each one a rotation replaced until that one's expiry, one `v1=` each.

A 2xx is delivered. Anything else is retried with a new message delayed by exponential backoff with
jitter (settings.webhook_backoff_seconds, doubled per try, at most 900 s), and after
settings.webhook_max_attempts tries the message is parked in the queue's DLQ (kept for redrive from
/admin/dlq). A URL the SSRF check refuses at delivery time (a name that now resolves to an internal
address) is parked at once. Every try is logged on the webhook (time, event type, attempt, outcome,
status-code class, duration); nothing the receiver answered is kept or logged beyond that.

A webhook deleted after the event was fanned out drops its pending deliveries; one switched off, or no
longer taking the event's type, drops each when it comes, logged `dropped` with the reason (nothing brings
it back).

A breaker per webhook keeps one tenant's dead or slow receiver from holding the queue every tenant shares:
after PAUSE_AFTER_FAILURES posted tries in a row failed or took more than half the timeout (any
deliveries') the webhook is paused (`paused_at`, shown by GET). Its tries are then not posted but logged
`paused` and put off, keeping their attempt: sent again as a delayed message (the worker never waits) due
at the next probe's time (at least the attempt's backoff, at most 900 s), until the delivery's event is
PAUSED_KEEP_SECONDS old, when it is parked. One try at a time goes as the probe, PROBE_SECONDS after the
pause and doubled per probe claimed up to 900 s; a letter redriven from the DLQ takes the probe whatever
its time. A try delivered within half the timeout (the probe's, or any other's) clears the count and
resumes the webhook, and so does a change of its URL or switching it on (operations/webhooks.py).

The breaker stops only failures in a row; a receiver that fails four tries in five (or answers slowly most
of the time) is never paused. So each webhook also keeps a score with the breaker's attributes
(`failure_score`: one more per posted try the breaker counts against it, one less per delivered try, between
0 and FAILURE_SCORE_CAP, written only when it changes), and while it is at or above DEGRADED_SCORE
(services/webhook_messages.py) the webhook's tries go to the slow lane: the queue `webhooks-slow`, run by
the same code (`handle_slow`) at a concurrency of 2 of its own, so the main lane's 5 workers keep serving
every other webhook. New deliveries are sent there by the fan-out (services/events.py), its retries and
put-offs by this handler (from the score its try came to). A try that reaches the main lane for a webhook
that is degraded by then (queued before, or redriven) is forwarded to the slow lane as it is, unclaimed and
unposted (same attempt, parked, put-offs): a copy of it delivered twice is forwarded twice, and the claim
runs the try once. A try in the slow lane is posted whatever the score (a webhook well again leaves the lane
with its next message). The breaker works the same in either lane; each lane parks in its own DLQ, and a
redrive sends a letter back to its lane. The slow lane's workers are shared between tenants: a tenant holds
at most one of them at once (services/lane_shares.py), and a try whose tenant holds it already goes back on
the lane, unclaimed and unposted (its attempt, parked and put-offs unchanged), 2 s after the tenant's try
turned away before it, so the lane cycles past one tenant's backlog to the others' tries. What the lanes do
not keep apart: a receiver that is merely slow below half the timeout, or fails fewer than about one try in
two, stays in the main lane.

A redelivered message (SQS delivers at least once) must not fork the delivery's retry chain, so each try
(webhook, delivery, parked, attempt) is claimed in the webhook repo before it is posted (`deliver`):
- a claim marked finished (the try was logged and its next step, the retry message, the DLQ or nothing
  after a 2xx, is done): the copy is dropped;
- a claim still running and younger than STALE_TRY_SECONDS: another worker holds it, or held it and died;
  the copy fails, so SQS brings it back after the queue's visibility timeout (360 s), when the claim is
  finished or stale;
- a stale running claim: its holder died mid-try (the function stops at 60 s), and this copy takes the try
  over and posts it again. Receivers are told deliveries are at least once; a crash between the next step
  and the finish mark re-posts the try only, since the next try's message, sent twice then, is claimed once.
A letter parked in the DLQ carries `parked` + 1, so a redrive of it runs its tries under fresh claims.

The queue also carries the state machine's announcements (`{"announce": "Knowledge Completed", ...}`): the
machine decides two changes itself (the promotion after a failed subtask, the failure of a plan that never
came back) and sends one message here, which is announced like any other change (services/events.py) unless
the row has moved on to a newer attempt by the time it is read. The promotion sends it whether its conditional
write held or not (a retried promotion whose first answer was lost fails its condition on the row it
completed): a completion is announced only for a row completed at that attempt.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from pydantic import ValidationError

from chalicelib.domain.clock import from_iso, to_iso
from chalicelib.domain.errors import SpanErrorCode
from chalicelib.domain.events import EventType
from chalicelib.domain.types import ParseStatus, SpanStatus
from chalicelib.domain.webhooks import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    MAX_RETRY_DELAY,
    SIGNATURE_HEADER,
    retry_delay,
    signature_header,
    signing_secrets,
    status_class,
)
from chalicelib.observability import logger
from chalicelib.ports import DeliveryRecord, Dependencies, FetchFailed, Webhook
from chalicelib.ports.events import DeliveryTry
from chalicelib.services.events import (
    WEBHOOK_QUEUE,
    WEBHOOK_SLOW_QUEUE,
    deliveries_of,
    knowledge_changed,
    slow_lane,
)
from chalicelib.services.lane_shares import give_slot_back, take_slot
from chalicelib.services.webhook_messages import (
    DEGRADED_SCORE,
    FAILURE_SCORE_CAP,
    MAX_PAUSED_TRIES,
    AnnounceMessage,
    DeliveryMessage,
    FanOutMessage,
    is_degraded,
    read_webhook_message,
)
from chalicelib.stages.runner import process_batch

QUEUE = WEBHOOK_QUEUE
#: the slow lane: degraded webhooks' tries (the module's docstring)
SLOW_QUEUE = WEBHOOK_SLOW_QUEUE
#: a running claim older than this was a worker that died (the function times out at 60 s); less than the
#: queue's visibility timeout (360 s), so the copy that found it busy takes it over when it comes back
STALE_TRY_SECONDS = 120
#: posted tries of a webhook that fail in a row before it is paused (a receiver that never answers costs the
#: whole timeout per try, shared by every tenant's deliveries), and the wait before its first probe
PAUSE_AFTER_FAILURES = 5
PROBE_SECONDS = 30
#: how long after its event a delivery is put off while its webhook is paused, then parked in the DLQ
#: (kept 14 days there for a redrive, which posts it): a day, so a receiver down for a night still gets
#: its deliveries, while one gone for good has them parked where the operator sees them, not kept cycling
PAUSED_KEEP_SECONDS = 86_400
#: the codes of a URL the SSRF check refuses at delivery time (FetchFailed.code)
REFUSED_CODES = frozenset({SpanErrorCode.SSRF_BLOCKED.value, SpanErrorCode.HOST_UNRESOLVED.value})


class TryInFlight(Exception):
    """Another worker holds this try's claim: the message fails and comes back after the visibility
    timeout."""


def handle(deps: Dependencies, event: dict[str, Any], context: Any, lane: str = QUEUE) -> dict[str, Any]:
    """A batch of the `lane` queue: the webhooks queue, or its slow lane (`handle_slow`)."""

    def one(record: SQSRecord) -> None:
        try:
            message = read_webhook_message(record.body)
        except ValidationError as error:
            deps.queue.dead_letter(
                lane, record.body, f"not a webhook delivery: {error.error_count()} error(s)"
            )
            return
        if isinstance(message, AnnounceMessage):
            announced(deps, message)
        elif isinstance(message, FanOutMessage):
            fanned_out(deps, message)
        else:
            deliver(deps, message, lane)

    return process_batch(event, context, one)


def handle_slow(deps: Dependencies, event: dict[str, Any], context: Any) -> dict[str, Any]:
    """A batch of the slow lane (`webhooks-slow`)."""
    return handle(deps, event, context, lane=SLOW_QUEUE)


def fanned_out(deps: Dependencies, message: FanOutMessage) -> int:
    """Sends the deliveries of an event whose announcement could not read its webhooks; how many. A table
    or queue that does not answer raises (ServiceUnreachable): the message is tried again, then parked."""
    event = message.to_event()
    hooks = deps.webhooks.list_kb(message.kb_id)
    slow = slow_lane(hooks)
    deliveries = deliveries_of(event, hooks)
    for delivery in deliveries:
        deps.queue.send_raw(
            SLOW_QUEUE if delivery.webhook_id in slow else QUEUE, delivery.model_dump(mode="json")
        )
    return len(deliveries)


def announced(deps: Dependencies, message: AnnounceMessage) -> None:
    event_type = EventType(message.announce)
    knowledge = deps.knowledge.get(message.knowledge_id)
    if knowledge is None or knowledge.attempt != message.attempt:
        # Gone, or a newer attempt (a reparse, a retry) superseded the one the machine decided: announcing
        # that attempt's end now would read the new attempt's row (its status, knowledge base, time) and
        # tell consumers a document is done that is being parsed again. The new attempt announces its own.
        return
    if event_type == EventType.KNOWLEDGE_COMPLETED and knowledge.parse_status != ParseStatus.COMPLETED:
        return  # the machine's promotion did not complete it (not the last slot, or the row moved on)
    if (
        event_type == EventType.KNOWLEDGE_FAILED
        and knowledge.attempt == message.attempt
        and knowledge.parse_status == ParseStatus.FAILED
    ):
        # The machine failed the row with a raw DynamoDB write (FailDocument), which closes no span: the
        # root and whatever stage or subtask is still open close with the failure, as housekeeping's do.
        # Only open spans change, so a redelivered announcement ends them no differently.
        deps.tracker.close_root(
            knowledge.id,
            knowledge.attempt,
            SpanStatus.FAILED,
            message.error_code or knowledge.error_code,
            message.error_message or knowledge.error_message,
        )
    knowledge_changed(
        deps,
        knowledge,
        event_type,
        status="completed" if event_type == EventType.KNOWLEDGE_COMPLETED else "failed",
        attempt=message.attempt,
        error_code=message.error_code,
        error_message=message.error_message,
    )


@dataclass(frozen=True)
class _Tried:
    """What one try came to, as its log entry and its next step read it."""

    outcome: str
    status: int | None = None
    duration_ms: int = 0
    #: why it was not delivered, in our words (never the receiver's)
    reason: str = ""


def deliver(deps: Dependencies, message: DeliveryMessage, lane: str = QUEUE) -> str:
    """One try, in `lane`; the outcome it logged ('' when the webhook is gone or the try was run already,
    `forwarded` when it was sent to the slow lane unposted, `waiting` when the slow lane put it back for its
    tenant's share). Raises TryInFlight when another worker holds the try (see the module's docstring)."""
    hook = deps.webhooks.get(message.kb_id, message.webhook_id)
    if hook is None:
        return ""  # deleted: its log went with it
    if lane == QUEUE and is_degraded(hook.failure_score):
        # not claimed here: the slow lane claims it, so a copy forwarded twice is run once
        deps.queue.send_raw(SLOW_QUEUE, message.model_dump())
        logger.info(
            "webhook try forwarded to the slow lane",
            extra={"webhook_id": hook.id, "delivery_id": message.delivery_id, "score": hook.failure_score},
        )
        return "forwarded"
    this_try = DeliveryTry(hook.id, message.delivery_id, message.parked, message.attempt, message.paused)
    if lane != SLOW_QUEUE:
        return _run_try(deps, hook, message, lane, this_try)
    # the slow lane: at most the tenant's share of its workers (services/lane_shares.py)
    slot = f"{hook.id}#{message.delivery_id}#{message.parked}#{message.attempt}#{message.paused}"
    share = take_slot(deps, hook.tenant_id, slot)
    if not share.may_run:  # back on the queue unclaimed and unposted: the worker takes another tenant's try
        deps.queue.send_raw(SLOW_QUEUE, message.model_dump(), delay_seconds=share.wait_seconds)
        return "waiting"
    try:
        return _run_try(deps, hook, message, lane, this_try)
    finally:
        if share.owned:
            give_slot_back(deps, hook.tenant_id, slot)


def _run_try(
    deps: Dependencies, hook: Webhook, message: DeliveryMessage, lane: str, this_try: DeliveryTry
) -> str:
    claim = deps.webhooks.claim_try(hook.kb_id, this_try, STALE_TRY_SECONDS)
    if claim.state == "finished":
        return ""
    if claim.state == "busy":
        raise TryInFlight(f"delivery {message.delivery_id} try {message.attempt} is being run")
    event_type = str(message.event.get("type", ""))
    last_try = message.attempt >= deps.settings.webhook_max_attempts
    now = int(time.time())
    score = hook.failure_score  # as this try leaves it (a posted one moves it): its next try's lane
    if not hook.enabled:
        tried = _Tried("dropped", reason="the webhook was switched off")
    elif event_type not in hook.event_types:
        tried = _Tried("dropped", reason=f"the webhook no longer takes {event_type!r} events")
    elif hook.paused_at and not _claims_probe(deps, hook, message, now):
        paused = f"the webhook is paused after {hook.failures_in_a_row} failed tries in a row"
        # a redriven letter that lost the probe to a try in flight waits for the next one, whatever its age
        young = message.redriven or _age_seconds(message, now) < PAUSED_KEEP_SECONDS
        if young and message.paused < MAX_PAUSED_TRIES:
            tried = _Tried("paused", reason=paused)
        else:
            kept = f"not delivered within {PAUSED_KEEP_SECONDS // 3600} h of its event: {paused}"
            tried = _Tried("dead_lettered", reason=kept)
    else:
        tried = _post(deps, hook, message, last_try)
        score = _count(deps, hook, tried)
    deps.webhooks.log_delivery(
        hook.kb_id,
        DeliveryRecord(
            webhook_id=hook.id,
            delivery_id=message.delivery_id,
            event_id=str(message.event.get("event_id", "")),
            event_type=event_type,
            attempt=message.attempt,
            outcome=tried.outcome,
            status_class=status_class(tried.status),
            duration_ms=tried.duration_ms,
            at=claim.at,  # a taken-over try overwrites what its first holder logged
            reason=tried.reason,
        ),
    )
    backoff = retry_delay(message.attempt, deps.settings.webhook_backoff_seconds, 0.5 + random.random() / 2)
    if tried.outcome == "retrying":
        retry = message.model_copy(update={"attempt": message.attempt + 1, "paused": 0, "redriven": False})
        deps.queue.send_raw(
            SLOW_QUEUE if is_degraded(score) else QUEUE, retry.model_dump(), delay_seconds=backoff
        )
    elif tried.outcome == "paused":  # the same attempt again, due when the next probe may go
        again = message.model_copy(update={"paused": message.paused + 1, "redriven": False})
        delay = min(MAX_RETRY_DELAY, max(backoff, hook.probe_at - now))
        deps.queue.send_raw(
            SLOW_QUEUE if is_degraded(score) else QUEUE, again.model_dump(), delay_seconds=delay
        )
    elif tried.outcome in ("dead_lettered", "refused"):
        parked = message.model_copy(update={"parked": message.parked + 1, "paused": 0, "redriven": True})
        deps.queue.dead_letter(lane, parked.model_dump_json(), tried.reason)
        logger.warning(
            "webhook delivery parked",
            extra={"webhook_id": hook.id, "delivery_id": message.delivery_id, "outcome": tried.outcome},
        )
    deps.webhooks.finish_try(hook.kb_id, this_try)
    return tried.outcome


def _post(deps: Dependencies, hook: Webhook, message: DeliveryMessage, last_try: bool) -> _Tried:
    """Signs and posts the event: delivered, retrying, or dead_lettered/refused with the parking reason."""
    body = json.dumps(message.event, ensure_ascii=False, separators=(",", ":")).encode()
    sent_at = datetime.now(UTC)
    own, *previous = signing_secrets(hook.secret, hook.previous_secrets, to_iso(sent_at))
    headers = {
        "Content-Type": "application/json",
        SIGNATURE_HEADER: signature_header(own, int(sent_at.timestamp()), body, *previous),
        EVENT_HEADER: str(message.event.get("type", "")),
        DELIVERY_HEADER: message.delivery_id,
    }
    started = time.monotonic()
    status: int | None = None
    answered_in: int | None = None
    refused = False
    try:
        answer = deps.webhook_sender.post(hook.url, body, headers)
        status, answered_in = answer.status, answer.duration_ms
    except FetchFailed as error:  # nothing answered (timeout, refused connection) or the URL is blocked now
        # Only the SSRF check's refusal parks at once; any other failure, a redirect the client does not
        # follow included, is an answer that is not a 2xx: retried, then parked after the last try.
        refused = error.permanent and error.code in REFUSED_CODES
        status = error.status
    # an answer's time as the sender took it (the post alone); ours when nothing answered
    duration_ms = int((time.monotonic() - started) * 1000) if answered_in is None else answered_in
    if status is not None and 200 <= status < 300:
        return _Tried("delivered", status, duration_ms)
    if refused:
        return _Tried("refused", status, duration_ms, "the webhook URL is refused by the SSRF check")
    if last_try:
        reason = f"not delivered after {message.attempt} tries (last answer: {status_class(status)})"
        return _Tried("dead_lettered", status, duration_ms, reason)
    return _Tried("retrying", status, duration_ms)


def _claims_probe(deps: Dependencies, hook: Webhook, message: DeliveryMessage, now: int) -> bool:
    """Whether this try of a paused webhook goes as its probe: the one whose time has come, or a redriven
    letter's whatever the time (the operator asked for it now; a concurrent claim still wins alone)."""
    due = max(now, hook.probe_at) if message.redriven else now
    return deps.webhooks.claim_probe(hook.kb_id, hook.id, due, now + _probe_delay(hook))


def _age_seconds(message: DeliveryMessage, now: int) -> float:
    """How long ago the delivery's event happened; an event without a readable time counts as too old to
    be put off (it is parked, for a redrive)."""
    try:
        return now - from_iso(str(message.event.get("time", ""))).timestamp()
    except ValueError:
        return float("inf")


def _count(deps: Dependencies, hook: Webhook, tried: _Tried) -> int:
    """The breaker: a posted try that failed, or was delivered but took more than half the timeout (a
    receiver that holds a worker nearly as long as one that never answers; the delivery stands), adds to
    the webhook's failures in a row, and the one that reaches PAUSE_AFTER_FAILURES pauses it. Any other
    delivered try clears them, whatever the read before its post showed (other workers may have counted
    failures meanwhile): one write, conditional on there being something to clear, which resumes a paused
    webhook (a probe's, a redriven letter's, or one that was posted when the pause landed).

    The same writes move the webhook's `failure_score` (up to FAILURE_SCORE_CAP, down to 0). Answers the
    score this try leaves (a failure's: as written; a delivered try's: as its read and the try tell it): the
    lane of the next try (other workers' tries may move the stored one meanwhile; the next try's own read
    decides again).

    A worker that dies between count_failure and finish_try counts its try twice: the stale claim is taken
    over, the try posted again and counted again, so the pause may come after 4 real failures in a row.
    Accepted: it is rare, and the first probe comes PROBE_SECONDS later."""
    said = {"kb_id": hook.kb_id, "webhook_id": hook.id, "tenant_id": hook.tenant_id}
    slow = tried.duration_ms > deps.settings.webhook_timeout_seconds * 1000 / 2
    if tried.outcome == "delivered" and not slow:
        if deps.webhooks.clear_failures(hook.kb_id, hook.id):
            logger.info("webhook resumed: a try was delivered", extra=said)
        return max(0, hook.failure_score - 1)
    first_probe = int(time.time()) + PROBE_SECONDS
    counted = deps.webhooks.count_failure(
        hook.kb_id,
        hook.id,
        PAUSE_AFTER_FAILURES,
        first_probe,
        score_cap=FAILURE_SCORE_CAP,
        score_read=hook.failure_score,
    )
    if counted.paused:
        logger.warning("webhook paused: its tries failed in a row", extra=said)
    if (
        counted.raised and counted.score == DEGRADED_SCORE
    ):  # the write that made it degraded, whoever read what
        logger.warning("webhook degraded: its tries go to the slow lane", extra=said)
    return counted.score


def _probe_delay(hook: Webhook) -> int:
    """The wait before the probe after this one: PROBE_SECONDS, doubled per probe claimed since the pause
    (the count claim_probe keeps: the tries other workers had in flight when it paused do not add to it),
    at most 900 s."""
    return retry_delay(hook.probes + 1, PROBE_SECONDS, 1.0)
