"""Webhook deliveries: the signature, the retry schedule and the class of a receiver's status code.

A delivery's body is the event's detail as JSON. It is signed with the webhook's secret:

    X-Weknora-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>

so a receiver recomputes the HMAC over the timestamp it was sent and the raw body, compares in constant
time, and refuses a timestamp too far from its clock (a replay).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

SIGNATURE_HEADER = "X-Weknora-Signature"
EVENT_HEADER = "X-Weknora-Event"
DELIVERY_HEADER = "X-Weknora-Delivery"
SECRET_PREFIX = "whsec_"
#: the longest delay one retry waits (SQS DelaySeconds caps at 900)
MAX_RETRY_DELAY = 900


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


def signature_header(secret: str, timestamp: int, body: bytes) -> str:
    return f"t={timestamp},v1={signature(secret, timestamp, body)}"


def verify(secret: str, header: str, body: bytes, *, now: int, tolerance: int = 300) -> bool:
    """What a receiver does (the README's snippet, and the tests)."""
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        timestamp = int(parts["t"])
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance:
        return False
    return hmac.compare_digest(parts.get("v1", ""), signature(secret, timestamp, body))


def status_class(status: int | None) -> str:
    """`2xx` … `5xx`, or `none` when nothing answered: all the log keeps of an answer."""
    return f"{status // 100}xx" if status else "none"


def retry_delay(attempt: int, base: int, jitter: float) -> int:
    """The wait before try `attempt + 1`: base·2^(attempt-1), at most MAX_RETRY_DELAY, times `jitter`
    in [0.5, 1] so a receiver that comes back is not hit by every webhook at once."""
    return max(1, min(MAX_RETRY_DELAY, int(base * 2 ** (attempt - 1) * jitter)))
