"""One moto server (server mode) that every local component talks to.

Server mode, not ``mock_aws``: decorator-mode DynamoDB loses atomic ``ADD`` updates under threads, and moto's
Step Functions interpreter runs executions in threads that call back into ``http://localhost:$MOTO_PORT``.

The server runs in a thread of this process (tests: a reset can empty it in place) or, with
``separate_process=True``, in a child process of its own (`make run` and the benches): moto's request
handling is about half of what the local stack's one Python process does, and in a thread it holds that
process's GIL while the stages wait; AWS's services do not run on the pipeline's cores either.

What reaches into moto's private internals (two hot paths replaced, the backend lookup remembered, a
stack emptied in place) lives in `moto_patches`, which applies it only on the moto version it was written
for; here only public interfaces are used.
"""

from __future__ import annotations

import argparse
import atexit
import json
import logging
import os
import signal
import subprocess
import sys
import threading
from typing import Any
from urllib.parse import parse_qs

import requests
from moto.moto_server.werkzeug_app import MotoRequestHandler
from werkzeug.serving import BaseWSGIServer, make_server

from chalicelib.local import moto_changes, moto_items, moto_patches, moto_queues, moto_tracing, moto_ttl
from chalicelib.local.moto_patches import Footprint

log = logging.getLogger(__name__)

# moto's default account; ARNs built locally must agree with the ones moto returns.
ACCOUNT_ID = "123456789012"

MOTO_CONFIG: dict[str, Any] = {
    "stepfunctions": {"execute_state_machine": True},
    # The "simple" Lambda backend never runs code but at least does not try to reach Docker.
    "lambda": {"use_docker": False},
}


class _DynamoDBSerialised:
    """WSGI middleware: one DynamoDB request at a time (on every moto version: it wraps moto's app from
    outside and fixes correctness, not speed). DynamoDB makes each conditional write and
    transaction atomic; moto's in-memory backend checks a condition and writes in two steps with no lock,
    so two racing requests on the server's threads could both pass a condition (two dedupe winners)."""

    def __init__(self, app: Any) -> None:
        self._app = app
        self._lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO")
        if path in _OWN_PATHS and moto_patches.patches_apply():
            query = environ.get("QUERY_STRING", "")
            if path == moto_queues.QUEUES_PATH:  # SQS: its own locks; the DynamoDB requests go on
                length = int(environ.get("CONTENT_LENGTH") or 0)
                body = moto_queues.answer(query, environ["wsgi.input"].read(length), ACCOUNT_ID)
            elif path == moto_ttl.SWEEP_PATH:
                region = parse_qs(query).get("region", ["us-east-1"])[0]
                body = json.dumps({"deleted": self.sweep_expired(region)}).encode()
            else:
                # the snapshot's change log: under the lock, so it is one cut between whole requests
                with self._lock:
                    body = moto_changes.answer(query, ACCOUNT_ID)
                    moto_items.end_of_request()
                    _return_free_memory()  # once a snapshot interval
            start_response(
                "200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))]
            )
            return [body]
        if not environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            return self._app(environ, start_response)
        with self._lock:
            try:
                return list(self._app(environ, start_response))
            finally:
                moto_items.end_of_request()  # between requests: what changed is written, memory bounded

    def sweep_expired(self, region: str) -> int:
        """Deletes the DynamoDB items whose TTL passed (`moto_ttl`), between whole requests."""
        with self._lock:
            try:
                return moto_ttl.sweep(ACCOUNT_ID, region)
            finally:
                moto_items.end_of_request()


_OWN_PATHS = frozenset({moto_changes.CHANGES_PATH, moto_queues.QUEUES_PATH, moto_ttl.SWEEP_PATH})


def _return_free_memory() -> None:
    """glibc keeps freed memory in its per-thread arenas (moto serves each request on a thread of its own), so
    the process's resident size creeps up although Python holds no more: hand the free pages back (glibc
    only; elsewhere nothing to do)."""
    if _libc is not None:
        _libc.malloc_trim(0)


def _glibc() -> Any:
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None or not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(name)
    return libc if hasattr(libc, "malloc_trim") else None


_libc = _glibc()


class _AtomicMotoServer:
    """moto's WSGI app with DynamoDB requests serialised (the rest stays concurrent), served by werkzeug in
    a thread, as moto's ThreadedMotoServer serves it without the middleware."""

    def __init__(self, port: int) -> None:
        self.app = _DynamoDBSerialised(moto_patches.wsgi_dispatcher())
        self._server: BaseWSGIServer = make_server(
            "127.0.0.1", port, self.app, threaded=True, request_handler=MotoRequestHandler
        )
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto-server", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join(timeout=10)
        self._server.server_close()


class MotoServer:
    """A moto server on 127.0.0.1 (a thread here, or a child process) plus the environment that points
    boto3/pynamodb at it."""

    def __init__(self, port: int = 0, region: str = "us-east-1", *, separate_process: bool = False) -> None:
        self._requested_port = port
        self.region = region
        self.separate_process = separate_process
        self._server: _AtomicMotoServer | None = None
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

    def start(self, *, point_sdk: bool = True) -> MotoServer:
        """Starts the server; `point_sdk=False` leaves this process's AWS environment alone (a second
        server of its own, e.g. one S3-compatible endpoint per storage backend in the tests)."""
        if self.running:
            return self
        if self.separate_process:
            self._process, self.port = _start_child(self._requested_port, self.region)
        else:
            self._server, self.port = _start_in_thread(self._requested_port)
        if point_sdk:
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
        return moto_patches.footprint(ACCOUNT_ID, self.region)

    def empty_in_place(self, expected: Footprint) -> bool:
        """Drop every item, message, object and execution but keep the resources themselves: the same end
        state as :meth:`reset` followed by provisioning again, in microseconds instead of ~40 API calls.
        Returns False (and changes nothing) when the resources are not exactly ``expected``, the server is
        another process's, or moto is not the version the in-place emptying was written for."""
        if self._server is None or self.separate_process:
            return False
        return moto_patches.empty_in_place(ACCOUNT_ID, self.region, expected)

    def sweep_expired(self) -> int:
        """Runs the server's TTL sweep now (the local stack's server runs one every `SWEEP_SECONDS`);
        how many items it deleted."""
        reply = requests.post(f"{self.url}{moto_ttl.SWEEP_PATH}?region={self.region}", timeout=120)
        reply.raise_for_status()
        return int(reply.json()["deleted"])

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
    moto_patches.speed_up_moto()
    server = _AtomicMotoServer(port)
    server.start()
    return server, server.port


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
        # fewer glibc arenas for its many short request threads: less memory kept free and unreturned
        env={**os.environ, "MALLOC_ARENA_MAX": os.environ.get("MALLOC_ARENA_MAX", "2")},
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
    moto_tracing.start_if_asked()  # off unless the environment asks for heap diffs
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
    if moto_patches.patches_apply():  # moto never expires an item by its TTL: the server does it here
        threading.Thread(
            target=_sweep_until, args=(server, region, stopped), name="ttl-sweeper", daemon=True
        ).start()
    stopped.wait()
    server.stop()


def _sweep_until(server: _AtomicMotoServer, region: str, stopped: threading.Event) -> None:
    while not stopped.wait(moto_ttl.SWEEP_SECONDS):
        try:
            deleted = server.app.sweep_expired(region)
        except Exception:  # a background loop: one failed sweep must not end TTL for the process
            log.exception("the DynamoDB TTL sweep failed; the next runs in %ds", moto_ttl.SWEEP_SECONDS)
            continue
        if deleted:
            log.info("deleted %d DynamoDB item(s) whose TTL passed", deleted)


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
