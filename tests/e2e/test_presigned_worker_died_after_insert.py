"""A presigned upload through the real S3 event path (moto: PUT → ObjectCreated → uploads queue → handler)
whose first delivery fails after its row is inserted, while it announces the create: the queue's redelivery
announces it and queues the first stage, and the document completes (it stayed `pending` until housekeeping
failed it)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import requests

from chalicelib.bootstrap import Services
from chalicelib.domain.events import Event
from chalicelib.local.runtime import LocalRuntime

from .conftest import Api

TEXT = b"# Tides\n\nThe harbour master posts the tide table each morning.\n"


class BusTimedOut(Exception):
    """The Lambda's time ran out while the event was being put on the bus."""


def test_an_upload_whose_event_handler_failed_after_the_insert_is_announced_and_completes(
    api: Api, runtime: LocalRuntime, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    kb = api.create_kb()
    grant = api.post(
        f"/knowledge-bases/{kb['id']}/knowledge/upload-url", {"file_name": "tides.md"}
    ).json_body["data"]
    knowledge_id = grant["knowledge_id"]
    publish = services.events.publish
    created: list[str] = []

    def fails_once_on_the_create(events: Sequence[Event]) -> None:
        for event in events:
            if event.detail.get("knowledge_id") == knowledge_id and event.type.value == "Knowledge Created":
                created.append(event.event_id)
                if len(created) == 1:
                    raise BusTimedOut()
        publish(events)

    monkeypatch.setattr(services.events, "publish", fails_once_on_the_create)
    assert requests.put(grant["upload_url"], data=TEXT, timeout=30).status_code == 200
    runtime.drain(timeout=120)

    knowledge = api.knowledge(knowledge_id)
    assert knowledge["parse_status"] == "completed"
    assert len(created) == 2 and len(set(created)) == 1  # announced again, under the same id
