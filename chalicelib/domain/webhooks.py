"""Webhook deliveries: the signature, the retry schedule and the class of a receiver's status code.

A delivery's body is the event's detail as JSON. It is signed with the webhook's secret:

    X-Weknora-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>

so a receiver recomputes the HMAC over the timestamp it was sent and the raw body, compares in constant
time, and refuses a timestamp too far from its clock (a replay). For a while after a rotation the header
carries one `v1=` per secret that still signs (`t=…,v1=<current>,v1=<previous>…`, as Stripe does): a
receiver accepts the delivery when any of them matches its secret.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from chalicelib.domain.clock import to_iso

SIGNATURE_HEADER = "X-Weknora-Signature"
EVENT_HEADER = "X-Weknora-Event"
DELIVERY_HEADER = "X-Weknora-Delivery"
SECRET_PREFIX = "whsec_"
#: the longest delay one retry waits (SQS DelaySeconds caps at 900)
MAX_RETRY_DELAY = 900
#: how long a rotated-out secret still signs deliveries, unless the rotation says otherwise
PREVIOUS_SECRET_SECONDS = 24 * 3600
PREVIOUS_SECRET_MAX_SECONDS = 7 * 24 * 3600
#: how many secrets that rotations replaced may sign beside the current one
MAX_PREVIOUS_SECRETS = 3


@dataclass(frozen=True)
class PreviousSecret:
    """A secret a rotation replaced: it still signs deliveries until `expires_at` (an ISO string of
    domain.clock; those compare as the times they are, so it stops then without a sweep)."""

    secret: str
    expires_at: str


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def delivery_id(event_id: str, webhook_id: str) -> str:
    """One event's delivery to one webhook, the same however often the event is announced (a state
    machine's announcement or a stage's message delivered again): its tries are claimed once, and the
    receiver sees one delivery id."""
    return hashlib.sha256(f"{event_id}|{webhook_id}".encode()).hexdigest()[:32]


def signature(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def still_signing(previous: Sequence[PreviousSecret], now: str) -> list[PreviousSecret]:
    """The previous secrets that have not expired at `now`, in their order (newest first)."""
    return [p for p in previous if now < p.expires_at]


def signing_secrets(secret: str, previous: Sequence[PreviousSecret], now: str) -> list[str]:
    """The secrets a delivery sent at `now` is signed with, in the header's order: the webhook's own first,
    then the replaced ones not yet expired, newest first, so the oldest comes last. The oldest is the one a
    receiver that never switched still has (a rotation whose answer was lost and was sent again replaced a
    secret nobody ever saw), and a receiver still on the README's snippet from before rotations keeps only
    the last `v1`."""
    return [secret, *(p.secret for p in still_signing(previous, now))]


def rotated_previous(
    secret: str, previous: Sequence[PreviousSecret], grace_seconds: int, now: datetime
) -> list[PreviousSecret]:
    """The previous secrets once a rotation replaces `secret`, newest first: `secret` signs for
    `grace_seconds` more, and every earlier one still signing keeps its own expiry (the grace asked by the
    rotation that replaced it), so a rotation sent twice never stops the secret the receiver has. The
    expired ones go. At most MAX_PREVIOUS_SECRETS: a fourth rotation within the grace periods drops the one
    that expires first (the oldest of those expiring together). A grace of 0 is for a leaked secret: every
    old secret stops now, the new one alone signs."""
    if not grace_seconds:
        return []
    expires_at = to_iso(now + timedelta(seconds=grace_seconds))
    kept = [PreviousSecret(secret, expires_at), *still_signing(previous, to_iso(now))]
    while len(kept) > MAX_PREVIOUS_SECRETS:
        kept.remove(min(reversed(kept), key=lambda p: p.expires_at))
    return kept


def signature_header(secret: str, timestamp: int, body: bytes, *also: str) -> str:
    """One `v1=` per secret, `secret`'s first, then `also` in its order (signing_secrets' order: the
    oldest previous secret last)."""
    signed = ",".join(f"v1={signature(key, timestamp, body)}" for key in (secret, *also))
    return f"t={timestamp},{signed}"


def verify(secret: str, header: str, body: bytes, *, now: int, tolerance: int = 300) -> bool:
    """What a receiver does (the README's snippet, and the tests): any `v1` may be the one of its secret."""
    pairs = [p.split("=", 1) for p in header.split(",") if "=" in p]
    stamps = [value for key, value in pairs if key == "t"]
    if len(stamps) != 1 or not (stamps[0].isascii() and stamps[0].isdigit()):  # "²" is a digit to isdigit
        return False
    timestamp = int(stamps[0])
    if abs(now - timestamp) > tolerance:
        return False
    expected = signature(secret, timestamp, body).encode()
    # bytes: compare_digest refuses a str with non-ASCII characters (a forged header) by raising
    return any(hmac.compare_digest(value.encode(), expected) for key, value in pairs if key == "v1")


def status_class(status: int | None) -> str:
    """`2xx` … `5xx`, or `none` when nothing answered: all the log keeps of an answer."""
    return f"{status // 100}xx" if status else "none"


def retry_delay(attempt: int, base: int, jitter: float) -> int:
    """The wait before try `attempt + 1`: base·2^(attempt-1), at most MAX_RETRY_DELAY, times `jitter`
    in [0.5, 1] so a receiver that comes back is not hit by every webhook at once."""
    return max(1, min(MAX_RETRY_DELAY, int(base * 2 ** (attempt - 1) * jitter)))
