"""Events and webhooks on moto: one document's events read back from the stack's EventBridge bus (a pattern
rule on the bus targeting an SQS queue, which moto delivers), and webhooks delivered to a receiver in this
test that the operator whitelisted, signed, retried and parked."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from scripted_llm import CHAT, ScriptedLLM, use_models

from chalicelib.bootstrap import Services
from chalicelib.domain.errors import PermanentStageError, SpanErrorCode
from chalicelib.domain.events import EVENT_SOURCE
from chalicelib.domain.webhooks import delivery_id, verify
from chalicelib.local.runtime import LocalRuntime
from chalicelib.net.ssrf import AllowList
from chalicelib.net.urlimport import SafeUrlImporter
from chalicelib.net.webhooks import SafeWebhookSender
from chalicelib.ports import ReadRequest, ReadResult, ServiceUnreachable, Webhook

from .conftest import Api

TEXT = b"# Lighthouses\n\nThe keeper logs the weather at dawn and at dusk, and trims the wick at noon.\n"


@dataclass
class EventTap:
    """A pattern rule on the bus (this service's source) with an SQS queue as its target."""

    sqs: Any
    url: str
    seen: list[dict[str, Any]] = field(default_factory=list)

    def read(self, knowledge_id: str, until: str, timeout: float = 20.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = self.sqs.receive_message(QueueUrl=self.url, MaxNumberOfMessages=10, WaitTimeSeconds=0)
            for message in answer.get("Messages", []):
                self.seen.append(json.loads(message["Body"]))
                self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=message["ReceiptHandle"])
            mine = [e for e in self.seen if e["detail"]["knowledge_id"] == knowledge_id]
            if any(e["detail-type"] == until for e in mine):
                return mine
            time.sleep(0.1)
        raise AssertionError(f"no {until} event for {knowledge_id}: {self.seen}")


@pytest.fixture
def tap(runtime: LocalRuntime, services: Services) -> Iterator[EventTap]:
    events = boto3.client("events")
    sqs = boto3.client("sqs")
    bus = services.settings.event_bus_name
    url = sqs.create_queue(QueueName=f"event-tap-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    events.put_rule(Name="tap", EventBusName=bus, EventPattern=json.dumps({"source": [EVENT_SOURCE]}))
    events.put_targets(Rule="tap", EventBusName=bus, Targets=[{"Id": "tap", "Arn": arn}])
    try:
        yield EventTap(sqs, url)
    finally:  # the stack as it was: the next test's reset empties it in place
        events.remove_targets(Rule="tap", EventBusName=bus, Ids=["tap"])
        events.delete_rule(Name="tap", EventBusName=bus)
        sqs.delete_queue(QueueUrl=url)


class Refusing:
    name = "refusing"

    def read(self, request: ReadRequest) -> ReadResult:
        raise PermanentStageError("encrypted PDF", code=SpanErrorCode.UNSUPPORTED_TYPE)

    def page_count(self, request: ReadRequest) -> int | None:
        return None

    def engines(self) -> list[dict[str, object]]:
        return []


def test_one_documents_events_arrive_on_the_bus_in_order(
    api: Api, runtime: LocalRuntime, tap: EventTap
) -> None:
    kb = api.create_kb()
    created = api.upload(kb["id"], "notes.md", TEXT).json_body["data"]
    runtime.drain(timeout=120)

    events = tap.read(created["id"], until="Knowledge Completed")
    knowledge_events = [e["detail-type"] for e in events if e["detail-type"].startswith("Knowledge")]
    assert knowledge_events == ["Knowledge Created", "Knowledge Completed"]
    first, last = events[0], events[-1]
    assert first["source"] == EVENT_SOURCE
    assert first["detail"]["status"] == "pending" and last["detail"]["status"] == "completed"
    assert last["detail"]["kb_id"] == kb["id"] and last["detail"]["attempt"] == 1
    assert last["detail"]["error"] is None
    assert [e["detail"]["time"] for e in events] == sorted(e["detail"]["time"] for e in events)


def test_a_failed_document_announces_its_code_and_message(
    api: Api, runtime: LocalRuntime, services: Services, tap: EventTap
) -> None:
    services.replace_docreader(Refusing())
    kb = api.create_kb()
    created = api.upload(kb["id"], "locked.md", TEXT).json_body["data"]
    runtime.drain(timeout=120)

    events = tap.read(created["id"], until="Knowledge Failed")
    assert [e["detail-type"] for e in events] == ["Knowledge Created", "Knowledge Failed"]
    assert events[-1]["detail"]["error"] == {
        "code": SpanErrorCode.UNSUPPORTED_TYPE,
        "message": "encrypted PDF",
    }


def test_whichever_side_promotes_the_document_completed_is_announced_once(
    api: Api, runtime: LocalRuntime, services: Services, tap: EventTap
) -> None:
    """A subtask that answers a failure (the wiki's model rejects the request) leaves its slot to the
    machine (RunSubtask's Catch: ReleaseSlot, PromoteIfLast); when the machine's promotion is the one whose
    condition held, it sends AnnounceCompleted to the webhooks queue, whose handler announces it. Either
    way the document's completion is announced exactly once."""
    with ScriptedLLM() as llm:
        use_models(services, llm)
        llm.fail_kinds = {"wiki"}
        kb = api.create_kb(summary_model_id=CHAT, indexing_strategy={"wiki_enabled": True})
        created = api.upload(kb["id"], "f.md", b"# F\n\n" + b"Ferries cross the sound. " * 20).json_body[
            "data"
        ]
        runtime.drain(timeout=300)
    events = tap.read(created["id"], until="Knowledge Completed")
    time.sleep(0.5)
    events = tap.read(created["id"], until="Knowledge Completed")
    assert [e["detail-type"] for e in events].count("Knowledge Completed") == 1
    sfn = boto3.client("stepfunctions")
    (execution,) = [
        e
        for e in sfn.list_executions(stateMachineArn=services.workflow.state_machine_arn)["executions"]  # type: ignore[attr-defined]
        if e["name"].startswith(created["id"])
    ]
    history = sfn.get_execution_history(executionArn=execution["executionArn"], maxResults=1000)["events"]
    entered = [e["stateEnteredEventDetails"]["name"] for e in history if e["type"].endswith("StateEntered")]
    assert entered.count("PromoteIfLast") == 1
    assert entered.count("AnnounceCompleted") <= 1


# ---------------------------------------------------------------- webhooks


class Receiver:
    """A local HTTP server recording each POST (headers, raw body) and answering `status`."""

    def __init__(self, status: int = 204) -> None:
        self.status = status
        self.received: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.received.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/weknora"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


def whitelist(services: Services, port: int) -> None:
    """What the operator does with SSRF_WHITELIST=127.0.0.1:<port>, as the composition root wires it."""
    services.settings = replace(
        services.settings,
        ssrf_allow=(f"127.0.0.1:{port}",),
        webhook_max_attempts=3,
        webhook_backoff_seconds=1,
    )
    allow = AllowList.parse(services.settings.ssrf_allow)
    services.urls = SafeUrlImporter(allow)
    services.webhook_sender = SafeWebhookSender(allow, timeout=5.0)


def test_a_whitelisted_receiver_gets_a_signed_delivery_when_a_document_completes(
    api: Api, runtime: LocalRuntime, services: Services, receiver: Receiver
) -> None:
    whitelist(services, receiver.port)
    kb = api.create_kb()
    answer = api.post(
        f"/knowledge-bases/{kb['id']}/webhooks",
        {"url": receiver.url, "event_types": ["Knowledge Completed"]},
    )
    assert answer.status_code == 201, answer.json_body
    hook = answer.json_body["data"]
    secret = hook["secret"]
    assert secret.startswith("whsec_")
    assert "secret" not in api.get(f"/knowledge-bases/{kb['id']}/webhooks/{hook['id']}").json_body["data"]

    created = api.upload(kb["id"], "notes.md", TEXT).json_body["data"]
    runtime.drain(timeout=120)

    (headers, body), *others = receiver.received
    assert others == []  # only the type it asked for
    assert verify(secret, headers["x-weknora-signature"], body, now=int(time.time()))
    assert not verify("whsec_wrong", headers["x-weknora-signature"], body, now=int(time.time()))
    detail = json.loads(body)
    assert (detail["type"], detail["knowledge_id"], detail["status"]) == (
        "Knowledge Completed",
        created["id"],
        "completed",
    )
    assert headers["x-weknora-event"] == "Knowledge Completed"
    log = api.get(f"/knowledge-bases/{kb['id']}/webhooks/{hook['id']}/deliveries").json_body["data"]
    assert [(d["event_type"], d["attempt"], d["outcome"], d["status_class"]) for d in log] == [
        ("Knowledge Completed", 1, "delivered", "2xx")
    ]


def test_a_loopback_webhook_without_the_whitelist_is_refused(api: Api, receiver: Receiver) -> None:
    kb = api.create_kb()
    answer = api.post(
        f"/knowledge-bases/{kb['id']}/webhooks",
        {"url": receiver.url, "event_types": ["Knowledge Completed"]},
    )
    assert answer.status_code == 400
    assert answer.json_body["error"]["code"] == "ssrf_blocked"
    assert api.get(f"/knowledge-bases/{kb['id']}/webhooks").json_body["data"] == []


def test_a_receiver_answering_500_gets_retries_then_the_delivery_is_parked_and_logged(
    api: Api, runtime: LocalRuntime, services: Services
) -> None:
    failing = Receiver(status=500)
    try:
        whitelist(services, failing.port)
        kb = api.create_kb()
        hook = api.post(
            f"/knowledge-bases/{kb['id']}/webhooks",
            {"url": failing.url, "event_types": ["Knowledge Created"]},
        ).json_body["data"]
        api.upload(kb["id"], "notes.md", TEXT)
        runtime.drain(timeout=120)
    finally:
        failing.close()

    assert len(failing.received) == 3  # webhook_max_attempts
    ids = {headers["x-weknora-delivery"] for headers, _ in failing.received}
    assert len(ids) == 1  # one delivery, tried three times
    log = api.get(f"/knowledge-bases/{kb['id']}/webhooks/{hook['id']}/deliveries").json_body["data"]
    assert sorted((d["attempt"], d["outcome"], d["status_class"]) for d in log) == [
        (1, "retrying", "5xx"),
        (2, "retrying", "5xx"),
        (3, "dead_lettered", "5xx"),
    ]
    sqs = boto3.client("sqs")
    dlq = sqs.get_queue_url(QueueName=services.settings.queue("webhooks") + "-dlq")["QueueUrl"]
    parked = sqs.receive_message(QueueUrl=dlq, MaxNumberOfMessages=10).get("Messages", [])
    assert [json.loads(m["Body"])["webhook_id"] for m in parked] == [hook["id"]]


def test_an_announcement_whose_webhooks_read_fails_is_still_delivered_once_through_the_queue(
    api: Api, runtime: LocalRuntime, services: Services, receiver: Receiver
) -> None:
    """The upload's announcement cannot read the webhooks table: its fan-out goes on the webhooks queue (SQS,
    under the API's role), and that queue's handler reads the table and delivers (under its own role)."""
    whitelist(services, receiver.port)
    kb = api.create_kb()
    hook = api.post(
        f"/knowledge-bases/{kb['id']}/webhooks",
        {"url": receiver.url, "event_types": ["Knowledge Created"]},
    ).json_body["data"]
    read = services.webhooks.list_kb
    refused: list[str] = []

    def first_read_out(kb_id: str) -> list[Webhook]:
        if not refused:
            refused.append(kb_id)
            raise ServiceUnreachable("DynamoDB (webhooks) did not answer")
        return read(kb_id)

    services.webhooks.list_kb = first_read_out  # type: ignore[method-assign]
    try:
        answer = api.upload(kb["id"], "notes.md", TEXT)
        assert answer.status_code < 300 and refused == [kb["id"]]
        runtime.drain(timeout=120)
    finally:
        services.webhooks.list_kb = read  # type: ignore[method-assign]

    ((headers, body),) = receiver.received
    detail = json.loads(body)
    assert (detail["type"], detail["knowledge_id"]) == ("Knowledge Created", answer.json_body["data"]["id"])
    assert headers["x-weknora-delivery"] == delivery_id(detail["event_id"], hook["id"])
