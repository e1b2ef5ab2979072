"""LocalRuntime against moto: the pollers, the scheduler, Step Functions callbacks, drain() and HTTP.

The Chalice app here is a tiny one built for the test, wired to the fixture template's queues.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote_plus

import boto3
import pytest
import requests
from chalice import Chalice, Rate

from chalicelib.local.moto_server import MotoServer
from chalicelib.local.runtime import LocalRuntime

TEMPLATE = Path(__file__).parent / "fixtures" / "template.json"
T0 = datetime(2026, 11, 30, 2, 30, tzinfo=UTC)


@dataclass
class Seen:
    work: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)  # (id, receive count, body)
    keys: list[str] = field(default_factory=list)
    test_events: int = 0
    scheduled: list[dict[str, Any]] = field(default_factory=list)
    contexts: list[Any] = field(default_factory=list)
    env_at_import: dict[str, str] = field(default_factory=dict)
    ignored_tokens: list[str] = field(default_factory=list)


def build_app(seen: Seen) -> Chalice:
    import os

    seen.env_at_import = {
        k: os.environ.get(k, "")
        for k in ("DOCS_TABLE", "WEKNORA_STATE_DIR", "AWS_ENDPOINT_URL", "FROM_CHALICE")
    }
    app = Chalice(app_name="lt")
    sfn: Any = boto3.client("stepfunctions")

    @app.on_sqs_message(queue="lt-work", batch_size=5)
    def work(event: Any) -> dict[str, Any]:
        failures = []
        for rec in event:
            raw = rec.to_dict()
            body = json.loads(rec.body)
            seen.work.append((raw["messageId"], raw["attributes"]["ApproximateReceiveCount"], body))
            if body.get("boom"):
                raise RuntimeError("handler crashed")
            if body.get("fail"):
                failures.append({"itemIdentifier": raw["messageId"]})
        seen.contexts.append(event.context)
        return {"batchItemFailures": failures}

    @app.on_sqs_message(queue="lt-ingest", batch_size=10)
    def ingest(event: Any) -> None:
        for rec in event:
            body = json.loads(rec.body)
            if body.get("Event") == "s3:TestEvent":
                seen.test_events += 1
                continue
            for r in body["Records"]:
                seen.keys.append(unquote_plus(r["s3"]["object"]["key"]))

    @app.on_sqs_message(queue="lt-task")
    def task(event: Any) -> None:
        for rec in event:
            msg = json.loads(rec.body)
            if msg["doc"] == "ignore":
                seen.ignored_tokens.append(msg["token"])
                continue  # never answers: the execution stays RUNNING
            sfn.send_task_success(taskToken=msg["token"], output=json.dumps({"words": len(msg["doc"])}))

    @app.schedule(Rate(5, unit=Rate.MINUTES))
    def sweep(event: Any) -> None:
        seen.scheduled.append({"name": "sweep", **event.to_dict()})

    @app.schedule("cron(0 3 * * ? *)")
    def nightly(event: Any) -> None:
        seen.scheduled.append({"name": "nightly", **event.to_dict()})

    @app.route("/ping")
    def ping() -> dict[str, Any]:
        return {"ok": True, "table": os.environ.get("DOCS_TABLE")}

    return app


@pytest.fixture(scope="module")
def shared(
    moto_server: MotoServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalRuntime, Seen]]:
    seen = Seen()
    project = tmp_path_factory.mktemp("project")
    (project / ".chalice").mkdir()
    chalice_config = {
        "version": "2.0",
        "app_name": "lt",
        "stages": {
            "dev": {
                "environment_variables": {"FROM_CHALICE": "yes", "WEKNORA_STATE_DIR": "/not/this/one"},
                "lambda_functions": {"work": {"lambda_timeout": 7, "lambda_memory_size": 256}},
            }
        },
    }
    (project / ".chalice" / "config.json").write_text(json.dumps(chalice_config))
    rt = LocalRuntime(
        lambda: build_app(seen),
        TEMPLATE,
        retry_delay_seconds=0,
        state_dir=tmp_path_factory.mktemp("state"),
        server=moto_server,
        clock=lambda: T0,
        project_dir=project,
    )
    rt.start(background=False)
    yield rt, seen
    rt.stop()
    assert moto_server.running  # a runtime given a server does not stop it


@pytest.fixture
def runtime(shared: tuple[LocalRuntime, Seen]) -> tuple[LocalRuntime, Seen]:
    rt, seen = shared
    rt.reset(clear_state=True)
    seen.__init__()  # type: ignore[misc]
    return rt, seen


def _sqs() -> Any:
    return boto3.client("sqs")


def _send(rt: LocalRuntime, logical: str, *bodies: dict[str, Any]) -> list[str]:
    url = rt.resources[logical].url
    return [_sqs().send_message(QueueUrl=url, MessageBody=json.dumps(b))["MessageId"] for b in bodies]


def test_app_is_imported_after_env_and_pollers_follow_the_registry(shared: tuple[LocalRuntime, Seen]) -> None:
    rt, seen = shared
    assert seen.env_at_import["DOCS_TABLE"] == "lt-docs"  # from the template's Globals, before import
    assert seen.env_at_import["AWS_ENDPOINT_URL"] == rt.server.url
    assert seen.env_at_import["WEKNORA_STATE_DIR"] == str(rt.state_dir)  # the runtime's, not the config's
    assert seen.env_at_import["FROM_CHALICE"] == "yes"  # .chalice/config.json environment_variables
    assert sorted(p.function_name for p in rt.pollers) == ["lt-dev-ingest", "lt-dev-task", "lt-dev-work"]
    work = rt.poller("work")
    assert work.batch_size == 5 and work.queue_arn == rt.resources["WorkQueue"].arn


def test_real_message_ids_receive_counts_and_context(runtime: tuple[LocalRuntime, Seen]) -> None:
    rt, seen = runtime
    ids = _send(rt, "WorkQueue", {"n": 1}, {"n": 2})
    result = rt.poll_once()["lt-dev-work"]
    assert sorted(result.received) == sorted(ids) and sorted(result.deleted) == sorted(ids)
    assert sorted(m for m, _, _ in seen.work) == sorted(ids)
    assert {c for _, c, _ in seen.work} == {"1"}
    ctx = seen.contexts[0]
    assert ctx.function_name == "lt-dev-work"
    assert ctx.invoked_function_arn == "arn:aws:lambda:us-east-1:123456789012:function:lt-dev-work"
    assert 0 < ctx.get_remaining_time_in_millis() <= 7_000  # lambda_timeout from .chalice/config.json
    assert ctx.memory_limit_in_mb == 256
    assert rt.poller("ingest").timeout_seconds == 60  # Chalice's default
    assert rt.poller("work").depth() == (0, 0)


def test_partial_batch_failure_deletes_only_successes(runtime: tuple[LocalRuntime, Seen]) -> None:
    rt, seen = runtime
    ok1, bad, ok2 = _send(rt, "WorkQueue", {"n": 1}, {"fail": True}, {"n": 3})
    result = rt.poll_once()["lt-dev-work"]
    assert sorted(result.deleted) == sorted([ok1, ok2]) and result.failed == [bad]
    # The failed one comes back (retry delay 0) with its receive count up, the others are gone.
    again = rt.poll_once()["lt-dev-work"]
    assert again.received == [bad]
    assert seen.work[-1][:2] == (bad, "2")


def test_raise_deletes_nothing(runtime: tuple[LocalRuntime, Seen]) -> None:
    rt, _ = runtime
    ids = _send(rt, "WorkQueue", {"n": 1}, {"boom": True})
    result = rt.poll_once()["lt-dev-work"]
    assert isinstance(result.error, RuntimeError) and result.deleted == []
    assert sorted(result.failed) == sorted(ids)
    assert rt.poller("work").depth() == (2, 0)


def test_poison_message_reaches_the_dlq_after_max_receive_count(runtime: tuple[LocalRuntime, Seen]) -> None:
    rt, seen = runtime
    (poison,) = _send(rt, "WorkQueue", {"fail": True, "id": "p"})
    _send(rt, "WorkQueue", {"n": 1})
    rt.drain(timeout=30)
    counts = [c for m, c, _ in seen.work if m == poison]
    assert counts == ["1", "2", "3"]  # maxReceiveCount=3 in the template
    dlq = _sqs().receive_message(QueueUrl=rt.resources["WorkDLQ"].url, MaxNumberOfMessages=10)["Messages"]
    assert [json.loads(m["Body"]) for m in dlq] == [{"fail": True, "id": "p"}]


def test_duplicate_injection_delivers_a_body_twice(runtime: tuple[LocalRuntime, Seen]) -> None:
    rt, seen = runtime
    rt.inject_duplicates(lambda rec: json.loads(rec["body"]).get("dup") is True)
    _send(rt, "WorkQueue", {"dup": True}, {"dup": False})
    rt.drain(timeout=30)
    bodies = [b for _, _, b in seen.work]
    assert bodies.count({"dup": True}) == 2 and bodies.count({"dup": False}) == 1
    dup_ids = {m for m, _, b in seen.work if b == {"dup": True}}
    assert len(dup_ids) == 2  # a redelivery is a new SQS message, not the same id


def test_s3_upload_flows_to_the_ingest_handler(runtime: tuple[LocalRuntime, Seen]) -> None:
    rt, seen = runtime
    rt.server.reset()
    rt.reset()  # provisioned anew (not emptied in place): configuring the notification sends S3's test event
    s3: Any = boto3.client("s3")
    s3.put_object(Bucket=rt.resources["Uploads"].name, Key="incoming/a b/c.pdf", Body=b"x")
    rt.drain(timeout=30)
    assert seen.keys == ["incoming/a b/c.pdf"]
    assert seen.test_events == 1  # S3 sends one when the notification is configured


def test_state_machine_callback_completes_through_the_poller(runtime: tuple[LocalRuntime, Seen]) -> None:
    rt, _ = runtime
    sfn: Any = boto3.client("stepfunctions")
    ex = sfn.start_execution(stateMachineArn=rt.resources["Flow"].arn, name="doc-1", input='{"doc": "hello"}')
    rt.drain(timeout=30)
    assert sfn.describe_execution(executionArn=ex["executionArn"])["status"] == "SUCCEEDED"
    ddb: Any = boto3.client("dynamodb")
    item = ddb.get_item(TableName="lt-docs", Key={"pk": {"S": "hello"}, "sk": {"S": "result"}})["Item"]
    assert item["words"] == {"N": "5"}


def test_drain_times_out_with_a_state_dump(runtime: tuple[LocalRuntime, Seen]) -> None:
    rt, seen = runtime
    sfn: Any = boto3.client("stepfunctions")
    ex = sfn.start_execution(
        stateMachineArn=rt.resources["Flow"].arn, name="stuck", input='{"doc": "ignore"}'
    )
    with pytest.raises(TimeoutError) as info:
        rt.drain(timeout=1.5)
    assert "RUNNING" in str(info.value) and "stuck" in str(info.value)
    assert "queue lt-work" in str(info.value)
    # (moto's StopExecution leaves a waiting callback task RUNNING, so end it with the token instead.)
    (token,) = seen.ignored_tokens
    sfn.send_task_failure(taskToken=token, error="Gave.Up", cause="test")
    assert rt.drain(timeout=10) == 0
    assert sfn.describe_execution(executionArn=ex["executionArn"])["status"] == "FAILED"


def test_scheduler_fires_rate_and_cron_on_the_driven_clock(runtime: tuple[LocalRuntime, Seen]) -> None:
    rt, seen = runtime  # rules were (re)created at T0 = 02:30 UTC
    assert rt.tick(T0 + timedelta(minutes=4, seconds=59)) == []
    fired = rt.tick(T0 + timedelta(minutes=5))
    assert [f.name for f in fired] == ["sweep"]
    ev = seen.scheduled[0]
    assert ev["detail-type"] == "Scheduled Event" and ev["source"] == "aws.events"
    assert ev["resources"] == ["arn:aws:events:us-east-1:123456789012:rule/lt-dev-sweep"]
    assert ev["time"] == "2026-11-30T02:35:00Z"
    assert rt.tick(T0 + timedelta(minutes=9)) == []
    assert [f.name for f in rt.tick(datetime(2026, 11, 30, 2, 59, tzinfo=UTC))] == ["sweep"]  # 02:40, once
    fired = rt.tick(datetime(2026, 11, 30, 3, 0, tzinfo=UTC))
    assert sorted(f.name for f in fired) == ["nightly", "sweep"]
    nightly = [e for e in seen.scheduled if e["name"] == "nightly"]
    assert [e["time"] for e in nightly] == ["2026-11-30T03:00:00Z"]
    assert nightly[0]["resources"] == ["arn:aws:events:us-east-1:123456789012:rule/lt-dev-nightly"]
    assert rt.tick(datetime(2026, 11, 30, 3, 1, tzinfo=UTC)) == []


def test_http_routes_are_served(
    runtime: tuple[LocalRuntime, Seen], capsys: pytest.CaptureFixture[str]
) -> None:
    rt, _ = runtime
    base = rt.serve_http("127.0.0.1", 0, access_log=False)
    try:
        resp = requests.get(f"{base}/ping", timeout=10)
        assert resp.json() == {"ok": True, "table": "lt-docs"}
        assert requests.get(f"{base}/nope", timeout=10).status_code == 403  # API Gateway's missing route
    finally:
        rt.stop_http()
    log = capsys.readouterr().err
    assert "/nope" not in log and "/ping" not in log  # only 5xx replies are logged without access_log


def _raw(base: str, request: bytes) -> bytes:
    """The server's reply to a raw HTTP/1.0 request, read to the close."""
    import socket

    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def test_head_replies_have_headers_and_no_body(runtime: tuple[LocalRuntime, Seen]) -> None:
    rt, _ = runtime
    base = rt.serve_http("127.0.0.1", 0, access_log=False)
    try:
        get = _raw(base, b"GET /ping HTTP/1.0\r\nHost: x\r\n\r\n")
        head = _raw(base, b"HEAD /ping HTTP/1.0\r\nHost: x\r\n\r\n")
        missing = _raw(base, b"HEAD /nope HTTP/1.0\r\nHost: x\r\n\r\n")
    finally:
        rt.stop_http()
    _, _, get_body = get.partition(b"\r\n\r\n")
    assert get_body  # a GET has its body
    for reply in (head, missing):
        headers, _, body = reply.partition(b"\r\n\r\n")
        assert headers.startswith(b"HTTP/1.") and body == b"", reply
        assert b"Content-Length: " in headers


def _status_and_error(reply: bytes) -> tuple[bytes, str]:
    head, _, body = reply.partition(b"\r\n\r\n")
    return head.split(b" ", 2)[1], json.loads(body)["error"]["code"]


def test_a_body_that_cannot_be_framed_is_refused_in_the_envelope(runtime: tuple[LocalRuntime, Seen]) -> None:
    """chalice's server dropped the connection on a Content-Length that is not a number (schemathesis),
    took the first of two differing ones, and read a chunked body as the next request."""
    rt, _ = runtime
    base = rt.serve_http("127.0.0.1", 0, access_log=False)
    request = b"POST /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    try:
        bad_counts = [
            _raw(base, request + b"Content-Length: " + value + b"\r\n\r\n")
            for value in (b"IGq", b"", b"-1", b"2\r\nContent-Length: 3")
        ]
        chunked = _raw(base, request + b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n")
        same_twice = _raw(
            base, b"GET /ping HTTP/1.0\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n"
        )
    finally:
        rt.stop_http()
    assert [_status_and_error(reply) for reply in bad_counts] == [(b"400", "bad_content_length")] * 4
    assert _status_and_error(chunked) == (b"411", "length_required")
    assert same_twice.split(b" ", 2)[1] == b"200", same_twice


def test_what_http_server_refuses_is_answered_in_the_envelope(runtime: tuple[LocalRuntime, Seen]) -> None:
    """A header line too long, too many headers, an unknown method: JSON with a stable code, not HTML."""
    rt, _ = runtime
    base = rt.serve_http("127.0.0.1", 0, access_log=False)
    try:
        long_line = _raw(base, b"GET /ping HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n")
        many = b"".join(b"X-H%d: v\r\n" % i for i in range(200))
        too_many = _raw(base, b"GET /ping HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
        unknown = _raw(base, b"BREW /ping HTTP/1.1\r\nHost: x\r\n\r\n")
    finally:
        rt.stop_http()
    assert _status_and_error(long_line) == (b"431", "headers_too_large")
    assert _status_and_error(too_many) == (b"431", "headers_too_large")
    assert _status_and_error(unknown) == (b"501", "method_not_implemented")
    assert b"Content-Type: application/json" in unknown


def test_a_burst_of_connections_is_served(runtime: tuple[LocalRuntime, Seen]) -> None:
    """http.server's default accept backlog of 5 reset connections of a burst (a CLI uploading a folder)."""
    from concurrent.futures import ThreadPoolExecutor

    from chalicelib.local.runtime import HTTP_BACKLOG

    rt, _ = runtime
    base = rt.serve_http("127.0.0.1", 0, access_log=False)
    try:
        assert rt._http is not None and rt._http.server.request_queue_size == HTTP_BACKLOG >= 128
        with ThreadPoolExecutor(max_workers=100) as pool:
            codes = list(pool.map(lambda _: requests.get(f"{base}/ping", timeout=60).status_code, range(200)))
    finally:
        rt.stop_http()
    assert codes == [200] * 200


def test_background_pollers_process_without_driving(moto_server: MotoServer, tmp_path: Path) -> None:
    seen = Seen()
    rt = LocalRuntime(
        lambda: build_app(seen), TEMPLATE, retry_delay_seconds=0, state_dir=tmp_path, server=moto_server
    )
    rt.start(background=True)
    try:
        rt.reset()
        assert all(p.running for p in rt.pollers)
        (mid,) = _send(rt, "WorkQueue", {"bg": 1})
        deadline = time.monotonic() + 20
        while not seen.work and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [m for m, _, _ in seen.work] == [mid]
        rt.drain(timeout=20)  # background mode: waits for the pollers to empty the queues
    finally:
        rt.stop()
    assert not any(p.running for p in rt.pollers)


def with_image_function(project: Path) -> Path:
    """The fixture template plus a container-image function (functions/tally/, Dockerfile not needed
    locally) bound to its own queue, laid out in `project` as infra/ and functions/ are in this repo."""
    template = json.loads(TEMPLATE.read_text())
    template["Resources"]["TallyQueue"] = {
        "Type": "AWS::SQS::Queue",
        "Properties": {"QueueName": {"Fn::Sub": "${Prefix}-tally"}, "VisibilityTimeout": 30},
    }
    template["Resources"]["Tally"] = {
        "Type": "AWS::Serverless::Function",
        "Metadata": {"Dockerfile": "functions/tally/Dockerfile", "DockerContext": ".."},
        "Properties": {
            "PackageType": "Image",
            "ImageUri": "tally:latest",
            "ImageConfig": {"Command": ["handler.handler"]},
            "Timeout": 11,
            "MemorySize": 384,
            "Events": {
                "TallySqs": {
                    "Type": "SQS",
                    "Properties": {
                        "Queue": {"Fn::GetAtt": ["TallyQueue", "Arn"]},
                        "BatchSize": 2,
                        "FunctionResponseTypes": ["ReportBatchItemFailures"],
                    },
                }
            },
        },
    }
    (project / "infra").mkdir()
    (project / "infra" / "template.json").write_text(json.dumps(template))
    shutil.copy(TEMPLATE.parent / "flow.asl.json", project / "infra" / "flow.asl.json")
    shutil.copytree(TEMPLATE.parent / "functions", project / "functions")
    return project / "infra" / "template.json"


def test_an_image_function_runs_its_handler_module_on_its_queue(
    moto_server: MotoServer, tmp_path: Path
) -> None:
    seen = Seen()
    rt = LocalRuntime(
        lambda: build_app(seen),
        with_image_function(tmp_path),
        retry_delay_seconds=0,
        state_dir=tmp_path / "state",
        server=moto_server,
    )
    rt.start(background=False)
    try:
        rt.reset()
        tally = rt.poller("Tally")  # functions/tally/handler.py, bound by the template's SQS event
        assert (tally.batch_size, tally.timeout_seconds, tally.memory_mb) == (2, 11, 384)
        assert tally.queue_arn == rt.resources["TallyQueue"].arn and tally.report_batch_item_failures
        ok, bad = _send(rt, "TallyQueue", {"n": 1}, {"fail": True})
        result = rt.poll_once()["lt-dev-Tally"]
        assert sorted(result.received) == sorted([ok, bad])
        assert result.deleted == [ok] and result.failed == [bad]
        name, memory, remaining_ms, bodies = sys.modules["functions.tally.handler"].SEEN[-1]
        assert (name, memory) == ("lt-dev-Tally", 384) and 0 < remaining_ms <= 11_000
        assert sorted(map(json.dumps, bodies)) == sorted(map(json.dumps, [{"n": 1}, {"fail": True}]))
    finally:
        rt.stop()


def test_reset_empties_every_resource_in_place_and_provisions_anew_after_a_resource_changed(
    runtime: tuple[LocalRuntime, Seen],
) -> None:
    rt, _ = runtime
    table = rt.resources["DocsTable"].name
    bucket = rt.resources["Uploads"].name
    work_url = rt.resources["WorkQueue"].url
    dynamodb, s3 = boto3.client("dynamodb"), boto3.client("s3")
    dynamodb.put_item(TableName=table, Item={"pk": {"S": "doc-1"}, "sk": {"S": "v1"}})
    s3.put_object(Bucket=bucket, Key="k", Body=b"x")
    _send(rt, "WorkQueue", {"n": 1})
    before = rt.server.footprint()

    rt.reset()
    assert dynamodb.scan(TableName=table)["Count"] == 0
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    assert "Messages" not in _sqs().receive_message(QueueUrl=work_url, WaitTimeSeconds=0)
    after = rt.server.footprint()
    assert before is not None and after is not None
    assert all(after.queues[name] is queue for name, queue in before.queues.items())  # emptied in place

    # A queue deleted and created again without its attributes is not the stack's queue: full reprovision.
    _sqs().delete_queue(QueueUrl=work_url)
    _sqs().create_queue(QueueName=rt.resources["WorkQueue"].name)
    rt.reset()
    redrive = _sqs().get_queue_attributes(QueueUrl=rt.resources["WorkQueue"].url, AttributeNames=["All"])
    assert "RedrivePolicy" in redrive["Attributes"]
