"""LocalRuntime: the Chalice app's handlers, and the template's container-image functions (their
``functions/<name>/handler.py``), running against moto the way AWS would wire them.

moto server (real S3/SQS/DynamoDB/Step Functions semantics) + the template provisioned into it + in-process
stand-ins for what moto cannot do honestly: the Lambda SQS event-source mappings (``pollers``), EventBridge
schedules (``scheduler``) and API Gateway (``chalice.local.LocalDevServer``).

Reusing one moto server across tests (cheap reset + re-provision between tests) from a conftest::

    @pytest.fixture(scope="session")
    def _runtime(tmp_path_factory):
        rt = LocalRuntime(load_app, "infra/template.json", retry_delay_seconds=0,
                          state_dir=tmp_path_factory.mktemp("state"), server=shared_moto_server())
        rt.start(background=False)
        yield rt
        rt.stop()

    @pytest.fixture
    def runtime(_runtime):
        _runtime.reset(clear_state=True)   # empties moto's tables, queues and bucket in place
        return _runtime
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from email.message import Message
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

from chalicelib.api.http import error_response
from chalicelib.domain.errors import AppError, BadRequest
from chalicelib.local import gateway_responses
from chalicelib.local.aws_calls import API_FUNCTION, attributed, invoking, logical_id
from chalicelib.local.moto_server import ACCOUNT_ID, Footprint, MotoServer
from chalicelib.local.pollers import BatchResult, DuplicatePredicate, SqsPoller
from chalicelib.local.provision import ImageFunction, ProvisionedResources, image_sqs_functions, provision
from chalicelib.local.scheduler import Clock, ScheduledInvocation, Scheduler, utc_now
from chalicelib.settings import QUEUES, dead_letter_queue_url_variable, get_settings, queue_url_variable

log = logging.getLogger(__name__)
#: connections each of the runtime's shared AWS clients keeps open (see _client)
CLIENT_POOL_CONNECTIONS = 64
#: the local HTTP server's accept backlog (connections waiting to be accepted)
HTTP_BACKLOG = 128

AppLoader = Callable[[], Any]

#: the app's embedding-queue handler: its poller runs as many invocations as there are embedding workers
EMBEDDING_HANDLER = "embedding_stage"
#: an idle poller's long poll (SQS's WaitTimeSeconds). A message that arrives ends it at once (moto wakes the
#: waiting receive), so it adds no hand-off latency; it bounds how long stopping the pollers takes. At 1 s
#: the idle queues' receives were a quarter of the stack's requests to moto (bench_e2e_llamaindex --timeline)
IDLE_POLL_SECONDS = 5


def default_embed_workers() -> int:
    """WEKNORA_EMBED_WORKERS, else one embedding worker per core, at most 2 (the machines have 2 cores)."""
    configured = os.environ.get("WEKNORA_EMBED_WORKERS", "").strip()
    if configured:
        return max(1, int(configured))
    return max(1, min(2, os.cpu_count() or 1))


_NOT_EMULATED = ("S3EventConfig", "SNSEventConfig", "KinesisEventConfig", "DynamoDBEventConfig")


def _name_the_api_function(app: Any) -> None:
    """Every HTTP request runs as the API function (its AWS calls are attributed to it: local/aws_calls.py)."""
    if getattr(app, "_weknora_named", False):
        return

    def as_api_function(event: Any, get_response: Callable[[Any], Any]) -> Any:
        with invoking(API_FUNCTION):
            return get_response(event)

    app.register_middleware(as_api_function, "http")
    app._weknora_named = True


class LengthRequired(AppError):
    status = 411
    code = "length_required"


def framing_refusal(headers: Message) -> AppError | None:
    """Why a request's body cannot be framed, or None: a Content-Length that is not one byte count (RFC
    9112 §6.3: differing values are an error), or a transfer coding, which this server does not decode."""
    if headers.get("transfer-encoding") is not None:
        return LengthRequired(
            "send the body with a Content-Length; chunked transfer coding is not accepted here"
        )
    counts = {value.strip() for value in headers.get_all("content-length") or []}
    if not all(count.isdigit() for count in counts):
        return BadRequest("Content-Length is not a byte count", code="bad_content_length")
    if len(counts) > 1:
        return BadRequest(
            "Content-Length is given more than once, with different values", code="bad_content_length"
        )
    return None


#: stable codes for what http.server refuses before a request reaches the app
_PROTOCOL_CODES = {
    400: "bad_request_syntax",
    408: "request_timeout",
    414: "uri_too_long",
    431: "headers_too_large",
    501: "method_not_implemented",
    505: "http_version_not_supported",
}


class LocalRuntime:
    """Runs a Chalice app's event handlers on moto. See the module docstring for the pieces.

    ``retry_delay_seconds``: how long a failed SQS message stays invisible before its next delivery
    (``None`` = the queue's VisibilityTimeout, as on AWS; tests use 0).
    ``state_dir`` is exported as ``WEKNORA_STATE_DIR`` before the app is imported.
    ``embed_workers``: processes the local MiniLM runs in, one single-threaded ONNX Runtime session each
    (default: WEKNORA_EMBED_WORKERS, else min(2, cores)); exported as ``WEKNORA_EMBED_WORKERS``, and the
    embedding queue's poller runs twice that many invocations at once. Tests that want one process pass 1.
    ``separate_moto_process``: the server it starts itself runs in a child process (`make run`, benches),
    not in a thread here (tests: resets empty it in place).
    ``env``: function environment variables for this run, over the stage's (e.g. the e2e suite's
    ``WEKNORA_STORAGE=s3``, as deployed, where `make run` keeps the stage's on-disk files).
    """

    def __init__(
        self,
        app_loader: AppLoader,
        template_path: str | os.PathLike[str],
        parameters: Mapping[str, str] | None = None,
        retry_delay_seconds: int | None = None,
        state_dir: str | os.PathLike[str] = ".weknora",
        *,
        server: MotoServer | None = None,
        port: int = 0,
        region: str = "us-east-1",
        stage: str = "dev",
        project_dir: str | os.PathLike[str] | None = None,
        concurrency: int = 1,
        wait_time_seconds: int = IDLE_POLL_SECONDS,
        clock: Clock = utc_now,
        stack_name: str = "weknora-local",
        embed_workers: int | None = None,
        separate_moto_process: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.app_loader = app_loader
        self.template_path = Path(template_path)
        gateway_responses.install(self.template_path)  # unmatched requests answer as API Gateway's
        # No OpenSearch domain can run here: the embedded engine stands in unless a caller says otherwise.
        self.parameters = {"EnableOpenSearch": "false", **(parameters or {})}
        self.retry_delay_seconds = retry_delay_seconds
        self.state_dir = Path(state_dir).resolve()
        self.region = region
        self.stage = stage
        self.project_dir = Path(project_dir).resolve() if project_dir else Path.cwd()
        self.concurrency = concurrency
        self.wait_time_seconds = wait_time_seconds
        self.clock = clock
        self.stack_name = stack_name
        self.embed_workers = embed_workers if embed_workers is not None else default_embed_workers()
        self.env = dict(env or {})
        if self.embed_workers < 1:
            raise ValueError("embed_workers must be >= 1")
        self._own_server = server is None
        self.server = server or MotoServer(port=port, region=region, separate_process=separate_moto_process)
        self.app: Any = None
        self.resources = ProvisionedResources()
        self._footprint: Footprint | None = None
        self.pollers: list[SqsPoller] = []
        self.scheduler = Scheduler(region=region, clock=clock)
        self.background = False
        self._http: Any = None
        self._http_thread: threading.Thread | None = None
        self._duplicate_predicate: DuplicatePredicate | None = None
        self._clients: dict[str, Any] = {}

    # ---- lifecycle --------------------------------------------------------------------------------------

    def start(self, background: bool = False) -> LocalRuntime:
        """moto → env → provision → import the app → pollers + scheduler (threads only if ``background``)."""
        self.server.start()
        self.server.apply_env()
        self._apply_local_env()
        self.resources = self._provision()
        self.app = self.app_loader()
        _name_the_api_function(self.app)
        self.pollers = self._build_pollers()
        self.scheduler = Scheduler.from_app(
            self.app,
            stage=self.stage,
            region=self.region,
            clock=self.clock,
            function_settings=self._function_settings,
        )
        if background:
            self._start_background()
        return self

    def _apply_local_env(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # The environment Chalice would give every function (.chalice/config.json, this stage) ...
        os.environ.update({k: str(v) for k, v in self._chalice_config().environment_variables.items()})
        os.environ.update(self.env)  # this run's overrides win over the stage's
        # ... except the state dir: the one this runtime was given wins.
        os.environ["WEKNORA_STATE_DIR"] = str(self.state_dir)
        # The local MiniLM runs in this many single-threaded worker processes (adapters/models/embed_pool.py).
        os.environ["WEKNORA_EMBED_WORKERS"] = str(self.embed_workers)
        # Powertools offline: no X-Ray daemon, EMF metrics need a namespace.
        os.environ.setdefault("POWERTOOLS_TRACE_DISABLED", "true")
        os.environ.setdefault("POWERTOOLS_METRICS_NAMESPACE", "weknora-ingest")
        get_settings.cache_clear()  # the environment changed: settings are read again on next use

    def _provision(self) -> ProvisionedResources:
        resources = provision(
            self.template_path,
            self.parameters,
            region=self.region,
            stack_name=self.stack_name,
            endpoint_url=self.server.url,
        )
        self._footprint = self.server.footprint()
        # What SAM would put in every function's environment (Globals.Function.Environment); as in SAM,
        # the function's own variables (.chalice/config.json for this stage) take precedence over Globals.
        os.environ.update(resources.function_env)
        self._apply_local_env()
        self._apply_queue_urls(resources)
        return resources

    def _apply_queue_urls(self, resources: ProvisionedResources) -> None:
        """Every stage queue's and dead-letter queue's URL, as the packaged template gives each function the
        URLs of the queues it uses: the code path of AWS (no GetQueueUrl). One process serves every function
        here, so it has them all; the e2e IAM check holds each function to the URLs its own environment has
        (tests/infra/iam_policy.py)."""
        settings = get_settings()
        urls = resources.queue_url_env({queue: settings.queue(queue) for queue in QUEUES})
        for queue in QUEUES:
            for variable in (queue_url_variable(queue), dead_letter_queue_url_variable(queue)):
                if variable in self.env:  # this run's overrides win
                    continue
                if variable in urls:
                    os.environ[variable] = urls[variable]
                else:  # not provisioned here: a URL left from another stack would name its queue
                    os.environ.pop(variable, None)
        get_settings.cache_clear()

    def _chalice_config(self, function_name: str = "api_handler") -> Any:
        from chalice.config import Config

        path = self.project_dir / ".chalice" / "config.json"
        on_disk = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        return Config(chalice_stage=self.stage, function_name=function_name, config_from_disk=on_disk)

    def _function_settings(self, name: str) -> tuple[float, int]:
        """(timeout s, memory MB) from .chalice/config.json; Chalice's defaults are 60 s and 128 MB."""
        cfg = self._chalice_config(name)
        return float(cfg.lambda_timeout or 60), int(cfg.lambda_memory_size or 128)

    def _build_pollers(self) -> list[SqsPoller]:
        from chalice.app import SQSEventConfig

        sqs = self._client("sqs")
        pollers = []
        for source in self.app.event_sources:
            kind = type(source).__name__
            if kind in _NOT_EMULATED:
                log.warning("event source %s (%s) is not emulated locally", source.name, kind)
            if not isinstance(source, SQSEventConfig):
                continue
            queue_name = source.queue or str(source.queue_arn).rsplit(":", 1)[-1]
            try:
                url = sqs.get_queue_url(QueueName=queue_name)["QueueUrl"]
            except sqs.exceptions.QueueDoesNotExist as exc:
                raise RuntimeError(
                    f"handler {source.name} listens on queue {queue_name!r}; the template does not create it"
                ) from exc
            timeout, memory = self._function_settings(source.name)
            concurrency = self.concurrency
            if source.name == EMBEDDING_HANDLER:
                # Two invocations per embedding worker: between model calls an invocation waits on the
                # tables (chunks, cache, row checks), and the other keeps the worker busy meanwhile
                # (bench_e2e_llamaindex: median 21.6 s against 23.4 s with one, 5 interleaved rounds).
                concurrency = max(concurrency, 2 * self.embed_workers)
            if source.maximum_concurrency:
                concurrency = min(concurrency, source.maximum_concurrency)
            pollers.append(
                SqsPoller(
                    function_name=f"{self.app.app_name}-{self.stage}-{source.name}",
                    handler=attributed(logical_id(source.name), self.app.handler_map[source.name]),
                    queue_url=url,
                    queue_arn=f"arn:aws:sqs:{self.region}:{ACCOUNT_ID}:{queue_name}",
                    batch_size=source.batch_size,
                    maximum_batching_window_in_seconds=source.maximum_batching_window_in_seconds,
                    region=self.region,
                    retry_delay_seconds=self.retry_delay_seconds,
                    timeout_seconds=timeout,
                    memory_mb=memory,
                    concurrency=concurrency,
                    wait_time_seconds=self.wait_time_seconds,
                    duplicate_predicate=self._duplicate_predicate,
                    sqs_client=sqs,
                )
            )
        for function in image_sqs_functions(self.template_path):
            pollers.append(self._image_function_poller(function, sqs))
        return pollers

    def _image_function_poller(self, function: ImageFunction, sqs: Any) -> SqsPoller:
        """A container-image function (functions/<name>/) runs its handler module in-process."""
        queue = self.resources.get(function.queue_logical_id)
        if queue is None or queue.url is None:
            raise RuntimeError(
                f"{function.logical_id} reads {function.queue_logical_id}, which is not a queue"
            )
        module_name = f"functions.{function.handler_file.parent.name}.handler"
        spec = importlib.util.spec_from_file_location(module_name, function.handler_file)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
        return SqsPoller(
            function_name=f"{self.app.app_name}-{self.stage}-{function.logical_id}",
            handler=attributed(function.logical_id, getattr(module, function.handler_name)),
            queue_url=queue.url,
            queue_arn=queue.arn,
            batch_size=function.batch_size,
            maximum_batching_window_in_seconds=function.maximum_batching_window_in_seconds,
            region=self.region,
            retry_delay_seconds=self.retry_delay_seconds,
            timeout_seconds=function.timeout_seconds,
            memory_mb=function.memory_mb,
            concurrency=self.concurrency,
            wait_time_seconds=self.wait_time_seconds,
            report_batch_item_failures=function.report_batch_item_failures,
            duplicate_predicate=self._duplicate_predicate,
            sqs_client=sqs,
        )

    def start_workers(self) -> None:
        """Start the pollers and the scheduler of a runtime started with ``background=False``."""
        if not self.background:
            self._start_background()

    def stop_workers(self) -> None:
        """Stop the pollers, the scheduler and the HTTP server; moto keeps running (to save its state)."""
        self._stop_background()
        self.stop_http()

    def _start_background(self) -> None:
        for p in self.pollers:
            p.start()
        self.scheduler.start()
        self.background = True

    def _stop_background(self) -> None:
        for p in self.pollers:
            p.request_stop()  # all at once: each may sit in a long poll of wait_time_seconds
        for p in self.pollers:
            p.stop()
        self.scheduler.stop()
        self.background = False

    def reset(self, clear_state: bool = False) -> None:
        """Empty moto and provision the template again; the app object is kept (it is not re-imported).

        When the stack's resources are untouched, they are emptied in place (microseconds); otherwise (a test
        deleted or recreated one, or the server is another process's) moto is reset and provisioned anew."""
        was_background = self.background
        self._stop_background()
        if clear_state and self.state_dir.exists():
            shutil.rmtree(self.state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        os.environ["WEKNORA_STATE_DIR"] = str(self.state_dir)
        if self._footprint is not None and self.server.empty_in_place(self._footprint):
            os.environ.update(self.resources.function_env)
            self._apply_local_env()
            self._apply_queue_urls(self.resources)
        else:
            self.server.reset()
            self.resources = self._provision()
        self.inject_duplicates(None)
        self.scheduler.restart()
        if was_background:
            self._start_background()

    def stop(self) -> None:
        self._stop_background()
        self.stop_http()
        if self._own_server:
            self.server.stop()

    # ---- driving it from tests ---------------------------------------------------------------------------

    def poller(self, handler_name: str) -> SqsPoller:
        suffix = f"-{self.stage}-{handler_name}"
        for p in self.pollers:
            if p.function_name.endswith(suffix):
                return p
        raise KeyError(handler_name)

    def inject_duplicates(self, predicate: DuplicatePredicate | bool | None = True) -> None:
        """Deliver matching SQS records a second time (True = every record once more; None/False = off)."""
        if predicate is True:
            pred: DuplicatePredicate | None = lambda _record: True  # noqa: E731
        elif predicate is False or predicate is None:
            pred = None
        else:
            pred = predicate
        self._duplicate_predicate = pred
        for p in self.pollers:
            p.duplicate_predicate = pred

    def poll_once(self) -> dict[str, BatchResult]:
        """One receive + invoke on every queue, in the calling thread (no waiting on empty queues)."""
        return {p.function_name: p.poll_once(wait_time_seconds=0) for p in self.pollers}

    def tick(self, now: datetime | None = None) -> list[ScheduledInvocation]:
        return self.scheduler.tick(now)

    def drain(self, timeout: float = 60.0) -> int:
        """Process messages until the app's queues are empty (nothing visible, nothing in flight) and no
        Step Functions execution is RUNNING. Returns the number of handler invocations; raises
        TimeoutError with a state dump if it does not get quiet in time."""
        deadline = time.monotonic() + timeout
        invoked = 0
        while True:
            if not self.background:
                results = self.poll_once()
                busy = [r for r in results.values() if not r.empty]
                invoked += len(busy)
                if busy:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"drain: still busy after {timeout}s\n{self.state_dump()}")
                    continue
            # Queues, then executions, then queues again: an execution may send a task message and finish
            # between the first two checks.
            if self._queues_idle() and not self._running_executions() and self._queues_idle():
                return invoked
            if time.monotonic() > deadline:
                raise TimeoutError(f"drain: not quiet after {timeout}s\n{self.state_dump()}")
            time.sleep(0.05)

    def _queues_idle(self) -> bool:
        return all(p.depth() == (0, 0) for p in self.pollers)

    def _client(self, service: str) -> Any:
        # Cached: drain() asks every 50 ms, and building a boto3 client costs more than the call.
        if service not in self._clients:
            make: Any = boto3.client  # the stubs only accept literal service names
            self._clients[service] = make(
                service,
                region_name=self.region,
                endpoint_url=self.server.url,
                # one SQS client serves every poller's threads at once (each queue's long polls and its
                # concurrent invocations' deletes): botocore's 10 connections made urllib3 discard the
                # rest with "Connection pool is full" warnings on the console
                config=Config(max_pool_connections=CLIENT_POOL_CONNECTIONS),
            )
        return self._clients[service]

    def _state_machine_arns(self) -> list[str]:
        sfn = self._client("stepfunctions")
        arns: list[str] = []
        for page in sfn.get_paginator("list_state_machines").paginate():
            arns.extend(sm["stateMachineArn"] for sm in page["stateMachines"])
        return arns

    def _running_executions(self) -> list[str]:
        sfn = self._client("stepfunctions")
        running: list[str] = []
        for arn in self._state_machine_arns():
            for page in sfn.get_paginator("list_executions").paginate(
                stateMachineArn=arn, statusFilter="RUNNING"
            ):
                running.extend(e["executionArn"] for e in page["executions"])
        return running

    def state_dump(self) -> str:
        """Queue depths (DLQs included), RUNNING executions and their last events: for timeout messages."""
        lines = []
        sqs = self._client("sqs")
        for url in sqs.list_queues().get("QueueUrls", []):
            a = sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )["Attributes"]
            consumer = next((p.function_name for p in self.pollers if p.queue_url == url), "-")
            lines.append(
                f"queue {url.rsplit('/', 1)[-1]}: visible={a['ApproximateNumberOfMessages']} "
                f"in_flight={a['ApproximateNumberOfMessagesNotVisible']} consumer={consumer}"
            )
        sfn = self._client("stepfunctions")
        for arn in self._running_executions():
            events = sfn.get_execution_history(executionArn=arn)["events"]
            lines.append(f"RUNNING {arn}: last events {[e['type'] for e in events[-3:]]}")
        return "\n".join(lines)

    # ---- HTTP -------------------------------------------------------------------------------------------

    def serve_http(self, host: str = "127.0.0.1", port: int = 8000, access_log: bool = True) -> str:
        """Serve the app's routes with ``chalice local``'s server in a thread; returns the base URL.

        ``access_log=False`` (`up` without ``--verbose``) logs only 5xx replies, which are server faults: a
        polling CLI and a browser console would otherwise flood the terminal with 200s, and a 4xx is the
        caller's business (it has the error's code and message)."""
        from chalice.local import ChaliceRequestHandler, CustomLocalChalice, LocalChalice, ThreadedHTTPServer
        from chalice.local import LocalDevServer as ChaliceDevServer

        class Handler(ChaliceRequestHandler):
            def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
                if access_log or (str(code).isdigit() and int(code) >= 500):
                    super().log_request(code, size)

            def _generic_handle(self) -> None:
                # chalice reads the first Content-Length with a bare int() (and drops the connection on a
                # bad one) and knows no chunked bodies; API Gateway's front door refuses what it cannot
                # frame with a 4xx, and so does the local one, in the envelope.
                refusal = framing_refusal(self.headers)
                if refusal is not None:
                    self.close_connection = True  # where the body ends is unknown: the stream is spent
                    refused = error_response(refusal)
                    self._send_http_response(refusal.status, refused.headers, json.dumps(refused.body))
                    return
                super()._generic_handle()

            def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
                # http.server's own refusals (a request line or headers it cannot read) in the envelope
                # too, not its HTML page.
                self.log_error("code %d, message %s", code, message)
                reason = message or self.responses.get(code, ("",))[0]
                refused = AppError(reason, code=_PROTOCOL_CODES.get(code, f"http_{code}"))
                body = json.dumps(error_response(refused).body).encode("utf-8")
                self.send_response(code, message)
                self.send_header("Connection", "close")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = do_PATCH = do_OPTIONS = _generic_handle

            def _send_http_response_with_body(self, code: int, headers: Any, body: str | bytes) -> None:
                if self.command != "HEAD":
                    super()._send_http_response_with_body(code, headers, body)
                    return
                # A HEAD reply has the headers a GET would have, and never a body (RFC 9110 §9.3.2).
                data = body if isinstance(body, bytes) else body.encode("utf-8")
                self.send_response(code)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Content-Type", headers.pop("Content-Type", "application/json"))
                self._send_headers(headers)

        class Server(ThreadedHTTPServer):
            # http.server's default backlog of 5 resets a burst of connections (a CLI uploading a folder).
            request_queue_size = HTTP_BACKLOG
            daemon_threads = True

        class LocalDevServer(ChaliceDevServer):
            def __init__(self, app: Any, config: Any, host: str, port: int, handler_cls: Any) -> None:
                super().__init__(app, config, host, port, handler_cls=handler_cls, server_cls=Server)

        # What chalice.local.create_local_server does: a thread-local current_request for a threaded server.
        if not isinstance(self.app, CustomLocalChalice):  # served before, by an earlier runtime: done
            CustomLocalChalice.__bases__ = (LocalChalice, self.app.__class__)
            self.app.__class__ = CustomLocalChalice
        server = LocalDevServer(self.app, self._chalice_config(), host, port, handler_cls=Handler)
        self._http = server
        self._http_thread = threading.Thread(
            target=server.server.serve_forever, name="local-http", daemon=True
        )
        self._http_thread.start()
        return f"http://{host}:{server.server.server_address[1]}"

    def stop_http(self) -> None:
        if self._http is not None:
            self._http.shutdown()
            self._http.server.server_close()
            self._http = None
