"""The webhooks' slow lane through the local stack (SQS on moto, the template's queues, each lane's handler
polled as on AWS): a receiver that fails four tries in five ends up in the slow lane (`webhooks-slow`), while
another tenant's healthy webhook has every delivery of the same period go through the main lane."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest

from chalicelib.bootstrap import Services
from chalicelib.domain.events import EventType, knowledge_event
from chalicelib.local.runtime import LocalRuntime
from chalicelib.net.ssrf import AllowList
from chalicelib.net.urlimport import SafeUrlImporter
from chalicelib.net.webhooks import SafeWebhookSender
from chalicelib.services.events import announce
from chalicelib.services.webhook_messages import DEGRADED_SCORE, DeliveryMessage
from chalicelib.stages import webhooks as stage

from .conftest import Api

MAIN, SLOW = "webhooks", "webhooks-slow"


class ScriptedReceiver:
    """A local HTTP server answering its POSTs from a pattern in a loop (`F`: 500, `D`: 204)."""

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.posts = 0
        lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    n = receiver.posts
                    receiver.posts += 1
                self.send_response(500 if receiver.pattern[n % len(receiver.pattern)] == "F" else 204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/weknora"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers() -> Iterator[tuple[ScriptedReceiver, ScriptedReceiver]]:
    mostly_down, healthy = ScriptedReceiver("FFFFD"), ScriptedReceiver("D")
    yield mostly_down, healthy
    mostly_down.close()
    healthy.close()


@pytest.fixture
def tries(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    """Each try a lane's handler ran: (lane, webhook id, outcome)."""
    seen: list[tuple[str, str, str]] = []
    deliver = stage.deliver

    def recorded(deps: Any, message: DeliveryMessage, lane: str = MAIN) -> str:
        outcome = deliver(deps, message, lane)
        seen.append((lane, message.webhook_id, outcome))
        return outcome

    monkeypatch.setattr(stage, "deliver", recorded)
    return seen


def test_a_receiver_failing_four_tries_in_five_ends_in_the_slow_lane_while_a_healthy_one_stays_in_the_main(
    api: Api,
    other_api: Api,
    runtime: LocalRuntime,
    services: Services,
    receivers: tuple[ScriptedReceiver, ScriptedReceiver],
    tries: list[tuple[str, str, str]],
) -> None:
    mostly_down, healthy = receivers
    services.settings = replace(
        services.settings,
        ssrf_allow=(f"127.0.0.1:{mostly_down.port}", f"127.0.0.1:{healthy.port}"),
        webhook_max_attempts=5,
        webhook_backoff_seconds=1,
    )
    allow = AllowList.parse(services.settings.ssrf_allow)
    services.urls = SafeUrlImporter(allow)
    services.webhook_sender = SafeWebhookSender(allow, timeout=5.0)
    kb, other_kb = api.create_kb(), other_api.create_kb()
    bad = api.post(
        f"/knowledge-bases/{kb['id']}/webhooks",
        {"url": mostly_down.url, "event_types": ["Knowledge Created"]},
    ).json_body["data"]
    good = other_api.post(
        f"/knowledge-bases/{other_kb['id']}/webhooks",
        {"url": healthy.url, "event_types": ["Knowledge Created"]},
    ).json_body["data"]

    for n in range(6):  # the same period: each round announces one change in each knowledge base
        announce(
            services,
            *(
                knowledge_event(
                    EventType.KNOWLEDGE_CREATED,
                    tenant_id=b["tenant_id"],
                    kb_id=b["id"],
                    knowledge_id=f"k-{n}-{b['id']}",
                    status="pending",
                    attempt=1,
                )
                for b in (kb, other_kb)
            ),
        )
        runtime.drain(timeout=120)

    shown = api.get(f"/knowledge-bases/{kb['id']}/webhooks/{bad['id']}").json_body["data"]
    assert (shown["delivery_lane"], shown["delivery_status"]) == ("slow", "active")  # never paused
    assert shown["failure_score"] >= DEGRADED_SCORE
    other = other_api.get(f"/knowledge-bases/{other_kb['id']}/webhooks/{good['id']}").json_body["data"]
    assert (other["delivery_lane"], other["failure_score"]) == ("normal", 0)

    good_tries = [(lane, outcome) for lane, hook, outcome in tries if hook == good["id"]]
    assert good_tries == [(MAIN, "delivered")] * 6  # every delivery of the period, in the main lane
    bad_posted = [lane for lane, hook, o in tries if hook == bad["id"] and o in ("delivered", "retrying")]
    assert bad_posted[:DEGRADED_SCORE] == [MAIN] * DEGRADED_SCORE  # until its score reached the threshold
    assert set(bad_posted[DEGRADED_SCORE:]) == {SLOW} and len(bad_posted) == mostly_down.posts > 10
    log = api.get(f"/knowledge-bases/{kb['id']}/webhooks/{bad['id']}/deliveries").json_body["data"]
    assert {d["outcome"] for d in log} <= {"delivered", "retrying"}  # nothing parked, nothing paused

    # the slow lane is a queue of the stack with its own DLQ (the template's redrive policy)
    sqs = boto3.client("sqs")
    url = sqs.get_queue_url(QueueName=services.settings.queue(SLOW))["QueueUrl"]
    policy = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]
    assert services.settings.queue(SLOW) + "-dlq" in policy["RedrivePolicy"]
