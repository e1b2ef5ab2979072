"""The messages of the `webhooks` queue (and of its slow lane, `webhooks-slow`, which carries the tries of
degraded webhooks: DeliveryMessage only): one try of a delivery to one webhook (`DeliveryMessage`, fanned
out by services/events.py), an event whose deliveries are still to be fanned out because the webhooks
table did not answer when it was announced (`FanOutMessage`), or a change the state machine decided and
asks to be announced (`AnnounceMessage`). Read by the queue's handler (stages/webhooks.py) and by the DLQ
redrive."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from chalicelib.domain.events import Event, EventType
from chalicelib.settings import WEBHOOK_MAX_ATTEMPTS_LIMIT

#: the most put-offs of one attempt a message carries (a day's worth at one a second)
MAX_PAUSED_TRIES = 100_000
#: the delivery lanes (stages/webhooks.py): a webhook whose `failure_score` (one more per posted try that
#: failed or was slow, one less per delivered try) is at or above DEGRADED_SCORE has its tries sent to the
#: slow lane, a queue of its own whose worker runs at most 2 at once, so a receiver that fails most of its
#: tries (never five in a row, which the breaker pauses) no longer holds the main lane's workers; the score
#: stays between 0 and FAILURE_SCORE_CAP, so a webhook that is well again leaves the lane after as many
#: delivered tries as it took to come down to the threshold
DEGRADED_SCORE = 3
FAILURE_SCORE_CAP = 10
NORMAL_LANE, SLOW_LANE = "normal", "slow"


def is_degraded(failure_score: int) -> bool:
    """Whether a webhook of this score has its tries sent to the slow lane."""
    return failure_score >= DEGRADED_SCORE


def delivery_lane(failure_score: int) -> str:
    """The lane a webhook of this score is in, as GET shows it."""
    return SLOW_LANE if is_degraded(failure_score) else NORMAL_LANE


class DeliveryMessage(BaseModel):
    kb_id: str = Field(min_length=1, max_length=100)
    webhook_id: str = Field(min_length=1, max_length=100)
    delivery_id: str = Field(min_length=1, max_length=100)
    attempt: int = Field(ge=1, le=WEBHOOK_MAX_ATTEMPTS_LIMIT)
    #: how often the delivery was parked in the DLQ before (a redriven letter claims its tries afresh)
    parked: int = Field(default=0, ge=0, le=1000)
    #: how often this attempt was put off while its webhook was paused (stages/webhooks.py: each put-off
    #: waits at least a second, and a delivery is put off for at most a day)
    paused: int = Field(default=0, ge=0, le=MAX_PAUSED_TRIES)
    #: a letter from the DLQ (set on the parked copy): its next try is an operator's redrive, which may take
    #: the paused webhook's probe whatever its time
    redriven: bool = False
    event: dict[str, Any]


class FanOutMessage(BaseModel):
    """An announced event (a pointer: its ids and its detail, as its deliveries carry it) whose webhooks are
    still to be read; the handler sends one DeliveryMessage per webhook that asked for its type."""

    fan_out: EventType
    event_id: str = Field(min_length=1, max_length=100)
    kb_id: str = Field(min_length=1, max_length=100)
    event: dict[str, Any]

    @model_validator(mode="after")
    def _pointer_matches_its_detail(self) -> FanOutMessage:
        said = (self.event.get("type"), self.event.get("event_id"), self.event.get("kb_id"))
        if said != (self.fan_out.value, self.event_id, self.kb_id):
            raise ValueError("the event's type, id and knowledge base differ from the message's")
        return self

    @classmethod
    def of(cls, event: Event) -> FanOutMessage:
        return cls(fan_out=event.type, event_id=event.event_id, kb_id=event.kb_id, event=dict(event.detail))

    def to_event(self) -> Event:
        return Event(self.fan_out, self.event)


class AnnounceMessage(BaseModel):
    """A change the state machine decided (infra/statemachine/knowledge.asl.json)."""

    announce: Literal["Knowledge Completed", "Knowledge Failed"]
    knowledge_id: str = Field(min_length=1, max_length=100)
    attempt: int = Field(ge=1)
    error_code: str = Field(default="", max_length=64)
    error_message: str = Field(default="", max_length=500)


WebhookMessage = DeliveryMessage | FanOutMessage | AnnounceMessage


def read_webhook_message(body: str) -> WebhookMessage:
    """The message a body holds, told apart by its top-level `announce` or `fan_out` key (never by the
    text: an event may carry the words); raises pydantic's ValidationError for anything else."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    keys = data if isinstance(data, dict) else {}
    model: type[WebhookMessage] = (
        AnnounceMessage if "announce" in keys else FanOutMessage if "fan_out" in keys else DeliveryMessage
    )
    return model.model_validate_json(body)
