"""One moto server (server mode) that every local component talks to.

Server mode, not ``mock_aws``: decorator-mode DynamoDB loses atomic ``ADD`` updates under threads, and moto's
Step Functions interpreter runs executions in threads that call back into ``http://localhost:$MOTO_PORT``.

The server runs in a thread of this process (tests: a reset can empty it in place) or, with
``separate_process=True``, in a child process of its own (`make run` and the benches): moto's request
handling is about half of what the local stack's one Python process does, and in a thread it holds that
process's GIL while the stages wait; AWS's services do not run on the pipeline's cores either.

Two of moto's hot paths are replaced when a server starts (`_speed_up_moto`), each with a test that it
answers as moto does: DynamoDB's data-plane answers are written by `json.dumps`, and a state machine's
definition is parsed once for all its executions.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import functools
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

import requests
from moto.core.responses import TYPE_RESPONSE, ActionResult, BaseResponse
from moto.dynamodb.responses import DynamoHandler
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)
from werkzeug.serving import make_server

log = logging.getLogger(__name__)

# moto's default account; ARNs built locally must agree with the ones moto returns.
ACCOUNT_ID = "123456789012"

MOTO_CONFIG: dict[str, Any] = {
    "stepfunctions": {"execute_state_machine": True},
    # The "simple" Lambda backend never runs code but at least does not try to reach Docker.
    "lambda": {"use_docker": False},
}


class _DynamoDBSerialised:
    """WSGI middleware: one DynamoDB request at a time. DynamoDB makes each conditional write and
    transaction atomic; moto's in-memory backend checks a condition and writes in two steps with no lock,
    so two racing requests on the server's threads could both pass a condition (two dedupe winners)."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        if not environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            return self._app(environ, start_response)
        with self._lock:
            return list(self._app(environ, start_response))


class _Dispatcher(DomainDispatcherApplication):
    """moto's dispatcher, remembering which backend serves a host: moto finds it on every request by
    listing its service packages on disk, which was 8% of the server's CPU under the local stack."""

    def __init__(self) -> None:
        super().__init__(create_backend_app)
        self._backend_of: dict[str | None, Any] = {}

    def get_backend_for_host(self, host: str | None) -> Any:  # called under moto's lock
        if host not in self._backend_of:
            self._backend_of[host] = super().get_backend_for_host(host)
        return self._backend_of[host]


#: DynamoDB operations whose results moto builds as plain dicts already in the wire's shape (items as
#: AttributeValue maps): no timestamps, no model objects.
_DATA_PLANE = frozenset(
    {
        "GetItem",
        "BatchGetItem",
        "Query",
        "Scan",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "BatchWriteItem",
        "TransactGetItems",
        "TransactWriteItems",
    }
)


def _blob_as_base64(value: object) -> str:
    if isinstance(value, bytes | bytearray):  # moto keeps B/BS values raw for its serializer
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not in DynamoDB's data-plane results")


def _serialized_as_json(handler: BaseResponse, action_result: ActionResult) -> TYPE_RESPONSE:
    """moto's DynamoDB results of the data plane written by `json.dumps`; everything else (errors, the
    control plane) through moto's serializer. The serializer walks botocore's shape model value by value
    and was half of moto's DynamoDB CPU under the local stack; for these results it writes the same JSON
    (what botocore parses is equal, a test compares the two on every attribute type)."""
    result = action_result.result
    if isinstance(result, dict) and handler._get_action() in _DATA_PLANE:
        headers = {"Content-Type": "application/x-amz-json-1.0", **handler.response_headers}
        return 200, headers, json.dumps(result, default=_blob_as_base64)
    return BaseResponse.serialized(handler, action_result)


def _parse_once(parse: Any) -> Any:
    """moto parses a state machine's ASL with ANTLR again for every execution (about 50 ms for ours, per
    document); the syntax tree depends on the definition alone and is only read, so it is parsed once. The
    evaluation components are built fresh each time: executions keep state in them."""
    from moto.stepfunctions.parser.asl.parse.preprocessor import Preprocessor

    syntax_tree = functools.lru_cache(maxsize=16)(lambda definition: parse(definition)[1])

    def parse_with_cached_tree(definition: str) -> tuple[Any, Any]:
        tree = syntax_tree(definition)  # a bad definition raises, and nothing is cached
        return Preprocessor().visit(tree), tree

    return parse_with_cached_tree


_sped_up = False


def _speed_up_moto() -> None:
    """Once per process, before the first server starts. The Step Functions parser is imported here, not
    at the top: it takes 1.5 s, and the CLI's client commands import this module."""
    global _sped_up
    if _sped_up:
        return
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    DynamoHandler.serialized = _serialized_as_json  # type: ignore[method-assign,assignment]
    AmazonStateLanguageParser.parse = staticmethod(_parse_once(AmazonStateLanguageParser.parse))  # type: ignore[method-assign]
    _sped_up = True


class _AtomicMotoServer(ThreadedMotoServer):
    """moto's threaded server with DynamoDB requests serialised (the rest stays concurrent)."""

    def _server_entry(self) -> None:  # as moto's, with the middleware around the app
        app = _DynamoDBSerialised(_Dispatcher())
        self._server = make_server(
            self._ip_address, self._port, app, True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()


@dataclass
class Footprint:
    """The moto objects behind a provisioned stack, by name: a reset that empties them in place is only
    sound while these very objects are all there is (a test that deleted or recreated one changed more
    than data)."""

    tables: dict[str, object] = field(default_factory=dict)
    queues: dict[str, object] = field(default_factory=dict)
    buckets: dict[str, object] = field(default_factory=dict)
    state_machines: dict[str, object] = field(default_factory=dict)


def _backends(region: str) -> tuple[Any, Any, Any, Any]:
    # moto's in-memory backends of this process (the server runs in a thread of it).
    from moto.dynamodb.models import dynamodb_backends
    from moto.s3.models import s3_backends
    from moto.sqs.models import sqs_backends
    from moto.stepfunctions.parser.models import stepfunctions_parser_backends

    return (
        dynamodb_backends[ACCOUNT_ID][region],
        sqs_backends[ACCOUNT_ID][region],
        s3_backends[ACCOUNT_ID]["aws"],
        stepfunctions_parser_backends[ACCOUNT_ID][region],
    )


class MotoServer:
    """A moto server on 127.0.0.1 (a thread here, or a child process) plus the environment that points
    boto3/pynamodb at it."""

    def __init__(self, port: int = 0, region: str = "us-east-1", *, separate_process: bool = False) -> None:
        self._requested_port = port
        self.region = region
        self.separate_process = separate_process
        self._server: ThreadedMotoServer | None = None
        self._process: subprocess.Popen[str] | None = None
        self.port = 0

    @property
    def url(self) -> str:
        return _url(self.port)

    @property
    def running(self) -> bool:
        if self._process is not None:
            return self._process.poll() is None
        return self._server is not None

    def start(self) -> MotoServer:
        if self.running:
            return self
        if self.separate_process:
            self._process, self.port = _start_child(self._requested_port, self.region)
        else:
            self._server, self.port = _start_in_thread(self._requested_port)
        self.apply_env()
        self.configure()
        log.info("moto server listening on %s", self.url)
        return self

    def apply_env(self) -> None:
        """Point every AWS SDK client in this process at the server (set before the app is imported)."""
        _point_sdk_at(self.port, self.region)

    def configure(self) -> None:
        resp = requests.post(f"{self.url}/moto-api/config", json=MOTO_CONFIG, timeout=10)
        resp.raise_for_status()

    def reset(self) -> None:
        """Drop every resource in every backend, then re-apply the config (reset clears it too)."""
        resp = requests.post(f"{self.url}/moto-api/reset", timeout=30)
        resp.raise_for_status()
        self.configure()

    def footprint(self) -> Footprint | None:
        """What exists now, for :meth:`empty_in_place`; None when the server is not this process's."""
        if self._server is None or self.separate_process:
            return None
        dynamodb, sqs, s3, sfn = _backends(self.region)
        return Footprint(
            tables=dict(dynamodb.tables),
            queues=dict(sqs.queues),
            buckets=dict(s3.buckets),
            state_machines={sm.arn: sm for sm in sfn.state_machines},
        )

    def empty_in_place(self, expected: Footprint) -> bool:
        """Drop every item, message, object and execution but keep the resources themselves: the same end
        state as :meth:`reset` followed by provisioning again, in microseconds instead of ~40 API calls.
        Returns False (and changes nothing) when the resources are not exactly ``expected``."""
        now = self.footprint()
        if now is None or not _same_objects(now, expected):
            return False
        from moto.s3.models import FakeKey

        dynamodb, sqs, s3, sfn = _backends(self.region)
        for sm in sfn.state_machines:
            for execution in list(sm.executions):
                if execution.status == "RUNNING":
                    sm.stop_execution(execution.execution_arn)
            sm.executions.clear()
        for table in dynamodb.tables.values():
            table.items.clear()
        for queue in sqs.queues.values():
            with queue._messages_lock:
                queue._messages = []
                queue._pending_messages = set()
            queue.last_purged_at = None
        for bucket in s3.buckets.values():
            for key in bucket.keys.values():
                if isinstance(key, FakeKey):  # not a delete marker: it holds a temporary file
                    key.dispose()
            for part in bucket.multiparts.values():
                part.dispose()
            bucket.keys.clear()
            bucket.multiparts.clear()
        return True

    def stop(self) -> None:
        if self._process is not None:
            process, self._process = self._process, None
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._server is None:
            return
        self._server.stop()
        self._server = None


def _url(port: int) -> str:
    return f"http://127.0.0.1:{port}"


def _start_in_thread(port: int) -> tuple[_AtomicMotoServer, int]:
    """The atomic server in a thread of this process; returns it and the port it bound."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request drowns the app's own logs
    _speed_up_moto()
    server = _AtomicMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    return server, server.get_host_and_port()[1]


def _point_sdk_at(port: int, region: str) -> None:
    os.environ["MOTO_PORT"] = str(port)  # read by moto's Step Functions interpreter
    os.environ["AWS_ENDPOINT_URL"] = _url(port)
    os.environ["AWS_ACCESS_KEY_ID"] = "testing"
    os.environ["AWS_SECRET_ACCESS_KEY"] = "testing"
    os.environ["AWS_SESSION_TOKEN"] = "testing"
    os.environ["AWS_DEFAULT_REGION"] = region
    os.environ["AWS_REGION"] = region
    # A developer's profile must not leak credentials or a different endpoint into local runs.
    os.environ.pop("AWS_PROFILE", None)


_READY = "moto server port "


def _start_child(port: int, region: str) -> tuple[subprocess.Popen[str], int]:
    """`main()` in a child process; returns it and the port it bound. Not `python -m`: the package imports
    this module, so `-m` would run it a second time as `__main__` (runpy warns of exactly that)."""
    entry = "from chalicelib.local.moto_server import main; main()"
    process = subprocess.Popen(
        [sys.executable, "-c", entry, "--port", str(port), "--region", region],
        stdin=subprocess.PIPE,  # never written: the child stops when it closes, i.e. when this process ends
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()  # the child prints its port once it listens, then nothing more
    if not line.startswith(_READY):
        process.kill()
        process.wait()
        raise RuntimeError(f"the moto server process did not start (it printed {line[:200]!r})")
    process.stdout.close()
    return process, int(line[len(_READY) :])


def serve(port: int, region: str) -> None:
    """The child process's side: the same atomic server, in the foreground, until terminated."""
    server, bound = _start_in_thread(port)
    _point_sdk_at(bound, region)  # moto's Step Functions interpreter calls the other services back
    print(f"{_READY}{bound}", flush=True)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())

    # The parent holds our stdin open: end of file means it is gone (even killed), so no server outlives it.
    def stop_when_orphaned() -> None:
        sys.stdin.read()
        stopped.set()

    threading.Thread(target=stop_when_orphaned, daemon=True).start()
    stopped.wait()
    server.stop()


def _same_objects(now: Footprint, expected: Footprint) -> bool:
    def same(a: dict[str, object], b: dict[str, object]) -> bool:
        return a.keys() == b.keys() and all(a[k] is b[k] for k in a)

    return (
        same(now.tables, expected.tables)
        and same(now.queues, expected.queues)
        and same(now.buckets, expected.buckets)
        and same(now.state_machines, expected.state_machines)
    )


_shared: MotoServer | None = None
_shared_lock = threading.Lock()


def shared_moto_server(region: str = "us-east-1") -> MotoServer:
    """The process-wide server (started on first use, stopped at exit): cheap to reuse across tests."""
    global _shared
    with _shared_lock:
        if _shared is None or not _shared.running:
            _shared = MotoServer(port=0, region=region).start()
            atexit.register(_shared.stop)
        else:
            _shared.apply_env()
        return _shared


def main() -> None:
    """The local stack's moto server in the foreground (the child process of `separate_process=True`)."""
    parser = argparse.ArgumentParser(description="the local stack's moto server, in the foreground")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--region", default="us-east-1")
    arguments = parser.parse_args()
    serve(arguments.port, arguments.region)
