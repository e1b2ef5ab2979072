"""The messages of the `webhooks` queue: one try of a delivery to one webhook (`DeliveryMessage`, fanned
out by services/events.py), or a change the state machine decided and asks to be announced
(`AnnounceMessage`). Read by the queue's handler (stages/webhooks.py) and by the DLQ redrive."""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, Field


class DeliveryMessage(BaseModel):
    kb_id: str = Field(min_length=1, max_length=100)
    webhook_id: str = Field(min_length=1, max_length=100)
    delivery_id: str = Field(min_length=1, max_length=100)
    attempt: int = Field(ge=1, le=100)
    #: how often the delivery was parked in the DLQ before (a redriven letter claims its tries afresh)
    parked: int = Field(default=0, ge=0, le=1000)
    event: dict[str, Any]


class AnnounceMessage(BaseModel):
    """A change the state machine decided (infra/statemachine/knowledge.asl.json)."""

    announce: Literal["Knowledge Completed", "Knowledge Failed"]
    knowledge_id: str = Field(min_length=1, max_length=100)
    attempt: int = Field(ge=1)
    error_code: str = Field(default="", max_length=64)
    error_message: str = Field(default="", max_length=500)


def read_webhook_message(body: str) -> DeliveryMessage | AnnounceMessage:
    """The message a body holds, told apart by its top-level `announce` key (never by the text: an event
    may carry the word); raises pydantic's ValidationError for anything else."""
    try:
        data = json.loads(body)
    except ValueError:
        data = None
    model = AnnounceMessage if isinstance(data, dict) and "announce" in data else DeliveryMessage
    return model.model_validate_json(body)
