"""Events and webhooks: where announced changes go, and the knowledge bases' webhooks with their delivery logs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from chalicelib.domain.events import Event
from chalicelib.domain.webhooks import PreviousSecret


class EventPublisher(Protocol):
    def publish(self, events: Sequence[Event]) -> None:
        """Puts the events on the stack's bus (batched). Best effort: a change is already decided and
        stored when it is announced, so a failed put is logged and counted, never raised into the stage."""
        ...


@dataclass
class Webhook:
    id: str
    tenant_id: str
    kb_id: str
    url: str
    event_types: list[str]
    #: the HMAC key; shown once, in the answer to the creation or to a rotation
    secret: str
    enabled: bool = True
    description: str = ""
    created_at: str = ""
    updated_at: str = ""
    #: the keys rotations replaced, newest first (domain.webhooks.rotated_previous): each signs deliveries
    #: too until its own expiry, so a receiver can switch without missing one
    previous_secrets: list[PreviousSecret] = field(default_factory=list)
    #: the delivery breaker (stages/webhooks.py): posted tries that failed in a row, and while the webhook is
    #: paused, since when (ISO; "" when not paused), when its next probe may go (epoch seconds) and how many
    #: probes were claimed since the pause (the next one's wait doubles with each)
    failures_in_a_row: int = 0
    paused_at: str = ""
    probe_at: int = 0
    probes: int = 0
    #: the delivery lane's score (stages/webhooks.py): one more per posted try that failed or was slow, one
    #: less per delivered try, between 0 and the cap count_failure is given; the webhook's tries go to the
    #: slow lane while it is at or above services.webhook_messages.DEGRADED_SCORE
    failure_score: int = 0

    def settings(self) -> tuple[str, tuple[str, ...], bool, str, str]:
        """What a change of settings writes (`WebhookRepo.update`): the fields another PUT may have changed
        between a read and a write (`updated_at` among them, so any PUT that landed shows)."""
        return (self.url, tuple(self.event_types), self.enabled, self.description, self.updated_at)


#: what `WebhookRepo.update` did: `written`; `gone` (deleted meanwhile, nothing written); `changed` (its
#: settings are no longer those the caller read: nothing written, read again and re-apply the change)
WebhookUpdate = Literal["written", "gone", "changed"]


@dataclass(frozen=True)
class DeliveryRecord:
    """One try of one delivery, as the webhook's log shows it: nothing of what the receiver answered but
    the class of its status code (`2xx`, `5xx`, or `none` when nothing answered) and the time it took."""

    webhook_id: str
    delivery_id: str
    event_id: str
    event_type: str
    attempt: int
    #: delivered | retrying | dead_lettered | refused | paused (not posted: the webhook is paused; tried
    #: again later) | dropped (never to be posted: the webhook was switched off or no longer takes the type)
    outcome: str
    status_class: str
    duration_ms: int
    at: str
    #: why it was not delivered, in our words (never the receiver's): "" for a delivered or retried try
    reason: str = ""
    extra: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DeliveryTry:
    """One try of one delivery: the (webhook, delivery, parked, attempt) the webhooks stage claims before it
    posts (`WebhookRepo.claim_try`), so a redelivered message never runs a try twice."""

    webhook_id: str
    delivery_id: str
    #: how often the delivery was parked in the DLQ before: a letter redriven from there claims afresh
    parked: int
    attempt: int
    #: how often this attempt was put off while its webhook was paused (each put-off is a try of its own)
    paused: int = 0


@dataclass(frozen=True)
class FailureCounted:
    """What `count_failure` wrote: whether it paused the webhook, and its `failure_score` as written (and
    whether this write raised it: not at the cap, nor when the webhook is gone)."""

    paused: bool
    score: int
    raised: bool


@dataclass(frozen=True)
class TryClaim:
    #: `claimed`: the caller runs the try (the first claim, or one taken over from a holder that died);
    #: `finished`: it ran to its end already (its next step is queued); `busy`: another worker holds it now
    state: Literal["claimed", "finished", "busy"]
    #: when the try was first claimed (ISO): the time of its log entry, so a taken-over try overwrites it
    at: str


class WebhookRepo(Protocol):
    def create(self, webhook: Webhook, cap: int) -> bool:
        """Writes a new webhook only while its knowledge base holds fewer than `cap` (one conditional write
        with the count, so concurrent creates never pass it): False, nothing written, at the cap."""
        ...

    def put(self, webhook: Webhook) -> None:
        """Writes the webhook as it is, outside the count `create` keeps (a store's seeding, tests)."""
        ...

    def update(self, webhook: Webhook, *, read: Webhook, resume: bool = False) -> WebhookUpdate:
        """Writes the webhook's settings (URL, event types, description, enabled, updated_at) in one
        conditional write, only while it exists and its stored settings are still `read`'s (the webhook as
        the caller read it, before applying its change): `gone` when it was deleted meanwhile (an update
        racing a delete never brings it back), `changed` when another change of settings landed since the
        read (nothing written: the caller reads again and re-applies its own fields, so neither change is
        lost). Its secrets stay as stored: a rotation between the read and this write holds (a store that
        keeps the secret beside the settings tries again with the rotated one; Conflict
        `webhook_write_conflict` when rotations keep coming between). The breaker's state stays too (its
        writes never make this one `changed`), unless `resume`: then the same write clears it (no failures,
        not paused, no probes, a score of 0)."""
        ...

    def rotate_secret(self, webhook: Webhook, expected_secret: str) -> bool:
        """Writes the webhook's `secret` and `previous_secrets` (nothing else) in one conditional write, only
        while its stored secret is still `expected_secret` (the one the caller read and keeps as the newest
        previous one): False when another rotation came first or it was deleted."""
        ...

    def get(self, kb_id: str, webhook_id: str) -> Webhook | None: ...

    def list_kb(self, kb_id: str) -> list[Webhook]: ...

    def delete(self, kb_id: str, webhook_id: str) -> bool:
        """False when it was already gone; its place under the cap is given back once, by the delete that
        removed it."""
        ...

    def log_delivery(self, kb_id: str, record: DeliveryRecord) -> None:
        """Adds one try to the webhook's delivery log (a repeat of the same try overwrites it)."""
        ...

    def deliveries(self, kb_id: str, webhook_id: str, limit: int = 50) -> list[DeliveryRecord]:
        """The webhook's latest tries, newest first."""
        ...

    def claim_try(self, kb_id: str, delivery_try: DeliveryTry, stale_after_seconds: int) -> TryClaim:
        """Claims one try with a conditional write: `claimed` when it was never claimed, or when its claim
        is unfinished and older than `stale_after_seconds` (its holder died: the claim is taken over and its
        first time kept); otherwise `finished` or `busy`. The claim goes with its webhook."""
        ...

    def finish_try(self, kb_id: str, delivery_try: DeliveryTry) -> None:
        """Marks a claimed try finished: every later claim of it answers `finished`."""
        ...

    def count_failure(
        self,
        kb_id: str,
        webhook_id: str,
        pause_after: int,
        probe_at: int,
        score_cap: int = 10,
        score_read: int = 0,
    ) -> FailureCounted:
        """Adds one to the webhook's failures in a row and, below `score_cap`, one to its `failure_score`
        (one atomic write; the failure alone, in one write, when the caller read the score at the cap) and,
        when the failures reach `pause_after` and it is not paused, pauses it with its first probe at
        `probe_at` (epoch seconds): `paused` for the one call that paused it. Nothing when the webhook is
        gone."""
        ...

    def clear_failures(self, kb_id: str, webhook_id: str) -> bool:
        """A delivered try: no failures in a row, not paused, no probes, and one less on its
        `failure_score` (never below 0); one write conditional on any of them being there (a score above 0),
        so a healthy webhook's item is left as it is. True when it was paused (the write resumed it).
        Nothing when the webhook is gone."""
        ...

    def claim_probe(self, kb_id: str, webhook_id: str, now: int, next_probe_at: int) -> bool:
        """While the webhook is paused and its probe time has come (`now` at or past it), moves that time to
        `next_probe_at` and adds one to its probes in one conditional write: True for the one caller that may
        post (the probe), False for every other, and when it is not paused (any more) or gone."""
        ...


@dataclass(frozen=True)
class WebhookAnswer:
    """What the delivery keeps of a receiver's answer: its status code and how long it took, nothing else."""

    status: int
    duration_ms: int


class WebhookSender(Protocol):
    def post(self, url: str, body: bytes, headers: dict[str, str]) -> WebhookAnswer:
        """POSTs through the SSRF-safe client (no redirects followed). Raises FetchFailed when the URL is
        blocked (`permanent`) or nothing answered in time."""
        ...
